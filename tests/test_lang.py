"""Lexicon, symbol tables and the T/L/G/TLG graphs of the lang stage."""

from pathlib import Path

import kaldifst
import pytest

from asrlib.errors import AsrError
from asrlib.lang.graphs import add_disambig, build_tlg, make_ctc_topo
from asrlib.lang.lexicon import build_lexicon, read_tokens, read_words, write_lang_files
from steps.prepare_lang import main as prepare_lang_main

ROOT = Path(__file__).resolve().parents[1]
DIGITS = "ZERO ONE TWO THREE FOUR FIVE SIX SEVEN EIGHT NINE OH".split()


def test_digit_lexicon_phones_without_stress():
    lex = build_lexicon(w.lower() for w in DIGITS)
    assert sorted(lex) == sorted(DIGITS)
    assert lex["ONE"] == [["W", "AH", "N"]]
    assert lex["SEVEN"] == [["S", "EH", "V", "AH", "N"]]
    assert lex["OH"] == [["OW"]]
    assert lex["ZERO"] == [["Z", "IH", "R", "OW"], ["Z", "IY", "R", "OW"]]  # both variants kept
    assert not any(ch.isdigit() for prons in lex.values() for p in prons for ph in p for ch in ph)


def test_oov_words_are_listed():
    with pytest.raises(AsrError, match=r"2 word\(s\) not in CMUdict: TWOO XYZZYQ"):
        build_lexicon(["ONE", "twoo", "xyzzyq"])


def test_lang_files(tmp_path):
    write_lang_files(tmp_path, build_lexicon(DIGITS))
    tokens = read_tokens(tmp_path / "tokens.txt")
    assert tokens["<blk>"] == 0 and len(tokens) == 20  # blank + 19 phones of the digits
    phones = [line.split()[0] for line in (tmp_path / "tokens.txt").read_text().splitlines()[1:]]
    assert phones == sorted(phones)
    words = read_words(tmp_path / "words.txt")
    assert [words[i] for i in range(len(words))] == ["<eps>"] + sorted(DIGITS) + ["#0", "<s>", "</s>"]
    assert "ZERO Z IY R OW" in (tmp_path / "lexicon.txt").read_text().splitlines()


def test_disambig_homophones_and_prefixes():
    lex = {
        "TWO": [["T", "UW"]],
        "TOO": [["T", "UW"]],
        "TO": [["T", "UW"], ["T", "AH"]],
        "TEA": [["T", "IY"]],
        "TEAK": [["T", "IY", "K"]],
    }
    entries, max_k = add_disambig(lex)
    marks = {(w, " ".join(p)): k for w, p, k in entries}
    assert sorted(marks[(w, "T UW")] for w in ("TWO", "TOO", "TO")) == [1, 2, 3]  # homophones
    assert marks[("TEA", "T IY")] == 1  # prefix of TEAK
    assert marks[("TEAK", "T IY K")] == 0 and marks[("TO", "T AH")] == 0
    assert max_k == 3


def test_ctc_topology_is_fully_connected_and_deterministic():
    T = make_ctc_topo(4)
    assert T.num_states == 4 and all(T.num_arcs(s) == 4 for s in range(4))
    arcs = {(s, a.ilabel, a.olabel, a.nextstate) for s in range(4) for a in kaldifst.ArcIterator(T, s)}
    assert (0, 1, 0, 0) in arcs  # blank: input label 1, no output
    assert (2, 3, 0, 2) in arcs  # repeated token 2: no new output
    assert (1, 3, 2, 2) in arcs  # token 2 after token 1: outputs 2
    assert all(T.final(s).value == 0.0 for s in range(4))


def test_build_tlg_digit_loop(tmp_path):
    write_lang_files(tmp_path, build_lexicon(DIGITS))
    out = build_tlg(tmp_path)
    for name in ("T.fst", "L.fst", "G.fst", "TLG.fst", "disambig.txt"):
        assert (tmp_path / name).is_file(), name
    tlg = kaldifst.StdVectorFst.read(str(out))
    assert tlg.num_states > 0 and tlg.is_ilabel_sorted
    num_tokens = len(read_tokens(tmp_path / "tokens.txt"))
    ilabels = {a.ilabel for s in range(tlg.num_states) for a in kaldifst.ArcIterator(tlg, s)}
    assert max(ilabels) == num_tokens and min(ilabels) >= 0  # disambiguation symbols removed
    G = kaldifst.StdVectorFst.read(str(tmp_path / "G.fst"))
    assert G.num_states == 1 and G.num_arcs(0) == len(DIGITS)


def test_arpa_grammar_and_prepare_lang_cli(tmp_path):
    text = tmp_path / "text"
    text.write_text("u1 one two\nu2 oh nine\n")
    arpa = tmp_path / "lm.arpa"
    arpa.write_text(
        "\\data\\\nngram 1=6\nngram 2=3\n\n\\1-grams:\n-0.6 </s>\n-99 <s> -0.3\n-0.6 ONE -0.2\n"
        "-0.6 TWO -0.2\n-0.8 OH -0.2\n-0.8 NINE -0.2\n\n\\2-grams:\n-0.1 <s> ONE\n-0.1 ONE TWO\n"
        "-0.1 TWO </s>\n\n\\end\\\n"
    )
    cfg = ROOT / "recipes/digits/config.yaml"
    lang = tmp_path / "lang"
    args = [
        "--text",
        str(text),
        "--lang-dir",
        str(lang),
        "--config",
        str(cfg),
        "--set",
        "lang.grammar=arpa",
        "--set",
        f"lang.arpa={arpa}",
        "--set",
        "lang.ngram_order=2",
    ]
    assert prepare_lang_main(args) == 0
    assert (lang / ".done").is_file() and (lang / "TLG.fst").is_file()
    G = kaldifst.StdVectorFst.read(str(lang / "G.fst"))
    assert G.num_states > 1  # an n-gram, not the one-state loop
    words = {w: i for i, w in read_words(lang / "words.txt").items()}
    backoff = [a for s in range(G.num_states) for a in kaldifst.ArcIterator(G, s) if a.ilabel == words["#0"]]
    assert backoff and all(a.olabel == 0 for a in backoff)
    mtime = (lang / "TLG.fst").stat().st_mtime_ns
    assert prepare_lang_main(args) == 0  # complete: skipped
    assert (lang / "TLG.fst").stat().st_mtime_ns == mtime


def test_missing_arpa_is_a_clear_error(tmp_path):
    write_lang_files(tmp_path, build_lexicon(["ONE"]))
    with pytest.raises(AsrError, match="does not exist"):
        build_tlg(tmp_path, grammar="arpa", arpa=tmp_path / "missing.arpa")
    with pytest.raises(AsrError, match="lang.grammar must be one of"):
        build_tlg(tmp_path, grammar="bigram")
