"""bench/plot_long_form.py: finds bench/long_form.py's runs however a results file nests them, and draws the gaps."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import plot_long_form as plf  # noqa: E402  (bench/ is not a package)


def _run(pieces: float, wers) -> dict:
    """A run whose recordings' own utterances score ``pieces`` one by one; the whole set's per-utterance WER is
    another figure (the shorter recordings hold part of the set), which the gaps must not use."""
    cells = {n: {"wer": w, "wer_pieces": pieces} for n, w in zip(plf.LENGTHS, wers)}
    return {"per_utt": {"blank": {"wer": pieces + 1.0}}, "blank": cells}


def test_runs_found_at_any_depth_and_gaps_against_the_same_words_one_by_one(tmp_path, monkeypatch):
    tree = {"what": "x", "runs": {"seed7": _run(3.0, [3.2, 3.5, 2.9]), "other": {"seed1": _run(4.0, [4.0, 4.1, 4.5])}}}
    found = dict(plf.runs_in(tree))
    assert sorted(found) == ["runs/other/seed1", "runs/seed7"]
    assert plf.gaps(found["runs/seed7"], "blank") == [0.2, 0.5, -0.1]
    (tmp_path / "seeds.json").write_text(json.dumps(tree))
    (tmp_path / "makerun.json").write_text(json.dumps(_run(3.0, [3.1, 3.0, 3.3])))
    monkeypatch.setattr(plf, "RESULTS", tmp_path)
    with_ci = _run(3.0, [3.1, 3.0, 3.3])
    for i, n in enumerate(plf.LENGTHS):
        with_ci["blank"][n]["gap_ci95"] = [-0.5 - i, 0.7 + i]
    (tmp_path / "makerun_ci.json").write_text(json.dumps(with_ci))
    lines = [("a", "makerun.json", "blank"), ("b", "makerun_ci.json", "blank")]
    series, found = plf.panel_series([("seeds.json", r"seed(\d+)$", "blank")], lines)
    assert series == {"seed 7": [0.2, 0.5, -0.1], "seed 1": [0.0, 0.1, 0.5]}
    # the first written before bench/long_form.py gave intervals
    assert found == [("a", [0.1, 0.0, 0.3], None), ("b", [0.1, 0.0, 0.3], [[-0.5, 0.7], [-1.5, 1.7], [-2.5, 2.7]])]
    out = tmp_path / "gaps.png"
    plf.plot([("t", series, found[:1]), ("u", series, found)], out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
