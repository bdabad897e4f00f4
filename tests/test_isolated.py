"""Isolated-word decoding by total CTC probability (asrlib.decode.isolated, steps.decode --method isolated)."""

import json
import itertools
from pathlib import Path

import numpy as np
import pytest

from asrlib.decode.isolated import IsolatedWordScorer
from asrlib.errors import AsrError
from asrlib.io.tables import read_table_dict
from asrlib.kaldi_io import write_matrices
from asrlib.lang.lexicon import read_lexicon, read_tokens
from steps import decode, prepare_lang
from tests.test_search import DIGITS, peaky, word_frames

ROOT = Path(__file__).resolve().parents[1]
TEN = [w for w in DIGITS if w != "OH"]


def make_lang(tmp_path: Path, grammar: str = "one_word", words=None) -> Path:
    text = tmp_path / "text"
    text.write_text("".join(f"u{i} {w.lower()}\n" for i, w in enumerate(DIGITS)))
    lang = tmp_path / f"lang_{grammar}"
    sets = [f"lang.grammar={grammar}"] + ([f"lang.grammar_words=[{', '.join(words)}]"] if words else [])
    assert (
        prepare_lang.main(
            ["--config", str(ROOT / "recipes/digits/config.yaml"), "--text", str(text), "--lang-dir", str(lang)]
            + [x for s in sets for x in ("--set", s)]
        )
        == 0
    )
    return lang


def brute_force(logprobs: np.ndarray, prons, tokens) -> float:
    """log sum over every frame labelling that collapses (repeats merged, blanks dropped) to one of ``prons``."""
    total = -np.inf
    for pron in prons:
        target = [tokens[p] for p in pron]
        alphabet = [0] + sorted(set(target))
        for path in itertools.product(alphabet, repeat=len(logprobs)):
            collapsed = [t for i, t in enumerate(path) if t != 0 and (i == 0 or path[i - 1] != t)]
            if collapsed == target:
                total = np.logaddexp(total, sum(logprobs[i, t] for i, t in enumerate(path)))
    return total


@pytest.fixture(scope="module")
def ten(tmp_path_factory):
    return make_lang(tmp_path_factory.mktemp("iso"), words=TEN)


def test_scores_are_the_sum_over_all_alignments_and_pronunciations(ten):
    """Every candidate's score equals brute-force enumeration of its CTC paths on random log-probabilities (ZERO has
    two pronunciations in CMUdict: both count); OH, outside the set's words, is no candidate."""
    scorer = IsolatedWordScorer(ten)
    tokens, lex = read_tokens(ten / "tokens.txt"), read_lexicon(ten / "lexicon.txt")
    assert scorer.words == sorted(TEN) and len(lex["ZERO"]) == 2
    rng = np.random.default_rng(0)
    raw = rng.normal(size=(5, len(tokens)))
    lp = (raw - np.logaddexp.reduce(raw, axis=1, keepdims=True)).astype(np.float32)
    got = dict(zip(scorer.words, scorer.scores(lp)))
    for w in ("ZERO", "TWO", "EIGHT", "SEVEN"):
        assert got[w] == pytest.approx(brute_force(lp, lex[w], tokens), abs=1e-4), w
    assert dict(zip(scorer.words, scorer.scores(lp[:4])))["SEVEN"] == -np.inf  # 5 phones do not fit in 4 frames


def test_models_are_combined_by_adding_their_scores(ten):
    """A clear word wins with posterior ~1; a second model that hears another word as clearly makes a tie that a
    third model breaks; no word fitting the frames gives no word."""
    scorer = IsolatedWordScorer(ten)
    n = len(read_tokens(ten / "tokens.txt"))
    six = peaky(word_frames(ten, ["SIX"]), n)
    eight = peaky(word_frames(ten, ["EIGHT"]), n)[: len(six)]
    words, post = scorer.decode([six])
    assert words == ["SIX"] and np.exp(post.max()) > 0.99
    assert scorer.decode([six, six, eight])[0] == ["SIX"] and scorer.decode([six, eight, eight])[0] == ["EIGHT"]
    assert scorer.decode([six[:1]]) == ([], pytest.approx(np.full(10, -np.inf)))  # one frame: no word fits


def test_only_a_one_word_lang_dir(tmp_path, ten):
    """The candidates are read off G.fst (a lang dir written without steps.prepare_lang works too); another G is
    refused."""
    from asrlib.lang.graphs import build_tlg
    from asrlib.lang.lexicon import build_lexicon, write_lang_files

    plain = tmp_path / "plain"
    write_lang_files(plain, build_lexicon(DIGITS))
    build_tlg(plain, grammar="one_word")
    assert IsolatedWordScorer(plain).words == sorted(DIGITS)
    for grammar in ("digit_loop", "words_2"):
        with pytest.raises(AsrError, match="is not a one-word grammar"):
            IsolatedWordScorer(make_lang(tmp_path, grammar))
    with pytest.raises(AsrError, match="does not exist"):
        IsolatedWordScorer(tmp_path)
    with pytest.raises(AsrError, match=r"has \d+ tokens"):
        IsolatedWordScorer(ten).scores(np.zeros((5, 3), np.float32))


def test_steps_decode_isolated_with_several_models(tmp_path, ten):
    """steps.decode --method isolated: hyp.txt, posteriors.txt, no_final.txt; the models' sets must match; the
    other methods refuse several archives."""
    n = len(read_tokens(ten / "tokens.txt"))
    clear = {u: peaky(word_frames(ten, [w]), n) for u, w in [("a", "THREE"), ("b", "NINE")]}
    wrong = {"a": peaky(word_frames(ten, ["FIVE"]), n)[: len(clear["a"])], "b": clear["b"]}
    archives = []
    for name, mats in [("m1", clear), ("m2", clear), ("m3", wrong), ("short", {"a": clear["a"]})]:
        write_matrices(tmp_path / name / "lp.ark", mats.items())
        archives.append(tmp_path / name / "lp.scp")
    cfg = str(ROOT / "recipes/digits/config.yaml")
    out = tmp_path / "dec"
    assert (
        decode.main(
            [
                "--config",
                cfg,
                "--method",
                "isolated",
                "--lang-dir",
                str(ten),
                "--out-dir",
                str(out),
                "--logprobs",
                *map(str, archives[:3]),
            ]
        )
        == 0
    )
    assert read_table_dict(out / "hyp.txt") == {"a": "THREE", "b": "NINE"}  # two models outvote the third
    post = read_table_dict(out / "posteriors.txt")
    assert post["b"].split()[0] == "NINE" and float(post["b"].split()[1]) > 0.99
    assert (out / "no_final.txt").read_text() == ""
    rec = json.loads((out / "run.json").read_text())  # what made the search: its command and config
    assert rec["kind"] == "decode" and rec["command"][:3] == ["python", "-m", "steps.decode"]
    assert "isolated" in rec["command"] and rec["summary"]["models"] == 3 and rec["config"]["decode"]
    write_matrices(tmp_path / "m2" / "lp.ark", wrong.items())  # a model's log-posteriors rewritten: searched again
    assert (
        decode.main(
            [
                "--config",
                cfg,
                "--method",
                "isolated",
                "--lang-dir",
                str(ten),
                "--out-dir",
                str(out),
                "--logprobs",
                *map(str, archives[:3]),
            ]
        )
        == 0
    )
    assert read_table_dict(out / "hyp.txt") == {"a": "FIVE", "b": "NINE"}
    with pytest.raises(AsrError, match="hold different utterances"):
        decode.main(
            [
                "--config",
                cfg,
                "--method",
                "isolated",
                "--lang-dir",
                str(ten),
                "--out-dir",
                str(tmp_path / "d2"),
                "--logprobs",
                str(archives[0]),
                str(archives[3]),
            ]
        )
    with pytest.raises(AsrError, match="need --method isolated"):
        decode.main(
            [
                "--config",
                cfg,
                "--method",
                "tlg",
                "--lang-dir",
                str(ten),
                "--out-dir",
                str(tmp_path / "d3"),
                "--logprobs",
                str(archives[0]),
                str(archives[1]),
            ]
        )


def test_log_probabilities_of_another_rank_are_a_clear_error(ten):
    """One frame's vector, or a batch, instead of one utterance's [T, V] matrix: the shape error, not an IndexError."""
    scorer = IsolatedWordScorer(ten)
    for shape in ((len(scorer.tokens),), (2, 5, len(scorer.tokens))):
        with pytest.raises(AsrError, match=r"log-probabilities have shape"):
            scorer.scores(np.zeros(shape, np.float32))
