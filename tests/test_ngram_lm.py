"""Word n-gram estimation (asrlib/lang/ngram.py, steps.train_lm): interpolated modified Kneser-Ney written as ARPA,
checked through the ARPA file itself (parsed here, probabilities looked up with back-off), by hand, by kaldilm
building a TLG from it, and through steps.prepare_lang's lang.lm_text."""

import logging
import math
from pathlib import Path
from typing import Dict, Tuple

import pytest

from asrlib.config import load_config, lm_texts
from asrlib.decode.search import TlgDecoder
from asrlib.errors import AsrError
from asrlib.lang.graphs import build_tlg
from asrlib.lang.lexicon import build_lexicon, read_tokens, write_lang_files
from asrlib.lang.ngram import UNK, build_arpa, estimate_lm, kn_discounts
from steps.prepare_lang import main as prepare_lang_main
from steps.train_lm import main as train_lm_main
from test_search import DIGITS, peaky, word_frames

ROOT = Path(__file__).resolve().parents[1]
Ngram = Tuple[str, ...]


# ---------------------------------------------------------------- the test's own ARPA reader and back-off lookup
def read_arpa(path: Path) -> Tuple[int, Dict[Ngram, Tuple[float, float]]]:
    """``(order, {ngram: (log10 p, log10 back-off)})`` from an ARPA file; checks the \\data\\ counts."""
    declared, table, order = {}, {}, 0
    section = None
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        if line == "\\data\\":
            section = "data"
        elif line == "\\end\\":
            section = "end"
        elif line.startswith("\\") and line.endswith("-grams:"):
            order = int(line[1 : line.index("-")])
            section = "ngrams"
        elif section == "data":
            k, n = line.split()[1].split("=")
            declared[int(k)] = int(n)
        elif section == "ngrams":
            parts = line.split()
            words = tuple(parts[1 : 1 + order])
            assert len(words) == order, line
            bow = float(parts[1 + order]) if len(parts) > 1 + order else 0.0
            table[words] = (float(parts[0]), bow)
    assert section == "end", "no \\end\\"
    for k, n in declared.items():
        assert sum(len(g) == k for g in table) == n, f"\\data\\ says ngram {k}={n}"
    return max(declared), table


def arpa_prob(table: Dict[Ngram, Tuple[float, float]], history: Ngram, word: str) -> float:
    """p(word | history) by ARPA back-off: the n-gram's own probability, else bow(history) x p(word | shorter)."""
    if history + (word,) in table:
        return 10 ** table[history + (word,)][0]
    assert history, f"unigram {word} missing"
    return 10 ** table.get(history, (0.0, 0.0))[1] * arpa_prob(table, history[1:], word)


def assert_normalised(arpa: Path) -> int:
    """Every history of the model (each n-gram below the top order, and the empty one) gives a distribution over
    the vocabulary (every unigram but <s>, </s> included) that sums to 1. Returns the number of histories."""
    order, table = read_arpa(arpa)
    vocab = [g[0] for g in table if len(g) == 1 and g[0] != "<s>"]
    histories = [()] + [g for g in table if len(g) < order and g[-1] != "</s>"]
    for h in histories:
        total = sum(arpa_prob(table, h, w) for w in vocab)
        assert total == pytest.approx(1.0, abs=1e-4), f"history {h}: probabilities sum to {total}"
    return len(histories)


# ---------------------------------------------------------------- (a) normalisation through the ARPA file
TINY = [
    "one two three",
    "one two",
    "two three one two three four",
    "four four four",
    "three one",
    "one two three",
    "five six one two",
    "six six two",
]


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_every_history_sums_to_one(tmp_path, order):
    text = tmp_path / "text"
    text.write_text("\n".join(TINY) + "\n")
    words = tmp_path / "words.txt"  # a Kaldi words.txt: SEVEN is never used, FIVE SIX are OOV
    words.write_text(
        "".join(
            f"{w} {i}\n" for i, w in enumerate(["<eps>", "four", "one", "seven", "three", "two", "#0", "<s>", "</s>"])
        )
    )
    arpa = tmp_path / "lm.arpa"
    info = build_arpa([text], arpa, order, words=words)
    assert info["oov_tokens"] == 4 and info["oov_types"] == 2
    assert assert_normalised(arpa) >= (1 if order == 1 else 8)  # histories checked: (), <s>, each unigram, ...
    _, table = read_arpa(arpa)
    assert ("seven",) in table and (UNK,) in table and ("five",) not in table
    assert table[("<s>",)][0] == -99


def test_fallback_discounts_still_normalised(tmp_path, caplog):
    # trigrams: each seen exactly twice, no singletons -> Y undefined -> absolute discounting with 0.5.
    # bigrams (continuation counts, <s> a raw): 1, 1, 1, 2 -> Y = 3/5 = D1; D2 = 2 - 0 = 2 is out of (0, 2) and
    # n3 = 0 -> D2 = D3+ = Y. unigrams: continuation counts 1, 1, 1 -> no doubletons -> 0.5.
    text = tmp_path / "text"
    text.write_text("a b c\na b c\n")
    with caplog.at_level(logging.INFO, logger="asrlib.lang.ngram"):
        lm = estimate_lm([text], 3)
    assert lm.discounts == [(0.5, 0.5, 0.5), pytest.approx((0.6, 0.6, 0.6)), (0.5, 0.5, 0.5)]
    assert "3-grams: no n-gram seen once" in caplog.text and "2-grams: D2 = 2.0000 is not in (0, 2)" in caplog.text
    build_arpa([text], tmp_path / "lm.arpa", 3)
    assert_normalised(tmp_path / "lm.arpa")


def test_discount_formula_and_out_of_range_fallback():
    # n1..n4 = 1, 2, 1, 1: Y = 1/5; D1 = 1 - 2(0.2)(2/1) = 0.2, D2 = 2 - 3(0.2)(1/2) = 1.7, D3+ = 3 - 4(0.2)(1/1) = 2.2
    assert kn_discounts([1, 2, 2, 3, 4, 9]) == pytest.approx((0.2, 1.7, 2.2))
    # n1..n4 = 1, 2, 0, 0: D2 = 2 - 0 = 2 is not below 2 and n3 = 0 -> both fall back to Y = 0.2
    assert kn_discounts([1, 2, 2]) == pytest.approx((0.2, 0.2, 0.2))
    assert kn_discounts([3, 3, 7]) == (0.5, 0.5, 0.5)  # no singletons
    assert kn_discounts([1, 1, 5]) == (0.5, 0.5, 0.5)  # no doubletons


# ---------------------------------------------------------------- (b) a value computed by hand
def test_bigram_probabilities_by_hand(tmp_path):
    """Bigram model of the 3 sentences "A C", "A C A C", "C A C" (padded with <s> ... </s>).

    Bigram counts (top order: raw): <s> A 2, <s> C 1, A C 4, C A 2, C </s> 3 (12 tokens).
    Counts-of-counts n1..n4 = 1, 2, 1, 1 -> Y = 1/(1 + 2*2) = 0.2,
      D1 = 1 - 2*0.2*2/1 = 0.2,  D2 = 2 - 3*0.2*1/2 = 1.7,  D3+ = 3 - 4*0.2*1/1 = 2.2.
    Unigrams (continuation counts, distinct left neighbours): A {<s>, C} 2, C {<s>, A} 2, </s> {C} 1; total 5.
      n1..n4 = 1, 2, 0, 0 -> Y = 0.2, D1 = 0.2; D2 = 2 - 0 = 2 is out of (0, 2) -> falls back to Y = 0.2.
      gamma() = (0.2 + 0.2 + 0.2)/5 = 0.12, spread uniformly over {A, C, </s>}: 0.04 each.
      p(A) = (2 - 0.2)/5 + 0.04 = 0.40,  p(C) = 0.40,  p(</s>) = (1 - 0.2)/5 + 0.04 = 0.20.
    History A: only A C (4): gamma(A) = 2.2/4 = 0.55;  p(C | A) = (4 - 2.2)/4 + 0.55*0.40 = 0.45 + 0.22 = 0.67.
    History C: C A (2), C </s> (3): gamma(C) = (1.7 + 2.2)/5 = 0.78;
      p(A | C) = (2 - 1.7)/5 + 0.78*0.40 = 0.06 + 0.312 = 0.372;  p(C | C) = 0.78*0.40 = 0.312 (back-off).
    History <s>: <s> A (2), <s> C (1): gamma(<s>) = (1.7 + 0.2)/3 = 1.9/3;
      p(C | <s>) = (1 - 0.2)/3 + (1.9/3)*0.40 = (0.8 + 0.76)/3 = 0.52.
    """
    text = tmp_path / "text"
    text.write_text("A C\nA C A C\nC A C\n")
    arpa = tmp_path / "lm.arpa"
    build_arpa([text], arpa, 2)
    _, table = read_arpa(arpa)
    tol = dict(abs=2e-6)  # 6 decimals of log10 in the file
    assert arpa_prob(table, (), "A") == pytest.approx(0.40, **tol)
    assert arpa_prob(table, (), "</s>") == pytest.approx(0.20, **tol)
    assert arpa_prob(table, ("A",), "C") == pytest.approx(0.67, **tol)
    assert arpa_prob(table, ("C",), "A") == pytest.approx(0.372, **tol)
    assert arpa_prob(table, ("C",), "C") == pytest.approx(0.312, **tol)
    assert arpa_prob(table, ("<s>",), "C") == pytest.approx(0.52, **tol)
    assert 10 ** table[("C",)][1] == pytest.approx(0.78, **tol)
    assert ("C", "C") not in table


# ---------------------------------------------------------------- (c) kaldilm and a TLG from lm_text
def test_tlg_from_lm_text_decodes(tmp_path):
    write_lang_files(tmp_path, build_lexicon(DIGITS))
    text = tmp_path / "lm_text"  # Kaldi text, lower case: upper-cased like the lexicon; "ten" is OOV -> <unk>
    text.write_text("u1 one two oh\nu2 one two three\nu3 nine ten\nu4 eight two\nu5 one two oh oh\n")
    build_tlg(tmp_path, grammar="arpa", lm_text=[text], lm_text_has_utt_ids=True, ngram_order=3)
    arpa = tmp_path / "lm_3gram.arpa"
    _, table = read_arpa(arpa)
    assert ("ONE", "TWO", "OH") in table and (UNK,) in table and ("<s>", "U1") not in table
    assert_normalised(arpa)
    lp = peaky(word_frames(tmp_path, ["ONE", "TWO", "OH"]), len(read_tokens(tmp_path / "tokens.txt")))
    assert TlgDecoder(tmp_path).decode(lp) == ["ONE", "TWO", "OH"]
    lp = peaky(word_frames(tmp_path, ["SEVEN", "FIVE"]), len(read_tokens(tmp_path / "tokens.txt")))
    assert TlgDecoder(tmp_path).decode(lp) == ["SEVEN", "FIVE"]  # words the text never uses: back-off to uniform


def test_prepare_lang_estimates_from_lm_text(tmp_path):
    data = tmp_path / "data"
    (data / "train").mkdir(parents=True)
    (data / "train" / "text").write_text("u1 one two\nu2 oh nine\nu3 one two nine\n")
    cfg = ROOT / "recipes/digits/config.yaml"
    args = [
        "--text",
        str(data / "train/text"),
        "--lang-dir",
        str(data / "lang"),
        "--config",
        str(cfg),
        "--set",
        "lang.grammar=arpa",
        "--set",
        "lang.lm_text=train/text",  # relative: a file of the data dir
        "--set",
        "lang.lm_text_has_utt_ids=true",
        "--set",
        "lang.ngram_order=2",
    ]
    assert prepare_lang_main(args) == 0
    assert (data / "lang" / "TLG.fst").is_file()
    order, table = read_arpa(data / "lang" / "lm_2gram.arpa")
    assert order == 2 and ("ONE", "TWO") in table
    full = len(table)
    # stage 3 passes the lang.lm_* pruning settings on: the same LM pruned to a target size
    assert prepare_lang_main(args + ["--set", f"lang.lm_prune_target={full - 3}"]) == 0
    assert len(read_arpa(data / "lang" / "lm_2gram.arpa")[1]) == full - 3
    with pytest.raises(AsrError, match=r"LM text .*missing\.txt does not exist \(lang\.lm_text\)"):
        prepare_lang_main(args[:-1] + ["lang.ngram_order=3", "--set", "lang.lm_text=[train/text, missing.txt]"])
    with pytest.raises(AsrError, match="neither lang.arpa .* nor lang.lm_text"):
        prepare_lang_main(args[:6] + ["--set", "lang.grammar=arpa", "--set", "lang.ngram_order=3"])


def test_lm_text_config(tmp_path):
    conf = tmp_path / "c.yaml"
    conf.write_text("lang:\n  grammar: arpa\n  lm_text: [train/text, /abs/lm.txt]\n")
    lang = load_config(conf).lang
    assert lm_texts(lang, "data") == [Path("data/train/text"), Path("/abs/lm.txt")]
    assert lm_texts(load_config(conf, ["lang.arpa=/x.arpa"]).lang, "data") == []  # a given ARPA wins
    assert lm_texts(load_config(conf, ["lang.lm_text=t.txt"]).lang, "d") == [Path("d/t.txt")]
    with pytest.raises(AsrError, match="lang.lm_text: wrong type"):
        load_config(conf, ["lang.lm_text=3"])
    sw = load_config(ROOT / "recipes/switchboard/config.yaml").lang
    assert lm_texts(sw, "data") == [Path("data/train_nosp/text")] and sw.lm_text_has_utt_ids


# ---------------------------------------------------------------- (d) empty text, order, OOVs, the step
def test_empty_text_and_bad_order_are_clear_errors(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    with pytest.raises(AsrError, match=r"LM text .*empty\.txt holds no words"):
        build_arpa([empty], tmp_path / "lm.arpa", 3)
    ids_only = tmp_path / "text"
    ids_only.write_text("utt1\nutt2 \n")
    with pytest.raises(AsrError, match="text holds no words after the utterance ids"):
        estimate_lm([ids_only], 3, has_utt_ids=True)
    with pytest.raises(AsrError, match="order must be at least 1, got 0"):
        estimate_lm([ids_only], 0)
    with pytest.raises(AsrError, match="nope.txt does not exist"):
        build_arpa([tmp_path / "nope.txt"], tmp_path / "lm.arpa", 3)
    bos = tmp_path / "bos.txt"
    bos.write_text("a b\n<s> a b </s>\n")
    with pytest.raises(AsrError, match=r"bos\.txt:2: the text holds '<s>'"):
        estimate_lm([bos], 2)
    assert not (tmp_path / "lm.arpa").exists()


def test_oov_report_and_train_lm_step(tmp_path, capsys):
    text = tmp_path / "text"
    text.write_text("u1 a b zz\nu2 a yy zz\nu3 b a\n")
    words = tmp_path / "vocab.txt"  # a plain word list works too
    words.write_text("a\nb\n")
    out = tmp_path / "lm" / "lm.arpa"
    args = ["--text", str(text), "--has-utt-ids", "--order", "2", "--words", str(words), "--out", str(out)]
    assert train_lm_main(args) == 0  # its log goes to stderr (and lm/log/)
    err = capsys.readouterr().err
    assert "3 OOV token(s) mapped to <unk> (3 not in" in err and "zz (2), yy (1)" in err
    assert "3 sentence(s), 8 word token(s), 3 OOV token(s)" in err and "1-grams 5, 2-grams 9" in err
    _, table = read_arpa(out)
    assert ("a", UNK) in table and (UNK, "</s>") in table and ("zz",) not in table
    assert_normalised(out)
    mtime = out.stat().st_mtime_ns
    assert train_lm_main(args) == 0 and out.stat().st_mtime_ns == mtime  # complete: skipped
    text.write_text("u1 a b\n")
    assert train_lm_main(args) == 0 and out.stat().st_mtime_ns != mtime  # the text changed: redone
    cfg = tmp_path / "c.yaml"
    cfg.write_text("lang:\n  ngram_order: 1\n  lm_text_has_utt_ids: true\n")
    assert train_lm_main(["--config", str(cfg), "--text", str(text), "--out", str(tmp_path / "u.arpa")]) == 0
    order, table = read_arpa(tmp_path / "u.arpa")
    assert (
        order == 1
        and ("u1",) not in table
        and math.isclose(sum(10**p for g, (p, _) in table.items() if g != ("<s>",)), 1.0, abs_tol=1e-5)
    )
