"""Kill anywhere, rerun, same result: ``bench/chaos.py --quick --trials 2 --max-kills 3`` (2 trials of the tiny
digits recipe, each SIGKILLed 1–3 times at random stages and offsets and rerun; 6 trials of 1–4 kills in the slow
tier) recovers every trial bit-identically; and the chaos checks themselves notice what they are there to notice
(a partial archive or manifest, a changed weight or feature)."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from asrlib.cli import env_with_root
from asrlib.io.torchfile import save_torch

from asrlib.kaldi_io import write_matrices

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import chaos  # noqa: E402  (bench/ is not a package)


def test_integrity_check_finds_partial_archives_manifests_and_checkpoints(tmp_path):
    write_matrices(tmp_path / "fbank/feats.ark", [(f"u{i}", np.ones((50, 4), np.float32)) for i in range(3)])
    with gzip.open(tmp_path / "m.jsonl.gz", "wt") as f:
        f.write(json.dumps({"id": "u0"}) + "\n" + json.dumps({"id": "u1"}) + "\n")
    torch.save({"w": torch.ones(3)}, tmp_path / "final.pt")
    (tmp_path / ".feats.ark.x1y2z3.tmp").write_bytes(b"partial")  # a killed writer's temporary: not an output
    assert chaos.integrity_problems(tmp_path) == []

    ark = tmp_path / "fbank/feats.ark"
    ark.write_bytes(ark.read_bytes()[:-100])  # as if the scp had been written before the ark
    gz = (tmp_path / "m.jsonl.gz").read_bytes()
    (tmp_path / "m.jsonl.gz").write_bytes(gz[: len(gz) // 2])
    pt = (tmp_path / "final.pt").read_bytes()
    (tmp_path / "final.pt").write_bytes(pt[: len(pt) // 2])
    found = chaos.integrity_problems(tmp_path)
    assert [p.split(":")[0] for p in found] == ["fbank/feats.scp", "final.pt", "m.jsonl.gz"], found


def _outputs(d: Path, weight: float = 1.0, feat_scale: float = 1.0, beam: int = 16, seconds: float = 0.1) -> None:
    """A miniature of a recipe's outputs: an archive + scp, a checkpoint, a stage marker and a log."""
    write_matrices(d / "fbank/feats.ark", [("u0", np.arange(20, dtype=np.float32).reshape(5, 4) * feat_scale)])
    save_torch(  # as the trainer writes its checkpoints (numpy arrays stored as tensors)
        d / "final.pt",
        {"model": {"w": torch.tensor([1.0, 1.0, weight])}, "rng": {"numpy": np.arange(4)}, "wall_s": seconds},
    )
    (d / ".done").write_text(
        json.dumps({"settings": {"beam": beam}, "search_seconds": seconds, "model_mtime_ns": int(seconds * 1e9)})
    )
    (d / "log").mkdir(exist_ok=True)
    (d / "log/train.log").write_text(f"12:00:{seconds:02.0f} started\n")


def test_comparison_sees_changed_outputs_and_ignores_only_timings(tmp_path):
    work, ref = tmp_path / "run", tmp_path / "ref"  # like the bench: every run in one directory, moved aside
    _outputs(work)
    work.rename(ref)
    _outputs(work, seconds=7.0)
    assert chaos.mismatches(ref, work) == []

    shutil.rmtree(work)
    _outputs(work, weight=1.0 + 2**-20, feat_scale=1.0001, beam=15)
    (work / ".x.y.tmp").write_text("")
    assert sorted(chaos.mismatches(ref, work)) == [
        "differs: .done",
        "differs: fbank/feats.ark",
        "differs: final.pt",
        "temporary left: .x.y.tmp",
    ]


@pytest.mark.skipif(
    not all(shutil.which(t) for t in ("espeak-ng", "flite", "sox")),
    reason="espeak-ng, flite and sox are needed (make install puts them there)",
)
@pytest.mark.parametrize(
    "trials,max_kills",
    [(2, 3), pytest.param(6, 4, marks=pytest.mark.slow)],  # make test: 2 trials (~100 s); make test-slow: 6
    ids=["2trials", "6trials"],
)
def test_chaos_quick_recovers_every_trial_bit_identically(tmp_path, trials, max_kills):
    env = env_with_root(ROOT)
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench/chaos.py"),
            "--quick",
            "--trials",
            str(trials),
            "--max-kills",
            str(max_kills),
            "--work-dir",
            str(tmp_path / "w"),
            "--out",
            str(tmp_path / "report.json"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    print(r.stdout[-3000:])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["bench"] == "chaos" and summary["trials"] == summary["recovered"] == trials
    assert summary["mismatches"] == summary["integrity_problems"] == 0
    report = json.loads((tmp_path / "report.json").read_text())
    kills = [k for t in report["per_trial"] for k in t["kills"]]
    assert len(kills) >= trials and summary["kills"] == len(kills)  # every trial was really killed at least once
    assert summary["compared_files"] > 100  # archives, manifests, lang, model, decodes
    assert all(t["attempts"] == len(t["kills"]) + 1 for t in report["per_trial"])
