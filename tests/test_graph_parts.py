"""Parts of the graph build (asrlib/lang/graphs.py) that a whole TLG on a small lexicon does not show: the per-step
cost record, the phone-level #k of each homophone in L, and which ARPA files get the full check."""

from types import SimpleNamespace

import pytest

from asrlib.errors import AsrError
from asrlib.lang import graphs
from asrlib.lang.graphs import add_disambig, make_arpa_fst, make_lexicon_fst


def test_timed_records_the_blocks_wall_and_cpu_seconds_and_peak_rss(monkeypatch):
    """On clocks the test sets (no real time): the wall and CPU seconds of the block and the peak RSS in MiB."""
    wall, cpu = iter([100.0, 101.5]), iter([20.0, 20.75])
    monkeypatch.setattr(graphs.time, "perf_counter", lambda: next(wall))
    monkeypatch.setattr(graphs.time, "process_time", lambda: next(cpu))
    monkeypatch.setattr(graphs.resource, "getrusage", lambda who: SimpleNamespace(ru_maxrss=3 * 1024 * 1024))
    record = {}
    with graphs.timed("LG", record):
        pass
    assert record == {"LG": {"wall_s": 1.5, "cpu_s": 0.75, "peak_rss_mib": 3072.0}}  # ru_maxrss is in KiB


def _paths(fst, start=0):
    """Input and output labels of every path of L from its start back to it (L is a loop through state 0)."""
    out = []

    def walk(state, ins, outs):
        for arc in graphs.kaldifst.ArcIterator(fst, state):
            i, o = ins + [arc.ilabel], outs + [arc.olabel]
            if arc.nextstate == start:
                out.append((i, [x for x in o if x]))
            else:
                walk(arc.nextstate, i, o)

    walk(start, [], [])
    return sorted(out)


def test_each_homophone_ends_with_its_own_disambiguation_label():
    """Three homophones and a prefix: each pronunciation that needs one ends with #k = disambig0 + k (k = 1, 2, 3),
    and #0 (disambig0) is the grammar's back-off self-loop only."""
    lex = {
        "TWO": [["T", "UW"]],
        "TOO": [["T", "UW"]],
        "TO": [["T", "UW"]],
        "TEA": [["T", "IY"]],
        "TEAK": [["T", "IY", "K"]],
    }
    entries, max_k = add_disambig(lex)
    tokens = {"<blk>": 0, "IY": 1, "K": 2, "T": 3, "UW": 4}
    words = {"<eps>": 0, "TEA": 1, "TEAK": 2, "TO": 3, "TOO": 4, "TWO": 5, "#0": 6}
    disambig0 = 10
    L = make_lexicon_fst(entries, tokens, words, disambig0)
    paths = _paths(L)
    assert ([disambig0], [words["#0"]]) in paths
    by_word = {words_out[0]: ins for ins, words_out in paths if words_out != [words["#0"]]}
    assert by_word[words["TEAK"]] == [3, 1, 2]  # no mark
    assert by_word[words["TEA"]] == [3, 1, disambig0 + 1]  # a prefix of TEAK
    assert sorted(by_word[words[w]][-1] for w in ("TWO", "TOO", "TO")) == [11, 12, 13]
    assert max_k == 3 and len(paths) == 6


def _arpa_with_a_repeated_unigram(path, n_words):
    lines = ["\\data\\", f"ngram 1={n_words + 3}", "", "\\1-grams:", "-1.0\t</s>", "-99\t<s>\t-0.5"]
    lines += [f"-4.0\tw{i:06d}\t-0.3" for i in range(n_words)]
    lines += [f"-4.0\tw{0:06d}\t-0.3", "", "\\end\\", ""]  # w000000 a second time
    path.write_text("\n".join(lines))
    return path


@pytest.mark.parametrize("n_words", [30, 60_000])  # about 0.7 KiB and 1.3 MiB
def test_an_arpa_file_up_to_200_mib_gets_the_full_check(tmp_path, n_words):
    """The duplicate-entry check needs the tables in memory, which the full check of read_arpa keeps for files up to
    ARPA_FULL_CHECK_MAX_BYTES (200 MiB, about 7 M n-grams); a file of a few KiB or a MiB is checked in full, so the
    repeated 1-gram is found before kaldilm ever sees the file."""
    arpa = _arpa_with_a_repeated_unigram(tmp_path / "lm.arpa", n_words)
    words = tmp_path / "words.txt"
    words.write_text("<eps> 0\n#0 1\n")
    with pytest.raises(AsrError, match=r"lm\.arpa:\d+: 1-gram 'w000000' is listed twice"):
        make_arpa_fst(arpa, words, 1)
