"""The cluster path on a real SLURM: tools/slurm_local.sh's one-node cluster on this machine (Debian's slurm-wlm and
munge; the same sbatch, srun, scheduler and environment variables as a cluster). Slow tier (`make test-slow`): the
module starts the cluster when it is not running (root only), else it is skipped with the reason.

- Snakemake's SLURM profile (profiles/slurm) runs the digits recipe (tiny settings) as SLURM jobs, one per step; a
  step that fails is reported with its SLURM log, and the rerun after the fix continues where the first run stopped.
- Training as one SLURM job, as the Snakefile launches it on a cluster (srun, one torchrun per node, c10d
  rendezvous on the job's first node): both learners see a world of 2, and the model equals the same run without
  SLURM bit for bit, for sync and bmuf.
- A training job killed with scancel and submitted again resumes from its last checkpoint and ends equal to an
  uninterrupted run.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from helpers import ROOT, make_toy_ctc_setup, toy_config_yaml, toy_dirs

from asrlib.cli import env_with_root

pytestmark = pytest.mark.slow
PY = sys.executable
ENV = env_with_root(ROOT)
SNAKE_SLURM = [
    "--profile",
    str(ROOT / "profiles/slurm"),
    "--slurm-status-command",
    "squeue",
    "--slurm-no-account",
    "--default-resources",
    "mem_mb=1000",
    "runtime=30",
    "cpus_per_task=1",
]


def _idle() -> bool:
    r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True) if shutil.which("sinfo") else None
    return bool(r and r.returncode == 0 and "idle" in r.stdout)


@pytest.fixture(scope="module")
def slurm():
    if not _idle():
        if os.geteuid() != 0:
            pytest.skip("no SLURM cluster is up and starting one (tools/slurm_local.sh start) needs root")
        r = subprocess.run([str(ROOT / "tools/slurm_local.sh"), "start"], capture_output=True, text=True)
        if r.returncode != 0 or not _idle():
            pytest.skip(f"tools/slurm_local.sh could not start SLURM: {r.stderr[-500:]}")
    return True


def _job_ids(text: str) -> list:
    return re.findall(r"submitted with SLURM jobid (\d+)", text)


def test_snakemake_runs_the_recipe_as_slurm_jobs_and_a_rerun_continues_after_a_failure(slurm, tmp_path):
    cfg = yaml.safe_load((ROOT / "recipes/digits/config.yaml").read_text())
    cfg["data"].update(size=0.05, train_scale=1.0)
    cfg["model"].update(num_layers=1, hidden_size=64, proj_size=0)
    cfg["train"].update(epochs=1, batch_seconds=10, warmup_steps=10, checkpoint_every=50, num_threads=1)
    cfg["cluster"] = {"cpus_per_learner": 1, "train_mem_mb": 2000, "train_runtime_min": 30}
    good = dict(cfg["lang"])
    cfg["lang"].update(grammar="arpa", arpa=str(tmp_path / "missing.arpa"))  # stage 3 fails
    conf = tmp_path / "tiny.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    work = tmp_path / "work"
    cmd = [
        PY,
        "-m",
        "snakemake",
        "train",
        "--snakefile",
        str(ROOT / "Snakefile"),
        "--cores",
        "all",
        *SNAKE_SLURM,
        "--config",
        f"recipe_config={conf}",
        f"workdir={work}",
        f"python={PY}",
    ]
    first = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=tmp_path)
    out1 = first.stdout + first.stderr
    assert first.returncode != 0 and "Error in rule lang" in out1, out1[-3000:]
    log = re.search(r"log: (\S*slurm_logs/rule_lang/\d+\.log)", out1)
    assert log and "missing.arpa" in Path(log.group(1)).read_text()  # the reason, in the job's own log
    assert len(_job_ids(out1)) >= 5  # prepare_data, validate_*, fbank_* ... each its own SLURM job
    cfg["lang"] = good
    conf.write_text(yaml.safe_dump(cfg))
    second = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=tmp_path)
    out2 = second.stdout + second.stderr
    assert second.returncode == 0, out2[-3000:]
    assert "rule prepare_data" not in out2 and "rule fbank_train" not in out2  # finished steps are not rerun
    assert "rule lang:" in out2 and "rule train_model:" in out2 and len(_job_ids(out2)) >= 2
    assert (work / "exp/lstm_ctc/final.pt").is_file()


def _toy(tmp_path: Path, epochs: int = 2, **train) -> list:
    root = make_toy_ctc_setup(tmp_path / "toy", {"train": 60, "dev": 8})
    toy_config_yaml(tmp_path / "c.yaml", epochs=epochs, **train)
    return ["--config", str(tmp_path / "c.yaml"), *toy_dirs(root)]


def _srun_torchrun(args: list, exp: Path, algo: str) -> str:
    """The job script of the Snakefile's multi-node training rule, on this one node."""
    return (
        f"srun --nodes=1 --ntasks-per-node=1 --kill-on-bad-exit=1 {PY} -m steps.train_dist --nnodes 1 "
        f"--num-learners 2 --threads-per-learner 1 --rdzv-id $SLURM_JOB_ID --rdzv-endpoint "
        f"$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1):29400 -- {' '.join(args)} "
        f"--set train.dist.algo={algo} --exp-dir {exp}"
    )


def _model(exp: Path) -> dict:
    return torch.load(exp / "final.pt", weights_only=True)["model"]


@pytest.mark.parametrize("algo", ["sync", "bmuf"])
def test_training_as_one_slurm_job_matches_the_run_without_slurm(slurm, tmp_path, algo):
    args = _toy(tmp_path)
    ref = subprocess.run(
        [
            PY,
            "-m",
            "steps.train_dist",
            "--num-learners",
            "2",
            "--threads-per-learner",
            "1",
            "--",
            *args,
            "--set",
            f"train.dist.algo={algo}",
            "--exp-dir",
            str(tmp_path / "ref"),
        ],
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert ref.returncode == 0, ref.stderr[-2000:]
    exp = tmp_path / "slurm"
    r = subprocess.run(
        [
            "sbatch",
            "--wait",
            "--parsable",
            "-N1",
            "-n1",
            "-c2",
            "-o",
            str(tmp_path / "job-%j.out"),
            "--wrap",
            _srun_torchrun(args, exp, algo),
        ],
        capture_output=True,
        text=True,
        env=ENV,
    )
    job = r.stdout.strip()
    assert r.returncode == 0 and job.isdigit(), (r.stdout, r.stderr, list(tmp_path.glob("job-*.out")))
    for rank in (0, 1):
        assert json.loads((exp / "log" / f"dist.rank{rank}.json").read_text())["world_size"] == 2
    a, b = _model(tmp_path / "ref"), _model(exp)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_training_job_killed_with_scancel_resumes_from_its_checkpoint(slurm, tmp_path):
    args = _toy(tmp_path, epochs=6, checkpoint_every=2)
    ref = subprocess.run(
        [PY, "-m", "steps.train", *args, "--exp-dir", str(tmp_path / "ref")], capture_output=True, text=True, env=ENV
    )
    assert ref.returncode == 0, ref.stderr[-2000:]
    exp = tmp_path / "job"
    script = f"{PY} -m steps.train {' '.join(args)} --exp-dir {exp}"
    job = subprocess.run(
        ["sbatch", "--parsable", "-n1", "-c1", "-o", str(tmp_path / "job-%j.out"), "--wrap", script],
        capture_output=True,
        text=True,
        env=ENV,
    ).stdout.strip()
    assert job.isdigit()
    deadline = time.time() + 300
    while not list((exp / "checkpoints").glob("epoch-*.pt")) and time.time() < deadline:
        time.sleep(0.2)
    subprocess.run(["scancel", job], check=True)
    while (
        subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True).stdout.strip().split()[4:5]
        in (["R"], ["CG"])
        and time.time() < deadline
    ):
        time.sleep(0.2)
    assert not (exp / ".train.done").exists()  # killed before the end
    again = subprocess.run(
        ["sbatch", "--wait", "--parsable", "-n1", "-c1", "-o", str(tmp_path / "job2-%j.out"), "--wrap", script],
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert again.returncode == 0, again.stderr
    log = (exp / "log" / "train.log").read_text()
    assert "resum" in log.lower(), log[-2000:]
    a, b = _model(tmp_path / "ref"), _model(exp)
    assert all(torch.equal(a[k], b[k]) for k in a)
