"""The torchrun launcher (steps.train_dist): 2 learners train through steps.train; a run whose learners are
SIGKILLed mid-epoch resumes from the last checkpoint on rerun and ends bit-identical to an uninterrupted run; only
rank 0 writes final.pt and the done marker, every learner writes its own log and communication summary."""

import json
import subprocess
import sys
from pathlib import Path

import torch

from helpers import make_toy_ctc_setup, toy_config_yaml, toy_dirs
from steps.train_dist import torchrun_args

from asrlib.cli import env_with_root

ROOT = Path(__file__).resolve().parents[1]


def test_torchrun_args():
    single = torchrun_args(2, 1, ["--config", "c.yaml"])
    assert "--standalone" in single and single[-3:] == ["steps.train", "--config", "c.yaml"]
    multi = torchrun_args(8, 2, ["x"], rdzv_endpoint="h:29400", rdzv_id="j", node_rank=1)
    assert "--rdzv-endpoint=h:29400" in multi and "--nnodes=2" in multi and "--node-rank=1" in multi


def _launch(setup: Path, cfg: Path, exp: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "steps.train_dist",
        "--num-learners",
        "2",
        "--threads-per-learner",
        "1",
        "--",
        "--config",
        str(cfg),
        "--set",
        "train.dist.algo=sync",
        *toy_dirs(setup),
        "--exp-dir",
        str(exp),
        *extra,
    ]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env_with_root(ROOT))


def test_killed_distributed_run_resumes_exactly(tmp_path):
    setup = make_toy_ctc_setup(tmp_path / "toy")
    cfg = toy_config_yaml(tmp_path / "c.yaml", checkpoint_every=3)  # 5 steps per learner per epoch
    ref = _launch(setup, cfg, tmp_path / "ref")
    assert ref.returncode == 0, ref.stderr[-3000:]
    exp = tmp_path / "res"
    killed = _launch(setup, cfg, exp, "--set", "train.kill_after_steps=4")
    assert killed.returncode == 1 and "a learner failed" in killed.stderr, killed.stderr[-3000:]
    assert not (exp / "final.pt").exists()
    resumed = _launch(setup, cfg, exp)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in (exp / "log" / "train.log").read_text()
    a = torch.load(tmp_path / "ref" / "final.pt", weights_only=True)["model"]
    b = torch.load(exp / "final.pt", weights_only=True)["model"]
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert (exp / ".train.done").is_file() and (exp / "log" / "train.rank1.log").is_file()
    for r in range(2):
        s = json.loads((exp / "log" / f"dist.rank{r}.json").read_text())
        assert s["algo"] == "sync" and s["world_size"] == 2 and s["total"]["sent_bytes"] > 0
