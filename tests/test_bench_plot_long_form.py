"""bench/plot_long_form.py: finds bench/long_form.py's runs however a results file nests them, and draws the gaps."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import plot_long_form as plf  # noqa: E402  (bench/ is not a package)


def _run(per_utt: float, wers) -> dict:
    return {"per_utt": {"blank": {"wer": per_utt}}, "blank": {n: {"wer": w} for n, w in zip(plf.LENGTHS, wers)}}


def test_runs_found_at_any_depth_and_gaps_against_per_utterance(tmp_path, monkeypatch):
    tree = {"what": "x", "runs": {"seed7": _run(3.0, [3.2, 3.5, 2.9]), "other": {"seed1": _run(4.0, [4.0, 4.1, 4.5])}}}
    found = dict(plf.runs_in(tree))
    assert sorted(found) == ["runs/other/seed1", "runs/seed7"]
    assert plf.gaps(found["runs/seed7"], "blank", "blank") == [0.2, 0.5, -0.1]
    (tmp_path / "seeds.json").write_text(json.dumps(tree))
    (tmp_path / "makerun.json").write_text(json.dumps(_run(3.0, [3.1, 3.0, 3.3])))
    monkeypatch.setattr(plf, "RESULTS", tmp_path)
    series, makerun = plf.panel_series(
        [("seeds.json", r"seed(\d+)$", "blank", "blank")], ("makerun.json", "blank", "blank")
    )
    assert series == {"seed 7": [0.2, 0.5, -0.1], "seed 1": [0.0, 0.1, 0.5]} and makerun == [0.1, 0.0, 0.3]
    out = tmp_path / "gaps.png"
    plf.plot([("t", series, makerun), ("u", series, makerun)], out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
