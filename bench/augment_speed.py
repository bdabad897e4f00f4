"""Time of the batch augmentation that the trainer runs in the training process on every step (it is not part of
bench/train_throughput.py's bare loop, so every millisecond of it lowers that ratio): our SpecAugment's masks with
and without the frequency warp, the warp alone, the same masks applied as one fill under their union (how they were
written before 2026-11-26 night: tests/helpers.py), and lhotse's SpecAugment, on a batch of --shape (utterances,
frames, mel bins; the default is a digits training batch, 20 s of utterances of about 2.5 s), median of --rounds
rounds of --calls calls (the variants take turns in each round), at each --threads count.

    python bench/augment_speed.py [--quick] [--threads 1 2] [--shape 8 250 80]

Last line: one JSON object (milliseconds per call).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from asrlib.train.augment import freq_warp, lhotse_spec_augment, spec_augment  # noqa: E402
from helpers import spec_augment_masked_fill  # noqa: E402


def ms_per_call(fn, calls: int) -> float:
    for _ in range(max(2, calls // 10)):  # warm-up: allocator, kernels
        fn()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--shape", type=int, nargs=3, default=[8, 250, 80], metavar=("N", "T", "D"))
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args()
    calls, rounds = (50, 3) if a.quick else (a.calls, a.rounds)
    n, t, d = a.shape
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, t, d, generator=g)
    lens = torch.randint(t // 3, t + 1, (n,), generator=g)
    lens[0] = t
    for i, length in enumerate(lens.tolist()):
        x[i, length:] = 0.0  # padding, as the loader leaves it
    variants = {
        "masks": lambda: spec_augment(x, lens),
        "masks_as_fill": lambda: spec_augment_masked_fill(x, lens),
        "warp": lambda: freq_warp(x, 0.15),
        "warp_masks": lambda: spec_augment(x, lens, max_warp=0.15),
        "warp_masks_as_fill": lambda: spec_augment_masked_fill(x, lens, max_warp=0.15),
        "lhotse_time_warp80": lambda: lhotse_spec_augment(x, lens, time_warp=80),
    }
    out = {"bench": "augment_speed", "shape": [n, t, d], "calls": calls, "rounds": rounds, "ms_per_call": {}}
    for threads in a.threads:
        torch.set_num_threads(threads)
        torch.manual_seed(0)
        times = {k: [] for k in variants}
        for _ in range(rounds):  # the variants take turns, round by round (the machine's speed drifts)
            for k, f in variants.items():
                times[k].append(ms_per_call(f, calls))
        out["ms_per_call"][f"threads{threads}"] = {k: round(statistics.median(v), 3) for k, v in times.items()}
        print(f"{threads} thread(s): {out['ms_per_call'][f'threads{threads}']}", file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
