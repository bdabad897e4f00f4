"""LM training at scale (asrlib/lang/arpa.py, prune.py, synthetic.py, the text report of ngram.py): ARPA files read
back with clear errors, pruning to a target size that stays normalised, count cut-offs, bad text listed."""

import math
import random
from pathlib import Path

import pytest

from asrlib.errors import AsrError
from asrlib.lang.arpa import perplexity, read_arpa
from asrlib.lang.ngram import BOS, EOS, UNK, NgramLm, build_arpa, estimate_lm, write_arpa
from asrlib.lang.prune import entropy_deltas, prune_counts, prune_entropy
from asrlib.lang.synthetic import spell_vocabulary, write_zipf_text


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("zipf")
    write_zipf_text(d / "text", spell_vocabulary(300, seed=1), 20000, seed=2, batch=256)
    return d / "text"


def assert_normalised(lm: NgramLm, histories: int = 60) -> None:
    """Sampled histories (the empty one, <s>, and n-grams below the top order) sum to one over the vocabulary."""
    vocab = [g[0] for g in lm.probs[0]]
    hs = [g for k in range(lm.order - 1) for g in lm.probs[k] if g[-1] != EOS]
    random.Random(0).shuffle(hs)
    for h in [(), (BOS,), *hs[:histories]]:
        assert sum(lm.prob(h, w) for w in vocab) == pytest.approx(1.0, abs=1e-5), h


def test_arpa_round_trip_gives_the_same_model(corpus, tmp_path):
    lm = estimate_lm([corpus], 3)
    write_arpa(lm, tmp_path / "lm.arpa")
    back = read_arpa(tmp_path / "lm.arpa")
    assert back.order == 3 and back.ngram_counts() == lm.ngram_counts()
    sents = [ln.split() for ln in corpus.read_text().splitlines()[:200]]
    assert perplexity(back, sents)["ppl"] == pytest.approx(perplexity(lm, sents)["ppl"], rel=1e-5)
    assert read_arpa(tmp_path / "lm.arpa", max_order=2).order == 2


def test_entropy_pruning_hits_the_target_and_stays_normalised(corpus):
    lm = estimate_lm([corpus], 3)
    full = sum(lm.ngram_counts())
    target = full // 4
    pruned = prune_entropy(lm, target)
    assert sum(pruned.ngram_counts()) == target
    assert pruned.ngram_counts()[0] == lm.ngram_counts()[0]  # unigrams are never pruned
    for k in range(1, 3):  # every kept n-gram's history is kept (ARPA needs it)
        assert all(g[:-1] in pruned.probs[k - 1] or g[:-1] == (BOS,) for g in pruned.probs[k])
    assert_normalised(pruned)
    # what entropy pruning keeps costs less perplexity than keeping the same number chosen at random
    deltas = entropy_deltas(lm)  # the kept top-order n-grams are those of largest ΔH
    top = sorted(deltas[2].values(), reverse=True)
    assert min(deltas[2][g] for g in pruned.probs[2]) >= top[len(pruned.probs[2]) - 1] - 1e-15
    sents = [ln.split() for ln in corpus.read_text().splitlines()[:500]]
    rng = random.Random(1)
    rand = [set(rng.sample(sorted(lm.probs[k]), len(pruned.probs[k]))) if k else set() for k in range(3)]
    from asrlib.lang.prune import _close_prefixes, restrict

    _close_prefixes(rand)
    assert perplexity(pruned, sents)["ppl"] < perplexity(restrict(lm, rand), sents)["ppl"]
    assert prune_entropy(lm, full + 10) is lm


def test_count_cutoffs(corpus):
    lm = estimate_lm([corpus], 3)
    cut = prune_counts(lm, [0, 1, 2])
    assert all(lm.raw[1][g] > 1 for g in cut.probs[1] if not any(h[:-1] == g for h in cut.probs[2]))
    assert all(lm.raw[2][g] > 2 for g in cut.probs[2])
    assert 0 < cut.ngram_counts()[2] < lm.ngram_counts()[2]
    assert_normalised(cut)
    with pytest.raises(AsrError, match="unigram value must be 0"):
        prune_counts(lm, [1, 1])
    with pytest.raises(AsrError, match="non-decreasing"):
        prune_counts(lm, [0, 2, 1])


def test_build_arpa_prunes_and_lists_bad_text(tmp_path):
    text = tmp_path / "text"
    text.write_text("a b c\n\nb c a\nb c d3 a\n  \nabcdefghij a b\n")
    out = tmp_path / "lm.arpa"
    info = build_arpa([text], out, 2, alphabet=set("abcdefghij"), max_word_len=5, cutoffs=[0, 1])
    assert info["empty_lines"] == 2 and info["bad_char_words"] == 1 and info["too_long_words"] == 1
    report = (tmp_path / "lm.arpa.report").read_text()
    assert "empty lines skipped: 2" in report and f"{text}:2" in report and f"{text}:5" in report
    assert "bad_chars\td3\t1" in report and "too_long\tabcdefghij\t1" in report
    lm = read_arpa(out)
    assert (UNK,) in lm.probs[0] and ("d3",) not in lm.probs[0]
    # bigrams seen more than once (d3 and abcdefghij are <unk>)
    assert set(lm.probs[1]) == {("a", "b"), ("b", "c"), (BOS, "b"), ("a", EOS), (UNK, "a")}
    assert info["ngrams"][1] < info["ngrams_unpruned"][1]


GOOD = """\\data\\
ngram 1=4
ngram 2=2

\\1-grams:
-1.0\t</s>
-99\t<s>\t-0.3
-0.5\ta\t-0.2
-0.6\tb

\\2-grams:
-0.1\t<s> a
-0.2\ta b

\\end\\
"""


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.replace("\n\\end\\\n", "\n"), r"truncated: the file ends at line \d+ inside the \\2-grams:"),
        (lambda s: s.split("-0.2\ta b")[0], r"truncated: .*\(1 of 2 entries\)"),
        (lambda s: s.replace("ngram 2=2", "ngram 2=3"), r":11: the \\2-grams: section holds 2 entries but"),
        (lambda s: s.replace("-0.2\ta b", "-0.2\ta z"), r":13: word 'z' of 'a z' is not among the 1-grams"),
        (
            lambda s: s.replace("ngram 2=2", "ngram 2=2\nngram 3=1").replace(
                "\\end\\", "\\3-grams:\n-0.1\tb a b\n\n\\end\\"
            ),
            r":17: the history 'b a' of 'b a b' is not among the 2-grams",
        ),
        (lambda s: s.replace("-0.6\tb", "-0.6\ta"), r":9: 1-gram 'a' is listed twice"),
        (lambda s: s.replace("-0.6\tb", "x\tb"), r":9: not a number"),
        (lambda s: s.replace("-0.6\tb", "-0.6\tb c d"), r":9: a 1-gram entry needs 2 or 3 fields, got 4"),
        (lambda s: s.replace("\\data\\", "data"), r"truncated: .* before any n-grams"),
    ],
)
def test_bad_arpa_names_the_line(tmp_path, edit, message):
    (tmp_path / "ok.arpa").write_text(GOOD)
    lm = read_arpa(tmp_path / "ok.arpa")
    assert lm.prob((BOS,), "a") == pytest.approx(10**-0.1)
    assert lm.prob(("b",), "a") == pytest.approx(10**-0.5)  # b has no back-off weight: 1
    assert lm.prob(("a",), "a") == pytest.approx(10 ** (-0.2 - 0.5))
    bad = tmp_path / "bad.arpa"
    bad.write_text(edit(GOOD))
    with pytest.raises(AsrError, match=message):
        read_arpa(bad)


def test_perplexity_counts_oovs_like_srilm(tmp_path):
    (tmp_path / "ok.arpa").write_text(GOOD)
    lm = read_arpa(tmp_path / "ok.arpa")
    r = perplexity(lm, [["a", "zz", "b"]])
    # a after <s>, then zz skipped (history restarts), b from the unigram, </s> after b by back-off
    expected = -0.1 + -0.6 + -1.0
    assert r["oov"] == 1 and r["tokens"] == 3 and r["log10_prob"] == pytest.approx(expected)
    assert r["ppl"] == pytest.approx(10 ** (-expected / 3))
    assert math.isfinite(r["ppl"])


def test_train_lm_prunes_an_arpa_file(corpus, tmp_path):
    from steps.train_lm import main as train_lm_main

    full = tmp_path / "full.arpa"
    build_arpa([corpus], full, 3)
    total = sum(read_arpa(full).ngram_counts())
    out = tmp_path / "lm" / "small.arpa"
    assert train_lm_main(["--prune-arpa", str(full), "--prune-target", str(total // 3), "--out", str(out)]) == 0
    small = read_arpa(out)
    assert sum(small.ngram_counts()) == total // 3
    assert_normalised(small)
    with pytest.raises(AsrError, match="--prune-arpa takes --prune-target"):
        train_lm_main(["--prune-arpa", str(full), "--out", str(out)])


def test_kenlm_toolkit_agrees_with_ours(corpus, tmp_path):
    from asrlib.lang.kenlm import find_lmplz

    if find_lmplz() is None:
        pytest.skip("KenLM's lmplz is not built (tools/install_kenlm.sh)")
    lines = corpus.read_text().splitlines()
    vocab_words = sorted({w for ln in lines for w in ln.split()})
    words = tmp_path / "words.txt"
    words.write_text("\n".join(vocab_words[:-5]) + "\n")  # 5 words of the text are OOV
    ours, ken = tmp_path / "ours.arpa", tmp_path / "ken.arpa"
    build_arpa([corpus], ours, 3, words=words)
    info = build_arpa([corpus], ken, 3, words=words, toolkit="kenlm", prune_target=4000)
    assert info["oov_types"] == 5 and info["toolkit"] == "kenlm" and sum(info["ngrams"]) == 4000
    assert (tmp_path / "ken.arpa.report").read_text().count("\noov\t") == 5
    lm_ken = read_arpa(ken)
    assert not any(w in ("<oov>", vocab_words[-1]) for g in lm_ken.probs[1] for w in g)
    build_arpa([corpus], ken, 3, words=words, toolkit="kenlm")  # unpruned, against ours
    known = set(vocab_words[:-5])
    held = [ln.split() for ln in lines[:300] if all(w in known for w in ln.split())]
    p_ours, p_ken = perplexity(read_arpa(ours), held)["ppl"], perplexity(read_arpa(ken), held)["ppl"]
    assert abs(p_ours - p_ken) / p_ken < 0.01


def test_kenlm_toolkit_missing_is_a_clear_error(corpus, tmp_path, monkeypatch):
    import asrlib.lang.kenlm as kenlm

    monkeypatch.setattr(kenlm, "find_lmplz", lambda: None)
    with pytest.raises(AsrError, match="tools/install_kenlm.sh"):
        build_arpa([corpus], tmp_path / "lm.arpa", 3, toolkit="kenlm")
    with pytest.raises(AsrError, match="lm_toolkit must be one of"):
        build_arpa([corpus], tmp_path / "lm.arpa", 3, toolkit="srilm")


def test_graph_build_names_the_line_of_a_truncated_arpa(tmp_path):
    from asrlib.lang.graphs import build_tlg
    from asrlib.lang.lexicon import write_lang_files
    from asrlib.lang.units import char_lexicon

    write_lang_files(tmp_path, char_lexicon(["A", "B"]))
    arpa = tmp_path / "lm.arpa"
    upper = GOOD.replace("\ta", "\tA").replace("\tb", "\tB").replace(" a", " A").replace(" b", " B")
    arpa.write_text(upper.split("-0.2\tA B")[0])
    with pytest.raises(AsrError, match=r"lm.arpa: truncated: the file ends at line 12 inside the \\2-grams:"):
        build_tlg(tmp_path, grammar="arpa", arpa=arpa, ngram_order=2)
    arpa.write_text(upper)
    assert build_tlg(tmp_path, grammar="arpa", arpa=arpa, ngram_order=2).is_file()


def test_structure_only_check_keeps_nothing_and_still_finds_truncation(tmp_path):
    (tmp_path / "ok.arpa").write_text(GOOD)
    lm = read_arpa(tmp_path / "ok.arpa", structure_only=True)
    assert lm.order == 2 and not lm.probs[0]
    (tmp_path / "cut.arpa").write_text(GOOD.split("-0.2\ta b")[0])
    with pytest.raises(AsrError, match=r"truncated: .*\(1 of 2 entries\)"):
        read_arpa(tmp_path / "cut.arpa", structure_only=True)
    (tmp_path / "n.arpa").write_text(GOOD.replace("-0.6\tb", "x\tb"))
    with pytest.raises(AsrError, match=r":9: not a number"):
        read_arpa(tmp_path / "n.arpa", structure_only=True)
