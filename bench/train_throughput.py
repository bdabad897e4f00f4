"""P3: trainer throughput (input frames/s) divided by a bare forward/backward/step loop of the same model on the
same batch shapes, measured side by side in one run (bare, trainer, bare; the two bare runs are averaged).

    python bench/train_throughput.py [--quick] [--recipe-dir recipes/digits]

With a recipe dir whose features exist, its real train set and model config are used; otherwise a synthetic set
with digits-like lengths (80-dim, 1–3 s). Last line: one JSON object.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asrlib.config import load_config  # noqa: E402
from asrlib.features.cmvn import online_prior  # noqa: E402
from asrlib.models.lstm import build_model  # noqa: E402
from asrlib.testing import make_toy_ctc_setup  # noqa: E402
from asrlib.train.data import CtcDataset, collate  # noqa: E402
from asrlib.train.trainer import Trainer, ctc_loss, make_optimizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def bare_loop(model, opt, batches) -> float:
    """Forward + CTC + backward + step on pre-collated batches (no data loading, augmentation, logging)."""
    t0 = time.perf_counter()
    for b in batches:
        model.train()
        loss, _, _ = ctc_loss(model, b)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--recipe-dir", type=Path, default=ROOT / "recipes/digits")
    p.add_argument("--batches", type=int, default=0,
                   help="batches in the trainer's epoch (0 = the recipe's whole epoch, so that per-epoch costs, "
                        "checkpoint and plot, weigh as in the recipe; --quick: 20)")
    a = p.parse_args()
    n_batches = 20 if a.quick else a.batches
    import matplotlib.pyplot  # noqa: F401  one-time imports, not per-epoch costs of the trainer
    import torch.utils.tensorboard  # noqa: F401
    cfg = load_config(a.recipe_dir / "config.yaml")
    torch.set_num_threads(cfg.train.num_threads)
    tmp = Path(tempfile.mkdtemp(prefix="bench_tp_"))
    fb = a.recipe_dir / "data" / "fbank"
    if (fb / "train" / ".done").is_file() and (a.recipe_dir / "data/lang/.done").is_file():
        source = "recipe"
        feats, text, lang, cmvn = fb / "train/feats.scp", a.recipe_dir / "data/train/text", \
            a.recipe_dir / "data/lang", fb / "train/cmvn.scp"
    else:
        source = "synthetic"
        make_toy_ctc_setup(tmp / "toy", {"train": 60 * (n_batches or 60)}, feat_dim=80, frames_per_phone=25)
        feats, text, lang, cmvn = tmp / "toy/fbank/train/feats.scp", tmp / "toy/data/train/text", \
            tmp / "toy/lang", tmp / "toy/fbank/train/cmvn.scp"
    # the recipe's normalisation where the trainer applies it (features.cmvn: online: the running mean, per utterance)
    ds = CtcDataset(feats, text, lang, cmvn, cfg.model.stack, excluded_path=tmp / "excluded.txt",
                    online_prior=online_prior(cfg.features))
    vocab = sum(1 for _ in open(lang / "tokens.txt"))
    cfg.train.epochs = 1
    cfg.train.checkpoint_every = max(cfg.train.checkpoint_every, 1)
    model = build_model(80, vocab, cfg.model)
    trainer = Trainer(cfg, model, ds, None, tmp / "exp")
    batches = trainer._epoch_batches(0)[:n_batches or None]
    keep = {u for b in batches for u in b}
    ds.utts = [u for u in ds.utts if u.utt in keep]
    trainer = Trainer(cfg, model, ds, None, tmp / "exp")  # an epoch = exactly these batches
    pre = [collate(ds, b) for b in trainer._epoch_batches(0)]
    frames = sum(int(c["feat_lens"].sum()) for c in pre)
    ref_model = build_model(80, vocab, cfg.model)
    ref_opt = make_optimizer(ref_model.parameters(), cfg.train)
    bare_loop(ref_model, ref_opt, pre)  # warm-up over every shape
    b1 = bare_loop(ref_model, ref_opt, pre)
    t0 = time.perf_counter()
    trainer.fit()
    tt = time.perf_counter() - t0
    b2 = bare_loop(ref_model, ref_opt, pre)
    bare = (b1 + b2) / 2
    out = {"bench": "train_throughput", "source": source, "batches": len(pre), "frames": frames,
           "trainer_frames_per_s": round(frames / tt, 1), "bare_frames_per_s": round(frames / bare, 1),
           "ratio": round(bare / tt, 3), "audio_seconds_per_s": round(frames / tt / 100, 1),
           "threads": torch.get_num_threads()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
