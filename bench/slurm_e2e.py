"""The whole digits recipe (tiny settings) through SLURM, beside the same recipe run locally.

    PYTHONPATH=. .venv/bin/python bench/slurm_e2e.py            # full: writes bench/results/slurm_e2e.json
    PYTHONPATH=. .venv/bin/python bench/slurm_e2e.py --quick    # one 2-node training job on the toy set-up

Full mode, on the cluster of ``tools/slurm_local.sh`` (started here; root):

1. locally, ``python -m steps.plan --run`` (what ``run.sh`` does) with 2 learners, BMUF, stages 1-7;
2. ``snakemake all --profile profiles/slurm``: every step a SLURM job (the features ``nj`` jobs per set), training
   as the Snakefile's own rule (srun over 2 nodes, one torchrun of 1 learner per node, c10d rendezvous);
3. the training job is cancelled with ``scancel`` once it has written a checkpoint inside its first epoch; Snakemake
   reports it failed (its log in ``.snakemake/slurm_logs/rule_train_model/<job id>.log``); the same snakemake
   command again resubmits the training, which resumes from the checkpoint, and the jobs after it.

The JSON holds every job Snakemake submitted, as ``sacct`` records it (id, rule, state, nodes, elapsed), the world
size and node of each learner (from the learners' own ``log/dist.rank<R>.json``), the cancel (step and epoch of the
checkpoint it resumed from), whether the SLURM model equals the local one bit for bit, and the WER of every eval set
and search of both runs. ``--quick`` (under a minute with the cluster up) submits the 2-node training rule's own
command on the toy set-up as one job and reports its sacct record and learners. Where the cluster cannot start (not
root, no apt-get) the JSON says why (``"skipped"``) and the exit status is 0; any other failure exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from asrlib.cli import env_with_root  # noqa: E402
from asrlib.config import load_config  # noqa: E402
from asrlib.io.torchfile import load_torch  # noqa: E402
from asrlib.pipeline import Layout, plan  # noqa: E402

PY = sys.executable
ENV = env_with_root(ROOT)
RESULTS = ROOT / "bench" / "results" / "slurm_e2e.json"
SUBMITTED = re.compile(r"submitted with SLURM jobid (\d+) \(log: (\S*?rule_(\w+)/\d+\.log)\)")
SACCT_FIELDS = ["JobID", "JobName", "Comment", "State", "NodeList", "AllocNodes", "AllocCPUS", "ElapsedRaw"]
# the tiny recipe: 360 train / 36 dev / 36 test utterances, a 2 x 128 LSTM, 30 epochs of BMUF over 2 learners
TINY = {
    "data": {"size": 0.12, "train_scale": 1.0},
    "model": {"num_layers": 2, "hidden_size": 128, "proj_size": 0},
    "train": {
        "epochs": 30,
        "batch_seconds": 10,
        "lr": 0.004,
        "warmup_steps": 50,
        "checkpoint_every": 10,
        "num_threads": 1,
        "dist": {"algo": "bmuf", "period": 2},
    },
    "export": {"finetune_utts": 20},
    "cluster": {
        "nodes": 2,
        "learners_per_node": 1,
        "cpus_per_learner": 1,
        "train_mem_mb": 2000,
        "train_runtime_min": 30,
    },
}
SNAKE_SLURM = [
    "--profile",
    str(ROOT / "profiles/slurm"),
    "--default-resources",
    "mem_mb=1000",
    "runtime=30",
    "cpus_per_task=1",
    "--slurm-init-seconds-before-status-checks",
    "2",
]


class Skip(Exception):
    """The cluster cannot run here (not root, or slurm-wlm cannot be installed)."""


def cannot_run() -> str:
    """Why the local cluster cannot run here ("" where it can: root, and its Debian packages installed or
    installable)."""
    if os.geteuid() != 0:
        return "starting the local SLURM cluster (tools/slurm_local.sh) needs root"
    if all(_which(c) for c in ("slurmctld", "slurmdbd", "munged", "mariadbd")):
        return ""
    if not _which("apt-get"):
        return "slurm-wlm is not installed and there is no apt-get to install it"
    r = subprocess.run(["apt-cache", "policy", "slurm-wlm"], capture_output=True, text=True)
    if "Candidate:" not in r.stdout or "Candidate: (none)" in r.stdout:
        return "slurm-wlm is not installed and apt knows no package of it"
    return ""


def start_cluster() -> str:
    """``tools/slurm_local.sh start``; returns its output. Skip where it cannot run at all; raise where it should."""
    why = cannot_run()
    if why:
        raise Skip(why)
    r = subprocess.run([str(ROOT / "tools/slurm_local.sh"), "start"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"tools/slurm_local.sh start failed:\n{r.stdout[-2000:]}{r.stderr[-3000:]}")
    return r.stdout


def _which(cmd: str) -> bool:
    return any(os.access(os.path.join(d, cmd), os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep))


def sacct(job_ids: List[str]) -> Dict[str, dict]:
    """``sacct``'s record of each job (allocation lines only), waiting up to 60 s for every id to be there."""
    deadline = time.time() + 60
    while True:
        cmd = ["sacct", "-X", "-P", "-n", "-j", ",".join(job_ids), "-o", ",".join(SACCT_FIELDS)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        rows = {r["JobID"]: r for r in (dict(zip(SACCT_FIELDS, line.split("|"))) for line in out.splitlines())}
        done = all(i in rows and rows[i]["State"] not in ("PENDING", "RUNNING") for i in job_ids)
        if done or time.time() > deadline:
            return rows
        time.sleep(1)


def learners(exp: Path) -> List[dict]:
    """World size and node of every learner, from their own ``log/dist.rank<R>.json``."""
    out = []
    for p in sorted((exp / "log").glob("dist.rank*.json")):
        d = json.loads(p.read_text())
        out.append({"rank": d["rank"], "world_size": d["world_size"], "node": d.get("node")})
    return out


def wers(exp: Path) -> Dict[str, float]:
    return {p.parent.name: json.loads(p.read_text())["wer"] for p in sorted(exp.glob("decode_*/wer.json"))}


def same_weights(a: Path, b: Path) -> bool:
    import torch

    x, y = (load_torch(p)["model"] for p in (a, b))
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def snakemake(conf: Path, work: Path, log: Path) -> subprocess.Popen:
    cmd = [PY, "-m", "snakemake", "all", "--snakefile", str(ROOT / "Snakefile"), "--cores", "all", *SNAKE_SLURM]
    cmd += ["--config", f"recipe_config={conf}", f"workdir={work}", f"python={PY}"]
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True, env=ENV, cwd=work.parent)


def squeue_rule(rule: str) -> List[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i %k %T"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.split()[1:2] == [f"rule_{rule}"]]


def cancel_training_mid_epoch(proc: subprocess.Popen, exp: Path, timeout: float = 1800) -> dict:
    """``scancel`` the training job as soon as it has written its first checkpoint (step ``checkpoint_every`` of
    epoch 1), and wait until SLURM has ended it; returns the job and where its last checkpoint stands."""
    ckpt = exp / "checkpoints" / "latest.pt"
    deadline = time.time() + timeout
    while not ckpt.exists():
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError("snakemake ended (or timed out) before training wrote a checkpoint")
        time.sleep(0.1)
    jobs = squeue_rule("train_model")
    if len(jobs) != 1:
        raise RuntimeError(f"expected one running training job, squeue shows {jobs}")
    subprocess.run(["scancel", jobs[0]], check=True)
    t0 = time.time()
    while squeue_rule("train_model") and time.time() - t0 < 120:
        time.sleep(0.5)
    st = load_torch(ckpt, "checkpoint")
    done = (exp / ".train.done").exists()
    return {"job": jobs[0], "step": st["step"], "epoch": st["epoch"], "batch_in_epoch": st["batch_in_epoch"]} | {
        "train_done_before_cancel": done
    }


def full(work: Path) -> dict:
    conf = work / "tiny.yaml"
    cfg = yaml.safe_load((ROOT / "recipes/digits/config.yaml").read_text())
    for section, vals in TINY.items():
        cfg.setdefault(section, {}).update(vals)
    conf.write_text(yaml.safe_dump(cfg))
    local, slurm = work / "local", work / "slurm"
    for d in (local, slurm):
        d.mkdir(parents=True, exist_ok=True)
    timing = {}
    # 1: locally, run.sh's way, 2 learners on this machine
    t0 = time.time()
    cmd = [PY, "-m", "steps.plan", "--run", "--config", str(conf), "--num-learners", "2", "--threads-per-learner", "1"]
    r = subprocess.run(cmd, cwd=local, env=ENV, capture_output=True, text=True)
    (work / "local.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        raise RuntimeError(f"the local run failed (see {work / 'local.log'}):\n{r.stderr[-3000:]}")
    timing["local_s"] = round(time.time() - t0, 1)
    # 2-3: through SLURM, the training job cancelled mid-epoch, then the same command again
    t0 = time.time()
    first = snakemake(conf, slurm, work / "snakemake1.log")
    cancel = cancel_training_mid_epoch(first, slurm / "exp/lstm_ctc")
    first.wait()
    out1 = (work / "snakemake1.log").read_text()
    if first.returncode == 0 or "Error in rule train_model" not in out1:
        raise RuntimeError(f"the cancelled training was not reported as failed (see {work / 'snakemake1.log'})")
    failed_log = next((Path(m[1]) for m in SUBMITTED.findall(out1) if m[0] == cancel["job"]), Path("missing"))
    failed_log = slurm / failed_log if not failed_log.is_absolute() else failed_log
    cancel["failed_job_log"] = (
        str(failed_log.relative_to(slurm)) if failed_log.is_relative_to(slurm) else str(failed_log)
    )
    cancel["log_says_cancelled"] = failed_log.is_file() and "CANCELLED" in failed_log.read_text()
    second = snakemake(conf, slurm, work / "snakemake2.log")
    second.wait()
    out2 = (work / "snakemake2.log").read_text()
    if second.returncode != 0:
        raise RuntimeError(f"the rerun after the cancel failed (see {work / 'snakemake2.log'}):\n{out2[-3000:]}")
    timing["slurm_s"] = round(time.time() - t0, 1)
    submitted = [(m[0], m[2]) for m in SUBMITTED.findall(out1 + out2)]
    acct = sacct([j for j, _ in submitted])
    jobs = [
        {
            "job_id": j,
            "rule": rule,
            "in_sacct": j in acct,
            "sacct_rule": acct.get(j, {}).get("Comment", "").removeprefix("rule_"),
            "state": acct.get(j, {}).get("State", "").split(" ")[0],  # "CANCELLED by 0" -> CANCELLED
            "nodes": acct.get(j, {}).get("NodeList"),
            "num_nodes": int(acct.get(j, {}).get("AllocNodes") or 0),
            "cpus": int(acct.get(j, {}).get("AllocCPUS") or 0),
            "elapsed_s": int(acct.get(j, {}).get("ElapsedRaw") or 0),
        }
        for j, rule in submitted
    ]
    exp_l, exp_s = local / "exp/lstm_ctc", slurm / "exp/lstm_ctc"
    resumed = "resumed from" in (exp_s / "log/train.log").read_text()
    return {
        "jobs": jobs,
        "cancel": {**cancel, "resumed": resumed},
        "learners": learners(exp_s),
        "local_learners": learners(exp_l),
        "bit_identical_to_local": same_weights(exp_l / "final.pt", exp_s / "final.pt"),
        "wer": {"local": wers(exp_l), "slurm": wers(exp_s)},
        "mobile_bundle": (exp_s / "mobile/.export.done").is_file(),
        "wall_s": timing,
        "config": TINY,
    }


def quick(work: Path) -> dict:
    """The Snakefile's 2-node training command (asrlib.pipeline's, BMUF) on the toy set-up, as one SLURM job."""
    from helpers import make_toy_ctc_setup, toy_config_yaml

    setup = make_toy_ctc_setup(work / "toy", {"train": 40, "dev": 8})
    for d in ("fbank", "lang"):  # the plan's layout: <data>/fbank, <data>/lang
        (setup / "data" / d).symlink_to(setup / d)
    conf = toy_config_yaml(work / "c.yaml", epochs=1)
    cfg = yaml.safe_load(conf.read_text())
    cfg["cluster"], cfg["train"]["dist"] = TINY["cluster"], {"algo": "bmuf", "period": 2}
    conf.write_text(yaml.safe_dump(cfg))
    exp = work / "exp"
    lay = Layout(config=str(conf), data=str(setup / "data"), exp=str(exp), slurm=True)
    train = next(s for s in plan(load_config(conf), lay, PY) if s.name == "train_model")
    t0 = time.time()
    sbatch = ["sbatch", "--wait", "--parsable", "-N2", "--ntasks-per-node=1", "-c1", "-o", str(work / "job-%j.out")]
    r = subprocess.run([*sbatch, "--wrap", train.shell(PY)], capture_output=True, text=True, env=ENV)
    job = r.stdout.strip()
    if r.returncode != 0:
        out = "".join(p.read_text() for p in work.glob("job-*.out"))
        raise RuntimeError(f"the 2-node training job failed: {r.stderr}\n{out[-3000:]}")
    row = sacct([job])[job]
    return {
        "jobs": [{"job_id": job, "state": row["State"], "nodes": row["NodeList"], "elapsed_s": int(row["ElapsedRaw"])}],
        "learners": learners(exp),
        "wall_s": round(time.time() - t0, 1),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="one 2-node training job on the toy set-up")
    p.add_argument("--work", type=Path, default=None, help="work dir (default: a temporary one, removed after)")
    p.add_argument("--results", type=Path, default=None, help=f"the JSON file (full mode default: {RESULTS})")
    a = p.parse_args()
    tmp = None
    if a.work is None:
        tmp = tempfile.TemporaryDirectory(prefix="slurm_e2e.")
        a.work = Path(tmp.name)
    work = a.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    head = {"bench": "slurm_e2e", "mode": "quick" if a.quick else "full", "cores": os.cpu_count()}
    t0 = time.time()
    try:
        cluster = start_cluster()
        res = {**head, **(quick(work) if a.quick else full(work))}
    except Skip as e:
        print(json.dumps({**head, "skipped": str(e)}))
        return 0
    nodes = re.findall(r"^(node\d+)\s", cluster, re.M)
    res.update(cluster_nodes=sorted(set(nodes)), load_avg=[round(x, 2) for x in os.getloadavg()])
    res["total_s"] = round(time.time() - t0, 1)
    out = a.results or (None if a.quick else RESULTS)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1) + "\n")
    if tmp is not None:
        tmp.cleanup()
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
