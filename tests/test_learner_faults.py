"""Learners that die or lag (2 learners on the toy set-up, real processes under torchrun via steps.train_dist).

- ``--max-restarts 1``: one learner SIGKILLed from outside mid-epoch after a checkpoint (rank 1, or rank 0, which
  holds the exp dir's lock), or every learner by the ``train.kill_after_steps`` testing aid (which fires only in
  torchrun's first attempt): the job restarts, resumes from the last checkpoint, loses at most one checkpoint
  interval of steps, exits 0, and its final weights equal an uninterrupted run's bit for bit (sync).
- BMUF, the launcher's process group SIGKILLed mid-block after a checkpoint (the learners, which torchrun puts in
  sessions of their own, die with their agent: asrlib.parallel.env.die_with_agent), then the same command rerun:
  bit-identical to an uninterrupted run (global model, block momentum and block position restored).
- the straggler knob (``train.dist.straggler_rank`` / ``straggler_sleep``) makes that learner slower per step.

The kills from outside land mid-step because learner 1 sleeps 0.2 s per step (the straggler knob, which changes no
number), so "after step N" is a window of at least 0.2 s, not a race.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from asrlib.parallel.harness import learner_pids, restart_report, run_learners, run_toy_scenarios, wait_for_step
from helpers import make_toy_ctc_setup, toy_config_yaml, toy_dirs
from steps.train_dist import torchrun_args

ROOT = Path(__file__).resolve().parents[1]
ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "TORCHELASTIC"))},
    "PYTHONPATH": str(ROOT),
}
CKPT = 3  # checkpoint_every; 6 steps per learner per epoch (lhotse's sampler on the toy set), 2 epochs
SLOW = ["train.dist.straggler_rank=1", "train.dist.straggler_sleep=0.2"]


def _cmd(toy: Path, exp: Path, algo: str, *overrides: str, restarts: int = 1) -> list:
    sets = sum((["--set", o] for o in (f"train.dist.algo={algo}", *overrides)), [])
    return [
        sys.executable,
        "-m",
        "steps.train_dist",
        "--num-learners",
        "2",
        "--threads-per-learner",
        "1",
        "--max-restarts",
        str(restarts),
        "--",
        "--config",
        str(toy / "c.yaml"),
        *sets,
        *toy_dirs(toy),
        "--exp-dir",
        str(exp),
    ]


def _start(cmd: list, out: Path) -> subprocess.Popen:
    """In a process group of its own, which os.killpg can SIGKILL (the learners die with their torchrun agent)."""
    with open(out, "w") as f:
        return subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def _finish(job: subprocess.Popen, timeout: float = 120) -> int:
    try:
        return job.wait(timeout)
    finally:
        if job.poll() is None:  # timed out (or the test failed meanwhile): leave nothing running
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()


def _lock_holder_becomes(exp: Path, pid, job: subprocess.Popen, timeout: float = 60) -> bool:
    """Whether the exp dir's lock comes to be held by ``pid()`` (polled) while the job runs."""
    deadline = time.time() + timeout
    while job.poll() is None and time.time() < deadline:
        want = pid()
        if want and json.loads((exp / ".lock").read_text() or "{}").get("pid") == want:
            return True
        time.sleep(0.05)
    return False


def _environ(pid: int) -> dict:
    return dict(kv.split("=", 1) for kv in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in kv)


def _run(cmd: list, out: Path) -> int:
    return _finish(_start(cmd, out))


def _weights(exp: Path) -> dict:
    return torch.load(exp / "final.pt", weights_only=True)["model"]


def _assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    root = make_toy_ctc_setup(tmp_path_factory.mktemp("faults") / "toy")
    toy_config_yaml(root / "c.yaml", checkpoint_every=CKPT, log_every=1)  # every step logged: exact steps lost
    return root


@pytest.fixture(scope="module")
def sync_ref(toy) -> Path:
    exp = toy.parent / "sync_ref"
    assert _run(_cmd(toy, exp, "sync"), toy.parent / "sync_ref.out") == 0, (toy.parent / "sync_ref.out").read_text()
    return exp


@pytest.mark.parametrize("victim", ["rank1", "rank0", "kill_after_steps"])
def test_a_killed_learner_is_restarted_from_the_last_checkpoint_and_ends_bit_identical(toy, sync_ref, victim):
    exp, out = toy.parent / f"sync_{victim}", toy.parent / f"sync_{victim}.out"
    if victim == "kill_after_steps":  # every learner kills itself after step 4, in the first attempt only
        job = _start(_cmd(toy, exp, "sync", "train.kill_after_steps=4"), out)
    else:
        job = _start(_cmd(toy, exp, "sync", *SLOW), out)
        wait_for_step(exp, CKPT + 1, job)  # checkpoint at step 3 written, step 4 done: the kill lands in step 5
        before = learner_pids(exp)
        port = _environ(before[0])["MASTER_PORT"]
        os.kill(before[int(victim[-1])], signal.SIGKILL)
        # the first attempt's rank 0 (killed, or stopped by torchrun) releases the lock; the restarted one takes it
        assert _lock_holder_becomes(exp, lambda: learner_pids(exp, attempt=1).get(0), job)
        # each attempt rendezvouses on a store of its own (a shared one can hand out the dead attempt's addresses)
        assert _environ(learner_pids(exp, attempt=1)[0])["MASTER_PORT"] != port
    assert _finish(job) == 0, out.read_text()[-3000:]
    assert "failed (exitcode: -9)" in out.read_text()  # torchrun saw the SIGKILL ...
    log = (exp / "log" / "train.log").read_text()
    assert "torchrun restart 1 of 1: resuming from the last checkpoint" in log  # ... and restarted the job
    rep = restart_report(exp)
    assert rep["attempts"] == 2 and rep["restarts"] == 1 and rep["final_step"] == 12, rep
    assert rep["resumed_step"] == CKPT and 1 <= rep["steps_lost"] <= CKPT, rep
    assert (exp / "final.pt").is_file() and (exp / ".train.done").is_file()
    assert json.loads((exp / ".lock").read_text() or "{}") == {}  # released at the end
    _assert_same_weights(sync_ref, exp)


def test_bmuf_job_killed_mid_block_and_rerun_ends_bit_identical(toy):
    bmuf = ["train.dist.period=3", "train.checkpoint_every=4"]  # blocks end at steps 3, 6 (epoch end), 9, 12
    ref = toy.parent / "bmuf_ref"
    ref_job = _start(_cmd(toy, ref, "bmuf", *bmuf, restarts=0), toy.parent / "bmuf_ref.out")  # alongside
    exp, out = toy.parent / "bmuf_res", toy.parent / "bmuf_res.out"
    cmd = _cmd(toy, exp, "bmuf", *bmuf, *SLOW, restarts=0)
    job = _start(cmd, out)
    wait_for_step(exp, 4, job)  # and the first checkpoint, at step 4 (1 step into the block), is written
    assert sorted(learner_pids(exp)) == [0, 1]
    os.killpg(job.pid, signal.SIGKILL)  # the launcher and its torchrun agent (one process) ...
    job.wait(30)
    deadline = time.time() + 20  # ... take the learners (sessions of their own) with them
    while learner_pids(exp) and time.time() < deadline:
        time.sleep(0.1)
    assert learner_pids(exp) == {}, "learners outlived their killed launcher"
    ck = torch.load(exp / "checkpoints" / "latest.pt", weights_only=True)
    assert ck["step"] == 4 and ck["algo"]["shared"]["since_sync"] == 1, "the kill did not land mid-block"
    assert not (exp / "final.pt").exists()
    assert _run(cmd, toy.parent / "bmuf_rerun.out") == 0, (toy.parent / "bmuf_rerun.out").read_text()[-3000:]
    rep = restart_report(exp)
    assert rep["attempts"] == 2 and rep["resumed_step"] == 4 and rep["final_step"] == 12, rep
    assert _finish(ref_job) == 0, (toy.parent / "bmuf_ref.out").read_text()[-3000:]
    _assert_same_weights(ref, exp)


def test_max_restarts_goes_to_torchrun():
    assert "--max-restarts=0" in torchrun_args(2, 1, ["x"])
    assert "--max-restarts=2" in torchrun_args(2, 1, ["x"], max_restarts=2)


def test_the_straggler_learner_is_slower_per_step(tmp_path):
    setup = make_toy_ctc_setup(tmp_path / "toy")
    cfg = toy_config_yaml(tmp_path / "c.yaml", epochs=1, checkpoint_every=100)
    sleep = 0.2
    scenarios = [
        dict(
            setup=str(setup),
            config=str(cfg),
            exp_dir=str(tmp_path / algo),
            overrides=[f"train.dist.algo={algo}", "train.dist.straggler_rank=1", f"train.dist.straggler_sleep={sleep}"],
        )
        for algo in ("sync", "adpsgd")
    ]
    res = run_learners(run_toy_scenarios, 2, args=(scenarios,), timeout=120)
    for i, algo in enumerate(("sync", "adpsgd")):
        total = res[1][i]["algo"]["total"]  # the straggler's own step timing (backward to backward)
        assert total["cycles"] >= 3 and total["cycle_s"] / total["cycles"] >= sleep, (algo, total)
        assert res[0][i]["algo"]["total"]["cycles"] == total["cycles"]
