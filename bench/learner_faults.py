"""Learners that die or lag (issue #6 part 2), 2 learners with 1 thread each:

1. **learner kill**: ``steps.train_dist --max-restarts 1`` (sync); learner ``--victim`` is SIGKILLed from outside
   once the job has logged the step 4 past its first checkpoint (so the kill lands mid-epoch, at no particular
   point of a step; all learners log every step). Reported: steps done before the kill (the highest step any
   learner logged), the checkpoint step the restarted job resumed from, steps lost (their difference: completed
   steps done again), the checkpoint interval, whether the job completed, its final dev loss (and, on the digits
   data, the greedy test WER) next to an uninterrupted run's with the same command, and whether the final weights
   are bit-identical. (With ``--quick`` the two runs go at the same time, to stay under a minute; their wall times
   then mean little.)
2. **straggler**: for sync, bmuf and adpsgd, a run without a straggler and one with learner 1 sleeping S seconds per
   step (``train.dist.straggler_sleep``; S = ``--sleep-factor`` x the normal step time, measured first on the runs
   without straggler). Per learner: seconds per step = the mean step cycle (backward to backward, within epochs;
   CommStats.cycle_s / cycles from the algorithm's summary), and the learner's whole ``Trainer.fit`` wall time. The
   fast learner's slowdown = its seconds per step with the straggler / without. These runs write no checkpoint
   inside the epoch (a checkpoint is a collective: every learner would wait for the straggler there). With fewer
   cores than busy processes a sleeping straggler also frees CPU, so a learner that does not wait for it can get
   faster (slowdown < 1).

Data: ``--quick`` (under a minute) uses the toy CTC set-up (tests/helpers.py; no WER: its lang dir has no words);
the full mode (a few minutes) uses a subset of the digits recipe's data when ``recipes/digits/data`` and
``data/fbank`` exist (a small 2 x 128 LSTM, few steps: 2 epochs of 600 utterances do not get past CTC's
all-blank phase, so the WER is 100 %; ``--train-utts`` / ``--epochs`` for longer runs), else a larger toy set-up.

    PYTHONPATH=. .venv/bin/python bench/learner_faults.py --quick
    PYTHONPATH=. .venv/bin/python bench/learner_faults.py --out recipes/digits/exp/bench_learner_faults

Ends with one JSON line {"bench": "learner_faults", ...}; a markdown table of the straggler runs is printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from asrlib.io.torchfile import load_torch  # noqa: E402
from asrlib.parallel.harness import (
    learner_pids,
    restart_report,
    run_learners,
    run_toy_scenarios,  # noqa: E402
    wait_for_step,
)

sys.path.insert(0, str(ROOT / "tests"))
from helpers import make_toy_ctc_setup, toy_config_yaml  # noqa: E402

PY = sys.executable
ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "TORCHELASTIC"))},
    "PYTHONPATH": str(ROOT),
}
ALGOS = {"sync": [], "bmuf": ["train.dist.period=4"], "adpsgd": []}
DIGITS_MODEL = [
    "model.num_layers=2",
    "model.hidden_size=128",
    "train.batch_seconds=20",
    "train.warmup_steps=20",
    "train.lr=0.002",
    "train.freq_warp=0.0",
]


# ------------------------------------------------------------------------------------------------ set-ups
def toy_setup(out: Path, n_train: int) -> Dict[str, Any]:
    root = make_toy_ctc_setup(out / "toy", {"train": n_train, "dev": 16})
    return {
        "name": f"toy ({n_train} train utts)",
        "root": root,
        "lang": root / "lang",
        "config": toy_config_yaml(out / "toy.yaml", epochs=2),
        "overrides": [],
        "test": None,
    }


def digits_setup(out: Path, recipe: Path, n_train: int, epochs: int) -> Dict[str, Any]:
    from asrlib.data.subset import subset_training_tables

    data = recipe / "data"
    sub = subset_training_tables(data, data / "fbank", out / "digits_subset", {"train": n_train, "dev": 100})
    if not (sub / "lang").exists():
        (sub / "lang").symlink_to((data / "lang").resolve())  # the layout train_toy reads: fbank/, data/, lang/
    n_test = len((data / "test" / "text").read_text().splitlines())
    return {
        "name": f"digits subset ({n_train} train, 100 dev utts; test: all {n_test})",
        "root": sub,
        "lang": data / "lang",
        "config": recipe / "config.yaml",
        "overrides": [*DIGITS_MODEL, f"train.epochs={epochs}"],
        "test": (data / "fbank" / "test" / "feats.scp", data / "test" / "text"),
    }


# ------------------------------------------------------------------------------------------------ learner kill
def train_cmd(setup: Dict[str, Any], exp: Path, overrides: List[str]) -> List[str]:
    root = setup["root"]
    sets = sum((["--set", o] for o in [*setup["overrides"], "train.dist.algo=sync", *overrides]), [])
    return [
        PY,
        "-m",
        "steps.train_dist",
        "--num-learners",
        "2",
        "--threads-per-learner",
        "1",
        "--max-restarts",
        "1",
        "--",
        "--config",
        str(setup["config"]),
        *sets,
        "--data-dir",
        str(root / "data"),
        "--feats-dir",
        str(root / "fbank"),
        "--lang-dir",
        str(setup["lang"]),
        "--exp-dir",
        str(exp),
    ]


def greedy_wer(setup: Dict[str, Any], exp: Path) -> Optional[float]:
    """Greedy (no grammar) WER on the test set with the existing steps; None without a test set / words."""
    if setup["test"] is None:
        return None
    feats, ref = setup["test"]
    steps = [
        [
            "steps.compute_logprobs",
            "--model",
            str(exp / "final.pt"),
            "--feats",
            str(feats),
            "--out-dir",
            str(exp / "logprobs_test"),
            "--num-threads",
            "2",
        ],
        [
            "steps.decode",
            "--config",
            str(setup["config"]),
            "--method",
            "greedy",
            "--logprobs",
            str(exp / "logprobs_test" / "logprobs.scp"),
            "--lang-dir",
            str(setup["lang"]),
            "--out-dir",
            str(exp / "decode_test_greedy"),
        ],
        [
            "steps.score",
            "--ref",
            str(ref),
            "--hyp",
            str(exp / "decode_test_greedy" / "hyp.txt"),
            "--out-dir",
            str(exp / "decode_test_greedy"),
        ],
    ]
    for s in steps:
        subprocess.run([PY, "-m", *s], cwd=ROOT, env=ENV, check=True, capture_output=True)
    return json.loads((exp / "decode_test_greedy" / "wer.json").read_text())["wer"]


def kill_run(
    setup: Dict[str, Any], out: Path, ckpt: int, kill_after: int, victim: int, overlap: bool
) -> Dict[str, Any]:
    """The uninterrupted reference run, then (``overlap``: at the same time) the run whose learner is killed."""
    ov = [f"train.checkpoint_every={ckpt}", "train.log_every=1"]  # every step logged: exact steps lost
    ref, exp = out / "kill_ref", out / "kill_victim"
    for d in (ref, exp):
        shutil.rmtree(d, ignore_errors=True)

    def start(exp_dir: Path) -> subprocess.Popen:
        with open(out / f"{exp_dir.name}.out", "w") as f:
            return subprocess.Popen(
                train_cmd(setup, exp_dir, ov),
                cwd=ROOT,
                env=ENV,
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    t = time.perf_counter()
    ref_job = start(ref)
    if not overlap:
        rc_ref, ref_wall = ref_job.wait(), time.perf_counter() - t
    t = time.perf_counter()
    job = start(exp)
    try:
        wait_for_step(exp, kill_after, job, timeout=600)
        os.kill(learner_pids(exp)[victim], signal.SIGKILL)
        rc = job.wait(1200)
        wall = time.perf_counter() - t
        if overlap:  # (the two runs shared the cores: no wall time for the reference)
            rc_ref, ref_wall = ref_job.wait(1200), None
    finally:
        for j in (job, ref_job):
            if j.poll() is None:
                os.killpg(j.pid, signal.SIGKILL)
                j.wait()
    rep = restart_report(exp)

    def done(e):
        return json.loads((e / ".train.done").read_text()) if (e / ".train.done").is_file() else {}

    same = None
    if (exp / "final.pt").is_file() and (ref / "final.pt").is_file():
        a, b = (load_torch(e / "final.pt")["model"] for e in (ref, exp))
        same = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    return {
        "algo": "sync",
        "victim_rank": victim,
        "checkpoint_every": ckpt,
        "kill_after_step_logged": kill_after,
        "steps_before_kill": rep["steps_before_failure"],
        "resumed_from_step": rep["resumed_step"],
        "steps_lost": rep["steps_lost"],
        "restarts": rep["restarts"],
        "final_step": rep["final_step"],
        "completed": rc == 0 and (exp / "final.pt").is_file(),
        "exit_status": rc,
        "final_dev_loss": done(exp).get("final_dev_loss"),
        "ref_final_dev_loss": done(ref).get("final_dev_loss"),
        "ref_exit_status": rc_ref,
        "bit_identical_to_ref": same,
        "test_wer_greedy": greedy_wer(setup, exp) if rc == 0 else None,
        "ref_test_wer_greedy": greedy_wer(setup, ref) if rc_ref == 0 else None,
        "wall_s": round(wall, 1),
        "ref_wall_s": ref_wall and round(ref_wall, 1),
        "runs_overlapped": overlap,
    }


# ------------------------------------------------------------------------------------------------ straggler
def per_step(r: Dict[str, Any]) -> float:
    tot = r["algo"]["total"]
    return tot["cycle_s"] / max(tot["cycles"], 1)


def straggler_scenarios(
    rank: int, world: int, setup: Dict[str, Any], out: Path, factor: float, sleep: Optional[float]
) -> Dict[str, Any]:
    """In each learner process: every algorithm without straggler, then with learner 1 sleeping S s per step (S
    agreed by all learners: ``sleep``, else ``factor`` x the mean of their median seconds per step alone)."""
    import matplotlib.pyplot  # noqa: F401  (imported here, not inside the first run's fit_s)
    import torch.distributed as dist
    from torch.utils.tensorboard import SummaryWriter  # noqa: F401

    common = [*setup["overrides"], "train.epochs=1", "train.checkpoint_every=100000"]

    def scenarios(tag: str, extra: List[str]) -> List[Dict[str, Any]]:
        dirs = {algo: out / "straggler" / f"{algo}_{tag}" for algo in ALGOS}
        if rank == 0:
            for d in dirs.values():
                shutil.rmtree(d, ignore_errors=True)  # fresh: train_toy would resume from an old checkpoint
        dist.barrier()
        return [
            dict(
                setup=str(setup["root"]),
                config=str(setup["config"]),
                exp_dir=str(dirs[algo]),
                overrides=[*common, f"train.dist.algo={algo}", *ov, *extra],
            )
            for algo, ov in ALGOS.items()
        ]

    alone = run_toy_scenarios(rank, world, scenarios("alone", []))
    mine = sorted(per_step(r) for r in alone)
    step = torch.tensor([mine[len(mine) // 2]], dtype=torch.float64)
    dist.all_reduce(step)
    step = float(step) / world
    s = round(sleep if sleep is not None else factor * step, 4)
    slow = run_toy_scenarios(
        rank, world, scenarios("straggler", ["train.dist.straggler_rank=1", f"train.dist.straggler_sleep={s}"])
    )
    return {"alone": alone, "slow": slow, "step": step, "sleep": s}


def straggler_runs(setup: Dict[str, Any], out: Path, factor: float, sleep: Optional[float]) -> Dict[str, Any]:
    res = run_learners(straggler_scenarios, 2, args=(setup, out, factor, sleep), timeout=1800)
    step, s = res[0]["step"], res[0]["sleep"]
    table = {}
    for i, algo in enumerate(ALGOS):
        a0, a1, w0, w1 = res[0]["alone"][i], res[1]["alone"][i], res[0]["slow"][i], res[1]["slow"][i]
        table[algo] = {
            "fast_s_per_step_alone": round(per_step(a0), 4),
            "fast_s_per_step_with_straggler": round(per_step(w0), 4),
            "fast_slowdown": round(per_step(w0) / per_step(a0), 2),
            "straggler_s_per_step_alone": round(per_step(a1), 4),
            "straggler_s_per_step": round(per_step(w1), 4),
            "fast_fit_s_alone": round(a0["fit_s"], 2),
            "fast_fit_s_with_straggler": round(w0["fit_s"], 2),
            "straggler_fit_s": round(w1["fit_s"], 2),
            "steps": w0["summary"]["steps"],
            "dev_loss_alone": round(a0["summary"]["final_dev_loss"], 4),
            "dev_loss_with_straggler": round(w0["summary"]["final_dev_loss"], 4),
        }
    return {"normal_step_s": round(step, 4), "sleep_s": s, "sleep_factor": round(s / step, 2), "algos": table}


def markdown(st: Dict[str, Any]) -> str:
    lines = [
        f"straggler: learner 1 sleeps {st['sleep_s']} s per step ({st['sleep_factor']}x the normal step time "
        f"{st['normal_step_s']} s); learner 0 is the fast one; s/step = mean step cycle (backward to backward); "
        f"fit s = the learner's whole training wall time (epoch-end dev loss and final average included)",
        "",
        "| algo | fast s/step alone | fast s/step with straggler | fast slowdown (with / alone) | "
        "straggler s/step | fast fit s alone → with | straggler fit s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for algo, r in st["algos"].items():
        lines.append(
            f"| {algo} | {r['fast_s_per_step_alone']:.3f} | {r['fast_s_per_step_with_straggler']:.3f} | "
            f"{r['fast_slowdown']:.2f}x | {r['straggler_s_per_step']:.3f} | {r['fast_fit_s_alone']:.1f} → "
            f"{r['fast_fit_s_with_straggler']:.1f} | {r['straggler_fit_s']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="toy set-up, under a minute")
    p.add_argument("--out", type=Path, default=None, help="work dir (default: a temporary one, removed at the end)")
    p.add_argument("--recipe-dir", type=Path, default=ROOT / "recipes" / "digits")
    p.add_argument("--train-utts", type=int, default=600, help="full mode on digits: training utterances")
    p.add_argument("--epochs", type=int, default=2, help="full mode on digits: epochs of the kill runs")
    p.add_argument("--victim", type=int, default=1, help="the rank of the learner to kill")
    p.add_argument("--sleep-factor", type=float, default=1.5, help="straggler sleep / normal step time")
    p.add_argument("--sleep", type=float, default=None, help="straggler sleep in s (overrides --sleep-factor)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="more config overrides for every run (e.g. train.lr=0.003)",
    )
    a = p.parse_args()
    t0 = time.perf_counter()
    tmp = None
    if a.out is None:
        import tempfile

        tmp = tempfile.TemporaryDirectory(prefix="learner_faults.")
        a.out = Path(tmp.name)
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    rd = a.recipe_dir.resolve()
    digits = not a.quick and (rd / "data").is_dir() and (rd / "data" / "fbank").is_dir()
    if digits:
        setup = digits_setup(out, rd, a.train_utts, a.epochs)
        ckpt, kill_after = 10, 14
    else:  # toy: 160 train utts = 20 steps per learner per epoch (quick), 320 = 40 (full without digits data)
        setup = toy_setup(out, 160 if a.quick else 320)
        ckpt, kill_after = 8, 12
    setup["overrides"] = [*setup["overrides"], *a.set]
    kill = kill_run(setup, out, ckpt, kill_after, a.victim, overlap=a.quick)
    print(f"kill: {json.dumps(kill)}", flush=True)
    st = straggler_runs(setup, out, a.sleep_factor, a.sleep)
    print(markdown(st), flush=True)
    print(
        json.dumps(
            {
                "bench": "learner_faults",
                "mode": "quick" if a.quick else "full",
                "data": setup["name"],
                "cores": os.cpu_count(),
                "load_avg": os.getloadavg(),
                "kill": kill,
                "straggler": st,
                "wall_s": round(time.perf_counter() - t0, 1),
            }
        )
    )
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
