"""WER scoring: counts on hand-made examples, missing hypotheses, reports and RESULTS.md."""

from __future__ import annotations

import json

import pytest

from asrlib.errors import AsrError
from asrlib.score import errors_by_part, format_per_utt, score

REF = {"u1": "one two three four", "u2": "five six seven", "u3": "eight nine", "u4": "zero oh"}


def test_counts_sub_ins_del():
    hyp = {
        "u1": "one too three four five",  # 1 sub, 1 ins
        "u2": "five seven",  # 1 del
        "u3": "eight nine",  # correct
        "u4": "",
    }  # present but empty: 2 del
    r = score(REF, hyp)
    assert (r.num_words, r.subs, r.ins, r.dels, r.errors) == (11, 1, 1, 3, 5)
    assert r.wer == pytest.approx(100 * 5 / 11)
    assert (r.num_utts, r.sent_errors, r.ser, r.missing) == (4, 3, 75.0, [])
    assert r.kaldi_wer_line() == "%WER 45.45 [ 5 / 11, 1 ins, 3 del, 1 sub ]"
    by = {a.utt: a for a in r.per_utt}
    assert (by["u1"].cor, by["u1"].sub, by["u1"].ins, by["u1"].dels) == (3, 1, 1, 0)
    text = format_per_utt(r)
    assert "u1 #csid 3 1 1 0" in text and "u2 #csid 2 0 0 1" in text
    assert "u1 align one (two->too) three four (*->five)" in text
    assert "u2 align five (six->*) seven" in text
    lines = {ln.split()[1]: ln for ln in text.splitlines() if ln.startswith("u1 ")}
    assert lines["ref"].split()[2:] == ["one", "two", "three", "four", "***"]
    assert lines["op"].split()[2:] == ["C", "S", "C", "C", "I"]
    assert lines["ref"].index("four") == lines["hyp"].index("four")  # columns aligned


def test_errors_by_part_counts_each_error_to_its_utterance():
    parts = ["one two three", "four five", "", "six"]
    # 'two' substituted (part 0), an insertion after 'three' (part 0: the word before it), 'five' deleted
    # (part 1), an insertion before any reference word (part 0), 'six' correct
    hyp = "uh one too three oh four six"
    counts = errors_by_part(parts, hyp)
    assert counts == [3, 1, 0, 0]
    assert sum(counts) == score({"r": " ".join(parts)}, {"r": hyp}).errors
    assert errors_by_part(parts, " ".join(parts)) == [0, 0, 0, 0]
    assert errors_by_part(["a b", "c"], "") == [2, 1]
    assert errors_by_part([], "x") == []


def test_perfect_and_missing_hypotheses():
    assert score(REF, dict(REF)).wer == 0.0
    r = score(REF, {"u1": "one two three four", "u3": "eight nine"})
    assert r.missing == ["u2", "u4"] and (r.dels, r.errors, r.sent_errors) == (5, 5, 2)
    assert "u2 #csid 0 0 0 3  (no hypothesis)" in format_per_utt(r)
    with pytest.raises(AsrError, match="not in the reference"):
        score(REF, {"u9": "one"})
    with pytest.raises(AsrError, match="no words"):
        score({"a": ""}, {"a": "x"})


def test_score_and_results_steps(tmp_path, capsys):
    from steps.make_results import main as results_main
    from steps.score import main as score_main

    ref = tmp_path / "data" / "test" / "text"
    ref.parent.mkdir(parents=True)
    ref.write_text("".join(f"{k} {v}\n" for k, v in REF.items()))
    exp = tmp_path / "exp"
    for method, hyp in (
        ("greedy", {"u1": "one two three", "u2": "five six seven", "u3": "eight nine"}),
        ("tlg_1best", dict(REF)),
    ):
        d = exp / f"decode_test_{method}"
        d.mkdir(parents=True)
        (d / "hyp.txt").write_text("".join(f"{k} {v}\n" for k, v in hyp.items()))
        assert score_main(["--ref", str(ref), "--hyp", str(d / "hyp.txt"), "--out-dir", str(d)]) == 0
    out = capsys.readouterr().out
    assert "%WER 27.27 [ 3 / 11, 0 ins, 3 del, 0 sub ]" in out and "%WER 0.00 [ 0 / 11" in out
    g = exp / "decode_test_greedy"
    assert (g / "wer.txt").read_text().splitlines()[0] == "%WER 27.27 [ 3 / 11, 0 ins, 3 del, 0 sub ]"
    info = json.loads((g / "wer.json").read_text())
    assert (info["set"], info["method"], info["missing"], info["num_words"]) == ("test", "greedy", ["u4"], 11)
    assert "u4 #csid 0 0 0 2" in (g / "per_utt").read_text()
    assert results_main(["--exp-dir", str(exp)]) == 0
    md = (exp / "RESULTS.md").read_text()
    assert md == capsys.readouterr().out
    assert "| set | greedy | tlg_1best |" in md and "| test | 27.27 | 0.00 |" in md
    assert "| test | greedy | 27.27 | 3 | 0 | 3 | 0 | 11 | 50.00 | 4 | 1 | decode_test_greedy |" in md
    with pytest.raises(AsrError, match="no .*wer.json"):
        results_main(["--exp-dir", str(tmp_path / "empty")])
