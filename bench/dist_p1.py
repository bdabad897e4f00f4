"""P1: 1 learner vs 2 learners (1 thread each) on the digits recipe: wall time to a fixed dev CTC loss, final test
WER, and communication volume per learner per epoch, for sync, ma, bmuf, adpsgd (and any other algorithm).

Runs are sequential in one invocation (the 1-learner baseline first, then each algorithm with 2 learners), so
they see similar background load; ``os.getloadavg()`` is recorded before and after every run.

    PYTHONPATH=. .venv/bin/python bench/dist_p1.py --recipe-dir recipes/digits --out recipes/digits/exp/bench_p1 \
        --algos sync ma bmuf adpsgd --target-loss 0.12
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PY = sys.executable

DONE_RE = re.compile(
    r"^(\d\d:\d\d:\d\d) INFO \[asrlib\.train\.trainer\] epoch (\d+) done: step (\d+), "
    r"dev CTC loss per frame ([0-9.]+)"
)
START_RE = re.compile(r"^(\d\d:\d\d:\d\d) INFO \[train\] model:")


def epoch_curve(log: Path) -> List[Dict[str, float]]:
    """(seconds since the model was built, epoch, dev loss) for each epoch end, from a train.log."""
    t0, out, day = None, [], timedelta(0)
    last = None
    for line in log.read_text().splitlines():
        m = START_RE.match(line)
        if m and t0 is None:
            t0 = datetime.strptime(m.group(1), "%H:%M:%S")
        m = DONE_RE.match(line)
        if m and t0 is not None:
            t = datetime.strptime(m.group(1), "%H:%M:%S")
            if last is not None and t + day < last:
                day += timedelta(days=1)
            last = t + day
            out.append(
                {
                    "t": (last - t0).total_seconds(),
                    "epoch": int(m.group(2)),
                    "step": int(m.group(3)),
                    "dev_loss": float(m.group(4)),
                }
            )
    return out


def time_to(curve: List[Dict[str, float]], target: float, interpolate: bool = False) -> Optional[float]:
    """Seconds until the dev loss is at or below ``target``: at the first epoch end that gets there, or, with
    ``interpolate``, where the straight line between that epoch end and the one before crosses the target (the dev
    loss is only measured at epoch ends, which come every ~55 s for one learner and every ~30 s for two)."""
    prev = {"t": 0.0, "dev_loss": None}
    for c in curve:
        if c["dev_loss"] <= target:
            if not interpolate or prev["dev_loss"] is None:
                return c["t"]
            frac = (prev["dev_loss"] - target) / (prev["dev_loss"] - c["dev_loss"])
            return prev["t"] + frac * (c["t"] - prev["t"])
        prev = c
    return None


def run(cmd: List[str], log: Path, cwd: Path) -> float:
    """Run in the recipe directory (its scp files hold paths relative to it)."""
    t = time.perf_counter()
    with open(log, "w") as f:
        r = subprocess.run(
            cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)}
        )
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}; see {log}")
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe-dir", type=Path, default=ROOT / "recipes" / "digits")
    p.add_argument("--out", type=Path, default=ROOT / "recipes" / "digits" / "exp" / "bench_p1")
    p.add_argument("--algos", nargs="+", default=["sync", "ma", "bmuf", "adpsgd"])
    p.add_argument("--learners", type=int, default=2)
    p.add_argument("--period", type=int, default=4, help="K for ma, tau for bmuf")
    p.add_argument("--target-loss", type=float, default=0.12)
    p.add_argument("--set", dest="overrides", action="append", default=[], help="extra config overrides")
    p.add_argument(
        "--algo-set",
        action="append",
        default=[],
        metavar="ALGO:SECTION.KEY=VALUE",
        help="an override for one algorithm's runs only",
    )
    p.add_argument("--tag", default="", help="suffix of the run names (a second configuration of the same algos)")
    p.add_argument("--skip-baseline", action="store_true")
    p.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: the baseline and bmuf, 1 epoch on 240 training utterances (out: OUT/quick)",
    )
    p.add_argument(
        "--epochs",
        type=int,
        default=0,
        help="train.epochs for every run, the 1-learner baseline included (0 = the recipe config's)",
    )
    p.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help="run the baseline and every algorithm once per train.seed (run names get _s<SEED>); each "
        "run's speed-up is against the baseline of its own seed, and the summary gives the mean "
        "and range over the seeds",
    )
    a = p.parse_args()
    rd = a.recipe_dir.resolve()
    a.out = a.out.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    data_dir, feats_dir = rd / "data", rd / "data" / "fbank"
    if a.quick:
        from asrlib.data.subset import subset_training_tables

        a.out, a.algos, a.epochs = a.out / "quick", ["bmuf"], 1
        sub = subset_training_tables(data_dir, feats_dir, a.out / "subset", {"train": 240, "dev": 50})
        data_dir, feats_dir = sub / "data", sub / "fbank"
        (a.out / "p1.json").unlink(missing_ok=True)
    data = ["--data-dir", str(data_dir), "--feats-dir", str(feats_dir), "--lang-dir", str(rd / "data" / "lang")]
    results = json.loads((a.out / "p1.json").read_text()) if (a.out / "p1.json").is_file() else {}
    runs = ([("local", 1)] if not a.skip_baseline else []) + [(algo, a.learners) for algo in a.algos]
    for seed, (algo, n) in [(s, r) for s in (a.seeds or [None]) for r in runs]:
        name = run_name(algo, n, a.tag, seed)
        exp = a.out / name
        own = [o.split(":", 1)[1] for o in a.algo_set if o.split(":", 1)[0] == algo]
        ov = [
            f"train.dist.algo={algo}",
            f"train.dist.period={a.period}",
            *(a.overrides if n > 1 else []),
            *own,
            *([f"train.epochs={a.epochs}"] if a.epochs else []),
            *([f"train.seed={seed}"] if seed is not None else []),
        ]
        train_args = [
            "--config",
            str(rd / "config.yaml"),
            *sum((["--set", o] for o in ov), []),
            *data,
            "--exp-dir",
            str(exp),
        ]
        load_before = os.getloadavg()
        print(f"== {name}: load {load_before}", flush=True)
        wall = run(
            [PY, "-m", "steps.train_dist", "--num-learners", str(n), "--threads-per-learner", "1", "--", *train_args],
            a.out / f"{name}.stdout",
            rd,
        )
        load_after = os.getloadavg()
        lp, dec = exp / "logprobs_test", exp / "decode_test_greedy"
        run(
            [
                PY,
                "-m",
                "steps.compute_logprobs",
                "--model",
                str(exp / "final.pt"),
                "--feats",
                str(rd / "data" / "fbank" / "test" / "feats.scp"),
                "--out-dir",
                str(lp),
            ],
            a.out / f"{name}.dec1",
            rd,
        )
        run(
            [
                PY,
                "-m",
                "steps.decode",
                "--config",
                str(rd / "config.yaml"),
                "--method",
                "greedy",
                "--logprobs",
                str(lp / "logprobs.scp"),
                "--lang-dir",
                str(rd / "data" / "lang"),
                "--out-dir",
                str(dec),
            ],
            a.out / f"{name}.dec2",
            rd,
        )
        run(
            [
                PY,
                "-m",
                "steps.score",
                "--ref",
                str(rd / "data" / "test" / "text"),
                "--hyp",
                str(dec / "hyp.txt"),
                "--out-dir",
                str(dec),
            ],
            a.out / f"{name}.dec3",
            rd,
        )
        wer = json.loads((dec / "wer.json").read_text())["wer"]
        curve = epoch_curve(exp / "log" / "train.log")
        comm = []
        for r in range(n):
            f = exp / "log" / f"dist.rank{r}.json"
            if f.is_file():
                comm.append(json.loads(f.read_text()))
        results[name] = {
            "algo": algo,
            "learners": n,
            "wall_s": wall,
            "load_before": load_before,
            "load_after": load_after,
            "curve": curve,
            "final_dev_loss": curve[-1]["dev_loss"],
            "time_to_target": time_to(curve, a.target_loss),
            "target_loss": a.target_loss,
            "test_wer_greedy": wer,
            "comm": comm,
            "overrides": ov,
            "seed": seed,
        }
        print(
            f"   wall {wall:.0f} s, final dev {curve[-1]['dev_loss']:.4f}, to {a.target_loss}: "
            f"{results[name]['time_to_target']}, test WER {wer:.2f}, load after {load_after}",
            flush=True,
        )
        (a.out / "p1.json").write_text(json.dumps(results, indent=1))
    write_table(results, a.out / "p1.md", a.target_loss)
    summary = seed_summary(results, a.target_loss)
    print(
        json.dumps(
            {
                "bench": "dist_p1",
                "target_loss": a.target_loss,
                "summary": summary,
                "runs": {
                    name: {
                        "wall_s": round(r["wall_s"], 1),
                        "time_to_target_s": times(r, a.target_loss)[0],
                        "speedup_to_target": speedups(results, r, a.target_loss)[0],
                        "time_to_target_interp_s": times(r, a.target_loss)[1],
                        "speedup_to_target_interp": speedups(results, r, a.target_loss)[1],
                        "test_wer_greedy": r["test_wer_greedy"],
                        "final_dev_loss": r["final_dev_loss"],
                    }
                    for name, r in results.items()
                },
            }
        )
    )


def run_name(algo: str, n: int, tag: str, seed: Optional[int]) -> str:
    """``local_n1`` for the baseline, ``ALGO_nN<tag>`` otherwise; ``_s<SEED>`` appended with --seeds."""
    return f"{algo}_n{n}" + (tag if n > 1 else "") + (f"_s{seed}" if seed is not None else "")


def baseline_of(results: Dict, r: Dict) -> Optional[Dict]:
    """The 1-learner run of the same seed (``local_n1`` or ``local_n1_s<SEED>``)."""
    return results.get(run_name("local", 1, "", r.get("seed")))


def seed_summary(results: Dict, target: float) -> Dict[str, Dict]:
    """Per configuration (run name without ``_s<SEED>``): over its seeds, the speed-ups to the target against each
    seed's own baseline and the test WER minus that baseline's: mean, min, max, and how many seeds."""
    groups: Dict[str, List[Dict]] = {}
    for name, r in results.items():
        if r.get("seed") is not None and r["learners"] > 1:
            groups.setdefault(name[: -len(f"_s{r['seed']}")], []).append(r)
    out = {}
    for cfg, rs in groups.items():
        row: Dict[str, object] = {"seeds": [r["seed"] for r in rs]}
        for key, vals in (
            ("speedup_to_target", [speedups(results, r, target)[0] for r in rs]),
            ("speedup_to_target_interp", [speedups(results, r, target)[1] for r in rs]),
            (
                "wer_minus_baseline",
                [
                    r["test_wer_greedy"] - b["test_wer_greedy"] if b else None
                    for r, b in ((r, baseline_of(results, r)) for r in rs)
                ],
            ),
        ):
            got = [v for v in vals if v is not None]
            row[key] = (
                {
                    "mean": round(sum(got) / len(got), 3),
                    "min": round(min(got), 3),
                    "max": round(max(got), 3),
                    "n": len(got),
                }
                if got
                else None
            )
        out[cfg] = row
    return out


def times(r: Dict, target: float) -> tuple:
    """(seconds to target at an epoch end, interpolated seconds to target) of one run, rounded."""
    t = [time_to(r["curve"], target, interpolate=i) for i in (False, True)]
    return tuple(round(x, 1) if x is not None else None for x in t)


def speedups(results: Dict, r: Dict, target: float) -> tuple:
    """The 1-learner run's (of the same seed) times to target over this run's (epoch-end, interpolated); None where
    not reached."""
    base = baseline_of(results, r)
    if base is None:
        return None, None
    return tuple(round(b / t, 3) if b and t else None for b, t in zip(times(base, target), times(r, target)))


def write_table(results: Dict, path: Path, target: float) -> None:
    lines = [
        f"| run | learners | wall s | s to dev loss {target} (epoch end / interpolated) | speed-up to target | "
        f"final dev loss | test WER greedy | MB sent / learner / epoch | load avg (before → after) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, r in results.items():
        tt, sp = times(r, target), speedups(results, r, target)
        mb = ""
        if r["comm"]:
            ep = [e["sent_bytes"] for c in r["comm"] for e in c["epochs"]]
            mb = f"{sum(ep) / len(ep) / 1e6:.1f}"
        fmt = lambda x, f: f.format(x) if x is not None else "-"  # noqa: E731
        reached = f"{fmt(tt[0], '{:.0f}')} / {fmt(tt[1], '{:.0f}')}" if tt[0] is not None else "not reached"
        lines.append(
            f"| {name} | {r['learners']} | {r['wall_s']:.0f} | {reached} | "
            f"{fmt(sp[0], '{:.2f}x')} / {fmt(sp[1], '{:.2f}x')} | {r['final_dev_loss']:.4f} | "
            f"{r['test_wer_greedy']:.2f} | {mb} | {r['load_before'][0]:.1f} → {r['load_after'][0]:.1f} |"
        )
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
