"""Training step of the recipe's acoustic model on mixed-length batches: forward-only LSTM layers run on the padded
batch (what asrlib does) vs on a packed batch (``pack_padded_sequence``, what it did before 2026-11-24).
Bidirectional layers are packed either way (a recipe with them is refused).

    python bench/lstm_padding.py [--quick] [--recipe-dir recipes/digits] [--threads 1] [--steps 120]

torch's CPU LSTM runs its fused oneDNN kernel only when every sequence of the batch has the same length; a packed
batch of mixed lengths takes a per-frame loop instead. The bench builds the recipe config's model and times forward +
CTC loss + backward for both forms on the same batches, interleaved step by step (the machine's speed drifts from
minute to minute). The batches are the trainer's first epoch (lhotse's sampler over the recipe's
``data/fbank/train/cuts.jsonl.gz``, as asrlib.train.loader builds it; random features of those lengths) when the
recipe has been run, else drawn alike (utterances 1-5 s, lengths within a batch 0.9-1.0 of its longest, one batch
in five of equal lengths: more mixed batches than a real epoch has, so the ratio is lower). Prints a table and one
JSON line: median and mean ms per step of each form and the ratio of the means padded / packed (< 1: padded is faster).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from asrlib.config import load_config  # noqa: E402
from asrlib.models import lstm  # noqa: E402
from asrlib.train.loader import CutData, SamplerSettings, epoch_cut_batches  # noqa: E402


class _AnyText:
    def check(self, cut):
        return None


def recipe_batches(cuts: Path, n: int, tcfg, feat_dim: int) -> list:
    """The trainer's first ``n`` batches of epoch 0, with random features of the utterances' lengths."""
    out = []
    for b in epoch_cut_batches(CutData(cuts, _AnyText(), None), SamplerSettings.of(tcfg), 0, 0):
        if len(out) == n:
            break
        lens = [c.num_frames for c in b]
        out.append((torch.randn(len(lens), max(lens), feat_dim), torch.tensor(lens)))
    return out


def drawn_batches(n: int, max_frames: int, feat_dim: int, rng: random.Random) -> list:
    out = []
    for i in range(n):
        longest = rng.randint(100, 500)  # 1-5 s at 10 ms frames
        count = max(1, max_frames // longest)
        lens = (
            [longest] * count
            if i % 5 == 0
            else [longest] + [rng.randint(int(0.9 * longest), longest) for _ in range(count - 1)]
        )
        out.append((torch.randn(count, longest, feat_dim), torch.tensor(lens)))
    return out


def step(model: torch.nn.Module, feats: torch.Tensor, lens: torch.Tensor, vocab: int) -> float:
    t = time.perf_counter()
    model.zero_grad(set_to_none=True)
    logp, out_lens = model(feats, lens)
    targets = torch.randint(1, vocab, (int(out_lens.numel()) * 4,), generator=torch.Generator().manual_seed(0))
    loss = F.ctc_loss(logp.transpose(0, 1), targets, out_lens, torch.full_like(out_lens, 4), zero_infinity=True)
    loss.backward()
    return time.perf_counter() - t


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe-dir", type=Path, default=ROOT / "recipes" / "digits")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--batch-seconds", type=float, default=0.0, help="0: the config's train.batch_seconds")
    p.add_argument(
        "--cuts",
        type=Path,
        default=None,
        help="the cut manifest to batch (default: RECIPE/data/fbank/train/cuts.jsonl.gz)",
    )
    p.add_argument("--quick", action="store_true", help="30 steps")
    a = p.parse_args(argv)
    if a.quick:
        a.steps = 30
    cfg = load_config(a.recipe_dir / "config.yaml")
    if cfg.model.bidirectional:
        raise SystemExit("the config's model is bidirectional: its layers are packed either way")
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    feat_dim, vocab = cfg.features.num_mel_bins, 32
    model = lstm.build_model(feat_dim, vocab, cfg.model).train()
    max_frames = int(100 * (a.batch_seconds or cfg.train.batch_seconds))
    cuts = a.cuts or a.recipe_dir / "data" / "fbank" / "train" / "cuts.jsonl.gz"
    source = str(cuts) if cuts.is_file() else "drawn lengths (the recipe has no features yet)"
    if a.batch_seconds:
        cfg.train.batch_seconds = a.batch_seconds
    batches = (
        recipe_batches(cuts, a.steps, cfg.train, feat_dim)
        if cuts.is_file()
        else drawn_batches(a.steps, max_frames, feat_dim, random.Random(0))
    )
    padded_forward = lstm._TorchLstmLayer.forward
    times = {"packed": [], "padded": []}
    try:
        for i, (feats, lens) in enumerate(batches):
            for form in ("packed", "padded") if i % 2 else ("padded", "packed"):
                lstm._TorchLstmLayer.forward = (
                    lstm._TorchLstmLayer.packed_forward if form == "packed" else padded_forward
                )
                times[form].append(step(model, feats, lens, vocab))
    finally:
        lstm._TorchLstmLayer.forward = padded_forward
    res = {
        form: {
            "median_ms": 1000 * statistics.median(t[2:]),
            "mean_ms": 1000 * statistics.mean(t[2:]),
            "sd_ms": 1000 * statistics.pstdev(t[2:]),
        }
        for form, t in times.items()
    }
    print(
        f"{len(batches)} steps of {a.batch_seconds or cfg.train.batch_seconds:g} s batches, {a.threads} thread(s), "
        f"model {cfg.model.num_layers} x {cfg.model.hidden_size} (proj {cfg.model.proj_size}); batches: {source}"
    )
    for form, r in res.items():
        print(f"{form:7s} median {r['median_ms']:6.1f} ms  mean {r['mean_ms']:6.1f} ms  sd {r['sd_ms']:5.1f} ms")
    ratio = res["padded"]["mean_ms"] / res["packed"]["mean_ms"]
    print(
        json.dumps(
            {
                "bench": "lstm_padding",
                "steps": len(batches),
                "threads": a.threads,
                "batches": source,
                **{f"{form}_{k}": round(v, 2) for form, r in res.items() for k, v in r.items()},
                "ratio": round(ratio, 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
