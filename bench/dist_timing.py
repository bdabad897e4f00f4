"""P2 measurements for the timing model (asrlib.parallel.timing): fit T_calc, T_merge and the link (latency,
bandwidth) on this machine, then measure the per-step time of every algorithm with N = 2 and N = 4 learners (4 =
2 simulated nodes x 2 for hadpsgd) on a subset of the digits training set, for ``steps.scaling_report`` to validate.

    PYTHONPATH=. .venv/bin/python bench/dist_timing.py --recipe-dir recipes/digits \
        --out recipes/digits/exp/bench_timing
    PYTHONPATH=. .venv/bin/python -m steps.scaling_report --params recipes/digits/exp/bench_timing/params.json \
        --measured recipes/digits/exp/bench_timing/measured.json --out-dir recipes/digits/exp/scaling

Writes OUT/params.json (fitted TimingParams, link = this machine's Gloo loopback, its all-reduce fitted from timed
all-reduces of 1/16, 1/4 and all of the model's size with 2 and 4 learners, cores = os.cpu_count(), compute
contention c(N) = T_calc with N learners computing at once / T_calc alone, measured for every N of ``--ns``) and
OUT/measured.json (per algorithm and N: mean seconds per step over learners, bytes per step, load average).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from asrlib.data.subset import subset_training_tables  # noqa: E402
from asrlib.parallel.timing import TimingParams, fit_allreduce, fit_link, save_params  # noqa: E402


def pingpong(rank: int, world: int, sizes: List[int], reps: int) -> Dict[int, float]:
    """One-way Gloo transfer time per message size (half the round trip), median over ``reps``."""
    import torch.distributed as dist

    out = {}
    for n in sizes:
        buf = torch.zeros(n // 4)
        times = []
        for i in range(reps + 3):
            dist.barrier()
            t = time.perf_counter()
            if rank == 0:
                dist.send(buf, 1)
                dist.recv(buf, 1)
            else:
                dist.recv(buf, 0)
                dist.send(buf, 0)
            if i >= 3:
                times.append((time.perf_counter() - t) / 2)
        out[n] = statistics.median(times)
    return out


def allreduce_time(rank: int, world: int, numels: List[int], reps: int) -> Dict[int, float]:
    """Seconds per all-reduce of float32 vectors of each length in ``numels`` (median over ``reps``)."""
    import torch.distributed as dist

    out = {}
    for numel in numels:
        buf = torch.zeros(numel)
        times = []
        for i in range(reps + 3):
            dist.barrier()
            t = time.perf_counter()
            dist.all_reduce(buf)
            if i >= 3:
                times.append(time.perf_counter() - t)
        out[numel] = statistics.median(times)
    return out


def compute_times(recipe: Path, n_batches: int) -> Dict[str, float]:
    """T_calc (SpecAugment + forward + backward; batches read beforehand, as loader workers do) and T_merge (Adam
    step), one thread, on digits batches."""
    from asrlib.config import load_config
    from asrlib.models.lstm import build_model
    from asrlib.train.augment import spec_augment
    from asrlib.train.loader import CtcTargets, SamplerSettings, epoch_cut_batches, open_set
    from asrlib.train.trainer import ctc_loss, make_optimizer

    torch.set_num_threads(1)
    cfg = load_config(recipe / "config.yaml")
    os.chdir(recipe)
    targets = CtcTargets(Path("data/lang"), cfg.model.stack)
    ds = open_set(Path("data/fbank/train"), targets, Path("data/fbank/train/cmvn.scp"), data_dir=Path("data/train"))
    model = build_model(ds.feature_dim(), len(targets.tokens), cfg.model)
    opt = make_optimizer(model.parameters(), cfg.train)
    cuts = itertools.islice(epoch_cut_batches(ds, SamplerSettings(cfg.train.batch_seconds, 0), 0, 0), n_batches + 2)
    batches = list(ds.batches(cuts, workers=0))  # read before the clock starts: T_calc is the compute
    calc, merge = [], []
    for i, b in enumerate(batches):
        t = time.perf_counter()
        batch = dict(b)
        batch["feats"] = spec_augment(batch["feats"], batch["feat_lens"])
        loss, _, _ = ctc_loss(model, batch)
        opt.zero_grad()
        loss.backward()
        t1 = time.perf_counter()
        opt.step()
        t2 = time.perf_counter()
        if i >= 2:
            calc.append(t1 - t)
            merge.append(t2 - t1)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return {
        "t_calc": statistics.mean(calc),
        "t_merge": statistics.median(merge),
        "model_bytes": nbytes,
        "numel": sum(p.numel() for p in model.parameters()),
    }


def concurrent_calc(rank: int, world: int, recipe: Path, n_batches: int) -> float:
    """T_calc of one learner while ``world`` learners compute at once (no communication between them)."""
    import torch.distributed as dist

    dist.barrier()
    return compute_times(recipe, n_batches)["t_calc"]


def measure_contention(recipe: Path, ns: List[int], n_batches: int) -> Dict[int, float]:
    """c(n) = mean T_calc with n learners computing at once / T_calc of one alone, on this machine."""
    from asrlib.parallel.harness import run_learners

    calc = {
        n: statistics.mean(run_learners(concurrent_calc, n, args=(recipe, n_batches), timeout=600))
        for n in sorted(set([1, *ns]))
    }
    return {n: calc[n] / calc[1] for n in calc}


def run_algo(recipe: Path, sub: Path, out: Path, algo: str, n: int, extra: List[str]) -> Dict:
    exp = out / f"{algo}_n{n}"
    if exp.exists():
        subprocess.run(["rm", "-rf", str(exp)], check=True)
    cmd = [
        sys.executable,
        "-m",
        "steps.train_dist",
        "--num-learners",
        str(n),
        "--threads-per-learner",
        "1",
        "--",
        "--config",
        str(recipe / "config.yaml"),
        "--set",
        f"train.dist.algo={algo}",
        "--set",
        "train.epochs=1",
        "--set",
        "train.checkpoint_every=100000",
        *sum((["--set", e] for e in extra), []),
        "--data-dir",
        str(sub / "data"),
        "--feats-dir",
        str(sub / "fbank"),
        "--lang-dir",
        str(recipe / "data/lang"),
        "--exp-dir",
        str(exp),
    ]
    load = os.getloadavg()
    with open(out / f"{algo}_n{n}.log", "w") as f:
        r = subprocess.run(
            cmd, cwd=recipe, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)}
        )
    if r.returncode != 0:
        raise SystemExit(f"{algo} n={n} failed; see {out / f'{algo}_n{n}.log'}")
    ranks = [json.loads((exp / "log" / f"dist.rank{k}.json").read_text()) for k in range(n)]
    step = [rk["total"]["cycle_s"] / max(rk["total"]["cycles"], 1) for rk in ranks]
    sent = [rk["total"]["sent_bytes"] / max(rk["total"]["steps"], 1) for rk in ranks]
    return {
        "algo": algo,
        "n": n,
        "step_s": statistics.mean(step),
        "step_s_per_rank": step,
        "sent_bytes_per_step": statistics.mean(sent),
        "wait_s": [rk["total"]["wait_s"] for rk in ranks],
        "comm_s": [rk["total"]["comm_s"] for rk in ranks],
        "load_before": load,
        "load_after": os.getloadavg(),
        "extra": extra,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe-dir", type=Path, default=ROOT / "recipes" / "digits")
    p.add_argument("--out", type=Path, default=ROOT / "recipes" / "digits" / "exp" / "bench_timing")
    p.add_argument("--algos", nargs="+", default=["sync", "ma", "bmuf", "adpsgd", "hadpsgd", "asgd", "ring"])
    p.add_argument("--ns", nargs="+", type=int, default=[1, 2, 4])
    p.add_argument("--period", type=int, default=4)
    p.add_argument("--train-utts", type=int, default=1200)
    p.add_argument("--quick", action="store_true", help="a smoke run: sync and bmuf, N = 1 and 2, 200 utterances")
    a = p.parse_args()
    if a.quick:
        a.algos, a.ns, a.train_utts = ["sync", "bmuf"], [1, 2], 200
    recipe, out = a.recipe_dir.resolve(), a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    from asrlib.parallel.harness import run_learners

    load0 = os.getloadavg()
    sizes = [4096, 65536, 262144, 1 << 20, 4 << 20, 16 << 20]
    pp = run_learners(pingpong, 2, args=(sizes, 10), timeout=300)[0]
    link = fit_link(list(pp), list(pp.values()))
    ct = compute_times(recipe, 4 if a.quick else 12)
    numels = [ct["numel"] // 16, ct["numel"] // 4, ct["numel"]]
    ar = {n: run_learners(allreduce_time, n, args=(numels, 10), timeout=300)[0] for n in (2, 4)}
    ar_link = fit_allreduce([(n, 4 * k, t) for n, times in ar.items() for k, t in times.items()])
    contention = measure_contention(recipe, a.ns, 4 if a.quick else 36)
    params = TimingParams(
        t_calc=ct["t_calc"],
        t_merge=ct["t_merge"],
        model_bytes=ct["model_bytes"],
        link=link,
        period=a.period,
        local_world=2,
        intra_link=link,
        cores=os.cpu_count(),
        contention=contention,
        allreduce_link=ar_link,
    )
    save_params(out / "params.json", params)
    fit = {
        "pingpong_one_way_s": pp,
        "link": vars(link),
        "compute": ct,
        "allreduce_s": ar,
        "allreduce_link": vars(ar_link),
        "contention": contention,
        "load_before": load0,
        "load_after": os.getloadavg(),
    }
    (out / "fit.json").write_text(json.dumps(fit, indent=1))
    print(json.dumps(fit, indent=1), flush=True)

    sub = subset_training_tables(
        recipe / "data", recipe / "data" / "fbank", out / "subset", {"train": a.train_utts, "dev": 50}
    )
    measured = []
    for n in a.ns:
        for algo in a.algos if n > 1 else ["sync"]:
            extra = [f"train.dist.period={a.period}"]
            if algo == "hadpsgd":
                if n < 4:
                    continue
                extra.append("train.dist.local_world_size=2")
            m = run_algo(recipe, sub, out, algo, n, extra)
            measured.append(m)
            print(
                f"{algo} n={n}: {m['step_s']:.3f} s/step, {m['sent_bytes_per_step'] / 1e6:.2f} MB sent/step, "
                f"load {m['load_before'][0]:.1f}",
                flush=True,
            )
            (out / "measured.json").write_text(json.dumps(measured, indent=1))
    from steps.scaling_report import calibrate, validate

    rows = validate(calibrate(params, measured) or params, measured)
    errs = [abs(r["error_pct"]) for r in rows if not r["fit"]]
    print(
        json.dumps(
            {
                "bench": "dist_timing",
                "t_calc_s": ct["t_calc"],
                "t_merge_s": ct["t_merge"],
                "contention": contention,
                "validation_mean_abs_error_pct": round(sum(errs) / len(errs), 1) if errs else None,
                "validation_max_abs_error_pct": round(max(errs), 1) if errs else None,
                "model_bytes": ct["model_bytes"],
                "link": vars(link),
                "allreduce_link": vars(ar_link),
                "step_s": {f"{m['algo']}_n{m['n']}": round(m["step_s"], 4) for m in measured},
            }
        )
    )


if __name__ == "__main__":
    main()
