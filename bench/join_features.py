"""Time to read a joined training cut's features (``train.concat_prob``: lhotse's ``Cut.append`` of two or more
stored cuts), as a loader worker does for every join of every epoch: lhotse's ``MixedCut.load_features`` (its
feature-domain mixer, with a feature extractor built for every call) against asrlib.train.concat.joined_features
(the same mixer, the extractor built once), and reading the parts alone (the least any join can cost). Joins of
--size consecutive cuts of the recipe's training manifest (--recipe-dir; the toy CTC set-up of tests/helpers.py when
it has no features), median of --rounds rounds, the three taking turns. Also whether ours equals lhotse's bit for
bit, and the largest difference between the mix and the parts' frames one after the other. With the recipe's
features, also its training loader in the training process (0 workers: what a worker does) over the first
--batches batches of epoch 0, as steps.train opens the set (the recipe's ``train.concat_prob``), with
joined_features and with lhotse's own ``load_features`` in its place, taking turns.

    python bench/join_features.py [--quick] [--recipe-dir recipes/digits] [--joins 200] [--size 2 3] [--batches 0]
                                  [--threads 1]

Last line: one JSON object (milliseconds per join; per batch for the loader).
"""

from __future__ import annotations

import argparse
import atexit
import json
import shutil
import statistics
import sys
import tempfile
import time
from functools import reduce
from pathlib import Path

import numpy as np
import torch
from lhotse.cut import MixedCut

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import asrlib.train.loader as loader  # noqa: E402
from asrlib.config import load_config  # noqa: E402
from asrlib.data.cuts import ensure_cuts, open_cuts  # noqa: E402
from asrlib.train.concat import joined_features  # noqa: E402
from asrlib.train.loader import CtcTargets, SamplerSettings, epoch_cut_batches  # noqa: E402
from asrlib.train.recipe_sets import open_recipe_set  # noqa: E402
from helpers import make_toy_ctc_setup  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--recipe-dir", type=Path, default=ROOT / "recipes/digits")
    p.add_argument("--joins", type=int, default=200, help="joins of each size")
    p.add_argument("--size", type=int, nargs="+", default=[2, 3], help="cuts per join")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batches", type=int, default=0, help="loader batches (0: the whole epoch)")
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: as in a DataLoader worker, where torch sets 1)"
    )
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    n_joins, rounds, n_batches = (30, 2, 30) if a.quick else (a.joins, a.rounds, a.batches)
    manifest = a.recipe_dir / "data/fbank/train/cuts.jsonl.gz"
    source = "recipe"
    if not manifest.is_file():
        toy = make_toy_ctc_setup(_scratch())
        source, manifest = "toy", ensure_cuts(toy / "fbank/train", toy / "data/train")
    out = {"bench": "join_features", "source": source, "threads": torch.get_num_threads()}
    for size in a.size:
        cuts = [c for _, c in zip(range(n_joins * size), open_cuts(manifest))]
        groups = [cuts[i : i + size] for i in range(0, len(cuts) - size + 1, size)]
        joins = [reduce(lambda x, y: x.append(y, preserve_id="left"), g) for g in groups]
        ways = {
            "lhotse_mix": lambda: [j.load_features() for j in joins],
            "joined_features": lambda: [joined_features(j) for j in joins],
            "parts_only": lambda: [[c.load_features() for c in g] for g in groups],
        }
        times = {k: [] for k in ways}
        for _ in range(rounds):
            for k, fn in ways.items():
                t = time.perf_counter()
                fn()
                times[k].append((time.perf_counter() - t) / len(joins) * 1e3)
        diff = max(
            float(np.abs(joined_features(j) - np.concatenate([c.load_features() for c in g])).max())
            for j, g in zip(joins, groups)
        )
        exact = all(np.array_equal(joined_features(j), j.load_features()) for j in joins)
        out[f"size{size}"] = {
            "joins": len(joins),
            **{f"{k}_ms": round(statistics.median(v), 3) for k, v in times.items()},
            "max_abs_diff_parts": diff,
            "ours_equal_lhotse": exact,
        }
        print(
            f"{size} cuts a join: "
            + ", ".join(f"{k} {statistics.median(v):.3f} ms" for k, v in times.items())
            + f"; ours {'==' if exact else '!='} lhotse's bit for bit, within {diff:.2g} of the parts'",
            file=sys.stderr,
        )
    if source == "recipe":
        out["loader"] = loader_epoch(a.recipe_dir, n_batches, max(2, rounds - 2))
    print(json.dumps(out))


def _scratch() -> Path:
    """A temporary folder, removed when the bench exits."""
    tmp = Path(tempfile.mkdtemp(prefix="join_features_"))
    atexit.register(shutil.rmtree, tmp, True)
    return tmp


def loader_epoch(recipe_dir: Path, n_batches: int, rounds: int) -> dict:
    """ms per batch of the recipe's training loader in this process, with joined_features and with lhotse's mix."""
    cfg = load_config(recipe_dir / "config.yaml")
    fb, tmp = recipe_dir / "data/fbank/train", _scratch()
    targets = CtcTargets(recipe_dir / "data/lang", cfg.model.stack)
    ds = open_recipe_set(cfg, fb, recipe_dir / "data/train", targets, fb / "cmvn.scp", True, tmp / "excluded.txt")
    plain = [b for b in epoch_cut_batches(ds, SamplerSettings.of(cfg.train), 0, 0)][: n_batches or None]
    cuts = [list(b) for b in ds.mixed(iter(plain), 0, 0)]
    joined = sum(isinstance(c, MixedCut) for b in cuts for c in b)
    mine = loader.joined_features
    ways = {"joined_features": mine, "lhotse_mix": lambda cut: None}
    times = {k: [] for k in ways}
    for _ in range(rounds):
        for k, fn in ways.items():
            loader.joined_features = fn
            t = time.perf_counter()
            for _ in ds.batches(iter(cuts), workers=0):
                pass
            times[k].append((time.perf_counter() - t) / len(cuts) * 1e3)
    loader.joined_features = mine
    res = {"batches": len(cuts), "joins": joined, "concat_prob": cfg.train.concat_prob}
    res.update({f"{k}_ms_per_batch": round(statistics.median(v), 3) for k, v in times.items()})
    print(
        f"loader, {len(cuts)} batches: "
        + ", ".join(f"{k} {statistics.median(v):.3f} ms a batch" for k, v in times.items()),
        file=sys.stderr,
    )
    return res


if __name__ == "__main__":
    main()
