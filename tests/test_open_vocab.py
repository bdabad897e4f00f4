"""The open vocabulary (asrlib/lang/open_vocab.py): wordfreq's words that CMUdict pronounces, and the interpolated
n-gram: exact mixed probabilities for the n-grams either model lists, every history's distribution summing to one,
the ARPA file round trip."""

import math

import pytest

from asrlib.errors import AsrError
from asrlib.lang.arpa import read_arpa, write_arpa
from asrlib.lang.lexicon import cmudict_words
from asrlib.lang.ngram import count_ngrams, estimate_kn
from asrlib.lang.open_vocab import check_weight, interpolate, unigram_lm, wordfreq_words

TEXT = ["THE CAT SAT", "THE DOG SAT DOWN", "A CAT RAN", "THE CAT RAN DOWN THE HILL", "I SAW A DOG"]
BACKGROUND = {"THE": 0.3, "A": 0.2, "CAT": 0.05, "HOUSE": 0.25, "TREE": 0.2}


def _models():
    vocab = {w for s in TEXT for w in s.split()} | set(BACKGROUND)
    a = estimate_kn(count_ngrams([s.split() for s in TEXT], 3), 3, vocab)
    return a, unigram_lm(BACKGROUND, 0.2), sorted(vocab) + ["</s>"]


@pytest.mark.parametrize("weight", [0.0, 0.1, 0.5])
def test_interpolated_model_is_normalised_and_exact(weight):
    a, b, vocab = _models()
    m = interpolate(a, b, weight)
    for h in [(), ("<s>",), ("THE",), ("<s>", "THE"), ("THE", "CAT"), ("HOUSE",), ("CAT", "HOUSE")]:
        assert sum(m.prob(h, w) for w in vocab) == pytest.approx(1.0, abs=1e-9), h
    # every n-gram either model lists keeps its exact mixture
    for g in [("<s>", "THE", "CAT"), ("THE", "CAT"), ("HOUSE",), ("SAT",), ("DOWN", "THE", "HILL")]:
        want = (1 - weight) * a.prob(g[:-1], g[-1]) + weight * b.prob(g[:-1], g[-1])
        assert m.prob(g[:-1], g[-1]) == pytest.approx(want, rel=1e-12), g
    if weight == 0.0:
        for h, w in [(("THE", "DOG"), "HOUSE"), (("I",), "TREE"), (("<s>", "I"), "SAW")]:
            assert m.prob(h, w) == pytest.approx(a.prob(h, w), rel=1e-9)


def test_background_words_gain_mass_after_any_history(tmp_path):
    a, b, vocab = _models()
    m = interpolate(a, b, 0.2)
    # HOUSE is never in the text: the transcripts' model gives it only the uniform share. After a history whose
    # n-grams the model lists, HOUSE backs off (so it gets less than the exact mixture, as in SRILM's static mixing),
    # but it keeps most of the mass the background gives it
    for h in [("<s>",), ("THE", "CAT")]:
        exact = 0.8 * a.prob(h, "HOUSE") + 0.2 * b.prob((), "HOUSE")
        assert exact > m.prob(h, "HOUSE") > 0.5 * exact > 3 * a.prob(h, "HOUSE")
    path = tmp_path / "lm.arpa"
    write_arpa(m, path)
    back = read_arpa(path)
    for h, w in [(("<s>", "THE"), "CAT"), (("THE", "CAT"), "HOUSE"), ((), "TREE"), (("DOG",), "</s>")]:
        assert math.log10(back.prob(h, w)) == pytest.approx(math.log10(m.prob(h, w)), abs=2e-6)


def test_wordfreq_words_are_frequent_pronounceable_words():
    pytest.importorskip("wordfreq")
    words = wordfreq_words(500)
    assert len(words) == 500 and sum(words.values()) == pytest.approx(1.0)
    assert set(words) <= cmudict_words() and all(w.replace("'", "").isalpha() for w in words)
    assert list(words)[:3] == ["THE", "TO", "AND"]  # most frequent first
    probs = list(words.values())
    assert probs == sorted(probs, reverse=True)
    assert set(wordfreq_words(100)) < set(words)


def test_settings_are_checked():
    with pytest.raises(AsrError, match="vocab_size"):
        wordfreq_words(0)
    with pytest.raises(AsrError, match="vocab_source"):
        check_weight(0.1, [""])
    with pytest.raises(AsrError, match="vocab_lm_weight"):
        check_weight(1.0, ["wordfreq"])
    with pytest.raises(AsrError, match="weight"):
        interpolate(*_models()[:2], 1.5)
    check_weight(0.0, [""])


def test_prepare_lang_refuses_a_weight_it_cannot_apply(tmp_path):
    """lang.vocab_lm_weight mixes into the n-gram estimated from lang.lm_text: with another grammar, or a given ARPA
    file, it would be silently ignored, so it is an error."""
    import subprocess
    import sys

    from helpers import ROOT, env_with_root

    (tmp_path / "text").write_text("u1 HELLO WORLD\n")
    cmd = [sys.executable, "-m", "steps.prepare_lang", "--config", str(ROOT / "recipes/speechocean762/config.yaml")]
    cmd += ["--set", "lang.grammar=digit_loop", "--text", str(tmp_path / "text"), "--lang-dir", str(tmp_path / "lang")]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env_with_root(ROOT), cwd=ROOT)
    assert r.returncode != 0 and "lang.vocab_lm_weight" in r.stderr and "Traceback" not in r.stderr
