"""The ceiling of any 2-learner speed-up on this machine: training steps per second of ONE learner process alone
against TWO independent learner processes running at the same time (no communication at all), 1 thread each.

    python bench/dist_ceiling.py [--quick] [--recipe-dir recipes/digits] [--learners 2] [--seconds 20]

P1 (issue 4) compares 1 learner with 2 learners of 1 thread each; whatever the algorithm, 2 learners cannot go
faster than 2 independent processes doing the same steps. ``ceiling`` = (sum of the concurrent processes' steps/s)
÷ (the lone process' steps/s). The model is the recipe's (``model`` section of its config), trained on random
digits-shaped batches (80-dim, ``train.batch_seconds`` of 2.1 s utterances, CTC on random targets, Adam); alone and
together alternate for ``--rounds`` rounds and the median of the per-round ceilings is reported. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
UTT_FRAMES = 210  # a 2.1 s digits utterance at 10 ms


def _learner(model_cfg: dict, batch_utts: int, seconds: float, start, out) -> None:
    """Train steps for ``seconds`` after ``start`` is set; put steps/s on ``out``."""
    import torch

    from asrlib.config import ModelConfig
    from asrlib.models.lstm import build_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model(80, 40, ModelConfig(**model_cfg))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(batch_utts, UTT_FRAMES, 80)
    lens = torch.full((batch_utts,), UTT_FRAMES)
    targets = torch.randint(1, 40, (batch_utts, 12))
    model.train()

    def step() -> None:
        logp, out_lens = model(x, lens)
        loss = torch.nn.functional.ctc_loss(logp.transpose(0, 1), targets, out_lens, torch.full((batch_utts,), 12))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step()  # warm-up (allocations, kernels)
    start.wait()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step()
        n += 1
    out.put(n / (time.perf_counter() - t0))


def run(n_procs: int, model_cfg: dict, batch_utts: int, seconds: float) -> list:
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_learner, args=(model_cfg, batch_utts, seconds, start, out)) for _ in range(n_procs)]
    for p in procs:
        p.start()
    time.sleep(3.0)  # let every process build its model and warm up before the clock starts
    start.set()
    rates = [out.get(timeout=seconds + 300) for _ in procs]
    for p in procs:
        p.join()
    return rates


def main() -> None:
    import dataclasses

    from asrlib.config import load_config

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="2 rounds of 6 s (under a minute)")
    p.add_argument("--recipe-dir", type=Path, default=ROOT / "recipes/digits")
    p.add_argument("--learners", type=int, default=2)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    seconds, rounds = (6.0, 2) if a.quick else (a.seconds, a.rounds)
    cfg = load_config(a.recipe_dir / "config.yaml")
    model_cfg = dataclasses.asdict(cfg.model)
    batch_utts = max(1, round(cfg.train.batch_seconds * 100 / UTT_FRAMES))
    ceilings, alone_rates, together_rates = [], [], []
    for r in range(rounds):
        alone = run(1, model_cfg, batch_utts, seconds)[0]
        together = run(a.learners, model_cfg, batch_utts, seconds)
        alone_rates.append(alone)
        together_rates.append(together)
        ceilings.append(sum(together) / alone)
        print(
            f"round {r + 1}: alone {alone:.2f} steps/s; {a.learners} at once "
            f"{' + '.join(f'{t:.2f}' for t in together)} steps/s -> ceiling {ceilings[-1]:.2f}x",
            flush=True,
        )
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(
        json.dumps(
            {
                "bench": "dist_ceiling",
                "learners": a.learners,
                "ceiling": round(statistics.median(ceilings), 3),
                "ceilings": [round(c, 3) for c in ceilings],
                "alone_steps_per_s": [round(x, 3) for x in alone_rates],
                "together_steps_per_s": [[round(x, 3) for x in t] for t in together_rates],
                "batch_utts": batch_utts,
                "seconds": seconds,
                "loadavg_end": float(load),
            }
        )
    )


if __name__ == "__main__":
    main()
