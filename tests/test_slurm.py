"""The cluster path on a real SLURM: tools/slurm_local.sh's cluster of two nodes on this machine (Debian's slurm-wlm in
multiple-slurmd mode, slurmdbd for sacct, munge), driven by bench/slurm_e2e.py. Slow tier (`make test-slow`).

Where the cluster can run (root, and slurm-wlm installed or installable with apt-get) a cluster that does not start
fails the test; elsewhere the test is skipped with the reason (pytest -rs, which `make test-slow` passes, prints it).

The whole digits recipe (tiny settings) runs as `snakemake --profile profiles/slurm`: every step a SLURM job (the
features of each set as nj jobs), training through the Snakefile's own srun + torchrun rule on 2 nodes x 1 learner
with BMUF, decoding, scoring and the mobile export as jobs of their own. The training job is cancelled with scancel
after its first checkpoint inside epoch 1; the rerun resumes from it and ends with the weights, bit for bit, of the
same recipe run locally (run.sh's way, 2 learners) without interruption, and so with its WER.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

from asrlib.cli import env_with_root
from asrlib.io.torchfile import load_torch

pytestmark = pytest.mark.slow
sys.path.insert(0, str(ROOT / "bench"))
import slurm_e2e  # noqa: E402


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    why = slurm_e2e.cannot_run()
    if why:
        pytest.skip(why)
    work = tmp_path_factory.mktemp("slurm_e2e")
    cmd = [sys.executable, str(ROOT / "bench/slurm_e2e.py"), "--work", str(work), "--results", str(work / "r.json")]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env_with_root(ROOT))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    res = json.loads((work / "r.json").read_text())
    assert "skipped" not in res  # it can run here, so it must
    return work, res


def _jobs(res: dict, rule: str) -> list:
    return [j for j in res["jobs"] if j["rule"] == rule]


def test_every_step_is_a_slurm_job_that_sacct_confirms(e2e):
    _, res = e2e
    jobs = res["jobs"]
    assert all(j["in_sacct"] and j["sacct_rule"] == j["rule"] for j in jobs), jobs
    rules = {j["rule"] for j in jobs}
    wanted = {"prepare_data", "validate_train", "fbank_train", "cmvn", "lang", "train_model", "logprobs_test"}
    wanted |= {"decode_test_tlg", "score_test_tlg", "results", "export_mobile"}
    assert wanted <= rules
    nj = slurm_e2e.TINY.get("features", {}).get("nj", 2)
    assert {f"fbank_train_job{j}" for j in range(1, nj + 1)} <= rules  # features as nj jobs of their own
    cancelled = res["cancel"]["job"]
    for j in jobs:
        assert j["state"] == ("CANCELLED" if j["job_id"] == cancelled else "COMPLETED"), j
    assert len({j["job_id"] for j in jobs}) == len(jobs)


def test_training_ran_on_two_nodes_with_a_world_of_two(e2e):
    _, res = e2e
    assert res["cluster_nodes"] == ["node1", "node2"]
    for j in _jobs(res, "train_model"):
        assert j["num_nodes"] == 2 and j["nodes"] == "node[1-2]", j
    learners = res["learners"]  # from the learners' own log/dist.rank<R>.json
    assert sorted(x["rank"] for x in learners) == [0, 1]
    assert all(x["world_size"] == 2 for x in learners)
    assert sorted(x["node"] for x in learners) == ["node1", "node2"]


def test_a_cancelled_training_resumes_to_the_local_runs_weights_and_wer(e2e):
    work, res = e2e
    c = res["cancel"]
    assert c["batch_in_epoch"] > 0 and not c["train_done_before_cancel"]  # cancelled inside an epoch
    assert c["resumed"]
    log = work / "slurm" / c["failed_job_log"]  # where docs/pipeline.md says a failed job's log is
    assert log.parent.name == "rule_train_model" and log.name == f"{c['job']}.log"
    assert "CANCELLED" in log.read_text()
    assert len(_jobs(res, "train_model")) == 2  # the cancelled job, and the one that resumed
    a = load_torch(work / "local/exp/lstm_ctc/final.pt")["model"]
    b = load_torch(work / "slurm/exp/lstm_ctc/final.pt")["model"]
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)  # bit for bit
    assert res["bit_identical_to_local"]
    assert res["wer"]["slurm"] == res["wer"]["local"] and "decode_test_tlg" in res["wer"]["slurm"]
    assert res["mobile_bundle"]


def test_the_cluster_script_is_idempotent(e2e):
    r = subprocess.run([str(ROOT / "tools/slurm_local.sh"), "start"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.count("idle") == 2, r.stdout + r.stderr
    assert Path("/etc/slurm/slurm.conf").read_text().count("NodeName=node") == 2
