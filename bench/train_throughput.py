"""P3: trainer throughput (input frames/s) divided by a bare forward/backward/step loop of the same model on the
same batch shapes, measured side by side in one run. On the CPU (``--timing epochs``, the default) the trainer runs
``fit`` over --repeats of the recipe's whole epochs (with its data reading, augmentation, clipping, logging,
checkpoints and plot) and before each epoch a bare epoch over the first epoch's batch shapes runs on a second model,
timed apart, so that both see the same minutes of a machine whose speed drifts by 10-20 %; the ratio reported is the
median over the epochs after the first (the first, which also starts the loader's workers, once per training run, is
reported beside it). ``--timing steps`` (the figures before 2026-11-26 evening) puts a bare step after each trainer
step instead, in one-epoch fits: the two models then take turns, each step finding the caches filled with the other
model's weights and optimiser state and the loader's workers running during the bare step, neither of which happens
in training (docs/data.md compares the timings). ``--timing blocks`` alternates the two every ``--block``
steps (50: about 4 s each on digits) within the fit's epochs, the bare steps on the batches the trainer has just
trained on (since 2026-11-28 morning; before, on the first epoch's, cycled), so that both meet the machine's drift
and the epoch's batch shapes in the same proportions (with epochs, a 2-3 % difference between two epochs' minutes
lands on one side, and each epoch joins and buckets its cuts anew); each epoch's ratio is
its trainer frames/s over its bare blocks' frames/s, and ``ratio_pooled`` the ratio of the sums over the epochs after
the first. The trainer reads the features
as steps.train does (asrlib/train/recipe_sets.py: the recipe's cut joins, perturbation, noise and jitter; before
2026-11-26 night without them): lhotse's sampler over the lazy cut manifest, DataLoader workers reading the
(compressed) archives (asrlib/train/loader.py); the ratio is reported for each --workers count (issue 24's goal:
>= 0.95 with 2), with (``--timing epochs`` / ``blocks``) how long the trainer waits in ``next()`` for each batch
(``wait_ms_median``, ``wait_ms_p90``, ``wait_share``: their sum over the trainer's time), the epochs after the first.

    python bench/train_throughput.py [--quick] [--recipe-dir recipes/digits] [--repeats 3] [--workers 0 2] [--threads N]
                                     [--timing epochs|blocks|steps] [--block 50]
                                     [--config FILE] [--set SECTION.KEY=VALUE ...]
    python bench/train_throughput.py --device cuda ...   # on a GPU: the recipe's precision (bf16 under auto)

On a GPU the two are not interleaved step by step (a wait for the device after each step would take away the
overlap of host work with device work that a loader relies on): the trainer's epoch is timed whole, then the bare
loop over the same batches, already on the device, each ending with a wait for the device.

With a recipe dir whose features exist, its real train set and model config are used; otherwise a synthetic set
with digits-like lengths (80-dim, 1–3 s). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import atexit
import itertools
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/helpers.py: the toy CTC set-up

from asrlib.cli import add_config_args  # noqa: E402
from asrlib.config import load_config  # noqa: E402
from asrlib.models.device import autocast, resolve_device, resolve_precision, to_device  # noqa: E402
from asrlib.models.lstm import build_model  # noqa: E402
from asrlib.train.loader import CtcTargets  # noqa: E402
from asrlib.train.recipe_sets import open_recipe_set  # noqa: E402
from asrlib.train.trainer import Trainer, ctc_loss, make_optimizer  # noqa: E402
from helpers import make_toy_ctc_setup  # noqa: E402


def bare_step(model, opt, batch, device: torch.device = torch.device("cpu"), dtype=None) -> None:
    """Forward + CTC + backward + step on a pre-collated batch (no data loading, augmentation, logging), autocast to
    ``dtype`` on ``device`` as the trainer does (None: fp32)."""
    model.train()
    with autocast(device, dtype):
        loss, _, _ = ctc_loss(model, batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def interleaved_epoch(trainer: Trainer, ref_model, ref_opt, pre) -> tuple:
    """One trainer epoch (``fit``: every per-step and per-epoch cost) with a bare step on the same batch shapes after
    each of its steps, timed apart: both see the same moments of the machine. Returns (trainer s, bare s)."""
    step, batches, bare = trainer.train_step, iter(pre), []

    def step_then_bare(utt_ids):
        out = step(utt_ids)
        t0 = time.perf_counter()
        bare_step(ref_model, ref_opt, next(batches))
        bare.append(time.perf_counter() - t0)
        return out

    trainer.train_step = step_then_bare
    t0 = time.perf_counter()
    trainer.fit()
    total = time.perf_counter() - t0
    return total - sum(bare), sum(bare)


def epoch_interleaved_fit(trainer: Trainer, ref_model, ref_opt, pre) -> list:
    """The trainer's ``fit`` over its epochs with a bare epoch over ``pre`` before each, run while the trainer is
    between epochs (its loader workers idle), timed apart: each side's steps run one after another, as in training.
    Returns per epoch (trainer s, trainer input frames, bare s); the first epoch's trainer time includes the start of
    ``fit`` (its loader workers' start)."""
    epoch_cuts, step = trainer.epoch_cuts, trainer.train_step
    frames, marks = [], []  # marks: the start and end of each bare epoch, then fit's end

    def bare_then_epoch(epoch, skip):
        marks.append(time.perf_counter())
        for b in pre:
            bare_step(ref_model, ref_opt, b)
        marks.append(time.perf_counter())
        frames.append(0)
        return epoch_cuts(epoch, skip)

    def counted_step(batch):
        out = step(batch)
        frames[-1] += out[2]
        return out

    trainer.epoch_cuts, trainer.train_step = bare_then_epoch, counted_step
    start = time.perf_counter()
    trainer.fit()
    marks.append(time.perf_counter())
    # trainer time of epoch i: from the end of bare epoch i to the start of bare epoch i+1 (or fit's end); the
    # first epoch also from fit's start to its bare epoch
    spans = [marks[2 * i + 2] - marks[2 * i + 1] for i in range(len(frames))]
    spans[0] += marks[0] - start
    bare = [marks[2 * i + 1] - marks[2 * i] for i in range(len(frames))]
    n_bare = sum(int(b["feat_lens"].sum()) for b in pre)
    return [(t, n, b, n_bare) for t, n, b in zip(spans, frames, bare)]


def block_interleaved_fit(trainer: Trainer, ref_model, ref_opt, block: int) -> list:
    """The trainer's ``fit`` over its epochs with, after every ``block`` trainer steps, ``block`` bare steps over the
    batches those steps trained on (the same shapes: an epoch's joins and buckets differ from another's), timed
    apart: each side's steps run one after another as in training (a block of 50 digits steps is about 4 s), and both
    sides meet the machine's drift of speed in the same proportions, which a bare epoch before each trainer epoch
    (``epoch_interleaved_fit``) leaves to chance. An epoch's last batches, fewer than a block, get their bare steps
    after it. Returns per epoch (trainer s, trainer input frames, bare s, bare input frames): an epoch's trainer time
    is its wall time less its bare blocks, its per-epoch costs (checkpoint, plot) included; the first one's includes
    the start of ``fit``."""
    epoch_cuts, step = trainer.epoch_cuts, trainer.train_step
    rows, recent = [], []  # rows: [start, trainer frames, bare s, bare frames] per epoch

    def bare_block() -> None:
        row, t0 = rows[-1], time.perf_counter()
        for b in recent:
            bare_step(ref_model, ref_opt, b)
            row[3] += int(b["feat_lens"].sum())
        row[2] += time.perf_counter() - t0
        recent.clear()

    def new_epoch(epoch, skip):
        if rows:
            bare_block()  # the last epoch's last batches
        rows.append([time.perf_counter(), 0, 0.0, 0])
        return epoch_cuts(epoch, skip)

    def step_then_block(batch):
        out = step(batch)
        rows[-1][1] += out[2]
        if batch["ids"]:
            recent.append(batch)
        if len(recent) == block:
            bare_block()
        return out

    trainer.epoch_cuts, trainer.train_step = new_epoch, step_then_block
    start = time.perf_counter()
    trainer.fit()
    bare_block()
    ends = [r[0] for r in rows[1:]] + [time.perf_counter()]
    rows[0][0] = start
    assert all(r[1] == r[3] for r in rows), "each epoch's bare steps ran on its batches"
    return [(end - r[0] - r[2], r[1], r[2], r[3]) for r, end in zip(rows, ends)]


def timed_batches(ds) -> list:
    """Wrap ``ds.batches`` (what the trainer iterates each epoch) to time each ``next()``: how long the trainer waits
    for the loader (the hand-over included). Returns the list that gets one list of waits (s) per call."""
    waits, batches = [], ds.batches

    def wrapped(*args, **kwargs):
        it, mine = batches(*args, **kwargs), []
        waits.append(mine)
        while True:
            t0 = time.perf_counter()
            try:
                b = next(it)
            except StopIteration:
                return
            mine.append(time.perf_counter() - t0)
            yield b

    ds.batches = wrapped
    return waits


def separate_epoch(trainer: Trainer, ref_model, ref_opt, on_device, dtype) -> tuple:
    """On an accelerator: the trainer's epoch (``fit``) timed whole, then the bare loop over the same batches, already
    on the device, timed whole (each ends when the device has finished). Returns (trainer s, bare s)."""
    sync = torch.cuda.synchronize if trainer.device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    trainer.fit()
    sync()
    t1 = time.perf_counter()
    for b in on_device:
        bare_step(ref_model, ref_opt, b, trainer.device, dtype)
    sync()
    return t1 - t0, time.perf_counter() - t1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--recipe-dir", type=Path, default=ROOT / "recipes/digits")
    p.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="DataLoader workers to measure")
    p.add_argument("--repeats", type=int, default=3, help="interleaved epochs; the median is reported (--quick: 1)")
    p.add_argument(
        "--batches",
        type=int,
        default=0,
        help="batches in the trainer's epoch (0 = the recipe's whole epoch, so that per-epoch costs, "
        "checkpoint and plot, weigh as in the recipe; --quick: 20)",
    )
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]: where the trainer and the bare loop run")
    p.add_argument(
        "--timing",
        choices=["epochs", "blocks", "steps"],
        default="epochs",
        help="on the CPU: a bare epoch before each of one fit's epochs (default); a bare block of --block steps "
        "after every --block trainer steps; or a bare step after each trainer step in one-epoch fits (the figures "
        "before 2026-11-26 evening)",
    )
    p.add_argument("--block", type=int, default=50, help="--timing blocks: steps a side runs before the other")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads of the trainer and the bare loop (0 = the recipe's train.num_threads); 1 on a 2-core "
        "machine leaves the workers a core of their own, as a node with cores to spare does",
    )
    add_config_args(p, required=False, help="recipe YAML config (default: RECIPE_DIR/config.yaml)")
    a = p.parse_args()
    n_batches, repeats = (20, 1) if a.quick else (a.batches, max(1, a.repeats))
    import matplotlib.pyplot  # noqa: F401  one-time imports, not per-epoch costs of the trainer
    import torch.utils.tensorboard  # noqa: F401

    cfg = load_config(a.config or a.recipe_dir / "config.yaml", a.overrides)
    if a.threads > 0:
        cfg.train.num_threads = a.threads
    torch.set_num_threads(cfg.train.num_threads)
    tmp = Path(tempfile.mkdtemp(prefix="bench_tp_"))
    atexit.register(shutil.rmtree, tmp, True)  # the trainers' exp dirs (50-90 MB)
    fb = a.recipe_dir / "data" / "fbank"
    if (fb / "train" / ".done").is_file() and (a.recipe_dir / "data/lang/.done").is_file():
        source, feats_dir, data_dir, lang = (
            "recipe",
            fb / "train",
            a.recipe_dir / "data/train",
            a.recipe_dir / "data/lang",
        )
    else:
        source = "synthetic"
        make_toy_ctc_setup(tmp / "toy", {"train": 60 * (n_batches or 60)}, feat_dim=80, frames_per_phone=25)
        feats_dir, data_dir, lang = tmp / "toy/fbank/train", tmp / "toy/data/train", tmp / "toy/lang"
    targets = CtcTargets(lang, cfg.model.stack)
    vocab = len(targets.tokens)
    cfg.train.device = a.device
    device = resolve_device(a.device)
    amp_dtype = resolve_precision(cfg.train.precision, device)
    cfg.train.checkpoint_every = max(cfg.train.checkpoint_every, 1)
    out = {"bench": "train_throughput", "source": source, "threads": torch.get_num_threads(), "device": str(device)}
    if a.overrides:
        out["overrides"] = a.overrides
    out["precision"] = str(amp_dtype).replace("torch.", "") if amp_dtype is not None else "fp32"
    if device.type == "cuda":
        out["device_name"] = torch.cuda.get_device_name(device)
    epochs_timing = device.type == "cpu" and a.timing in ("epochs", "blocks")
    out["timing"] = a.timing if device.type == "cpu" else "separate"
    for workers in a.workers:
        cfg.train.loader.num_workers = workers
        cfg.train.epochs = repeats if epochs_timing else 1
        # the recipe's normalisation where the trainer applies it (features.cmvn: online: the running mean)
        # as steps.train opens it: the recipe's cut joins (digits: train.concat_prob), perturbation, noise, jitter
        ds = open_recipe_set(cfg, feats_dir, data_dir, targets, feats_dir / "cmvn.scp", True, tmp / "excluded.txt")
        model = build_model(80, vocab, cfg.model)
        name = f"workers{workers}"

        def make_trainer(exp):
            tr = Trainer(cfg, model, ds, None, exp)
            epoch_cuts = tr.epoch_cuts
            tr.epoch_cuts = lambda e, skip: itertools.islice(epoch_cuts(e, skip), n_batches or None)
            return tr

        trainer = make_trainer(tmp / name)
        pre = list(ds.batches(trainer.epoch_cuts(0, 0), workers=0))
        frames = sum(int(c["feat_lens"].sum()) for c in pre)
        ref_model = build_model(80, vocab, cfg.model).to(device)
        ref_opt = make_optimizer(ref_model.parameters(), cfg.train)
        on_device = [to_device(b, device) for b in pre]  # (on the CPU: the batches themselves)
        for b in on_device:  # warm-up over every shape
            bare_step(ref_model, ref_opt, b, device, amp_dtype)
        if epochs_timing:
            waits = timed_batches(ds)
            if a.timing == "blocks":
                per_epoch = block_interleaved_fit(trainer, ref_model, ref_opt, max(1, a.block))
            else:
                per_epoch = epoch_interleaved_fit(trainer, ref_model, ref_opt, pre)
            ratios = [(n / t) / (nb / b) for t, n, b, nb in per_epoch]
            steady = per_epoch[1:] or per_epoch

            def pooled(rows):  # the ratio of the summed rates
                t, n, b, nb = (sum(x[k] for x in rows) for k in range(4))
                return (n / t) / (nb / b)

            tt, n_tr, bare, n_bare = (sum(x[k] for x in steady) for k in range(4))
            out[name] = {
                "batches": len(pre),
                "frames": frames,
                "epochs": len(per_epoch),
                "trainer_frames_per_s": round(n_tr / tt, 1),  # epochs after the first
                "bare_frames_per_s": round(n_bare / bare, 1),
                "ratio": round(statistics.median(ratios[1:] or ratios), 3),  # the epochs after the first
                "ratio_pooled": round(pooled(steady), 3),  # the epochs after the first, their sums
                "ratio_first_epoch": round(ratios[0], 3),  # with fit's start (its workers')
                "ratio_whole_fit": round(pooled(per_epoch), 3),
                "ratio_per_epoch": [round(r, 3) for r in ratios],
                "audio_seconds_per_s": round(n_tr / tt / 100, 1),
            }
            # the trainer's waits for the loader in the epochs after the first (with --timing blocks the workers also
            # run during the bare blocks, so the batches after a block are ready early: --timing epochs for these)
            w = sorted(x for ep in (waits[1:] or waits) for x in ep)
            out[name]["wait_ms_median"] = round(1e3 * statistics.median(w), 2)
            out[name]["wait_ms_p90"] = round(1e3 * w[int(0.9 * (len(w) - 1))], 2)
            out[name]["wait_share"] = round(sum(w) / tt, 4)  # of the trainer's time
            if a.timing == "blocks":
                out[name]["block"] = a.block
            continue
        runs = []
        for i in range(repeats):
            if i:
                trainer = make_trainer(tmp / f"{name}_{i}")  # a fresh exp dir: fit() starts anew
            if device.type == "cpu":
                runs.append(interleaved_epoch(trainer, ref_model, ref_opt, pre))
            else:
                runs.append(separate_epoch(trainer, ref_model, ref_opt, on_device, amp_dtype))
        tt, bare = sorted(runs, key=lambda r: r[1] / r[0])[len(runs) // 2]  # the median run
        out[name] = {
            "batches": len(pre),
            "frames": frames,
            "trainer_frames_per_s": round(frames / tt, 1),
            "bare_frames_per_s": round(frames / bare, 1),
            "ratio": round(bare / tt, 3),
            "ratio_per_run": [round(b / t, 3) for t, b in runs],
            "audio_seconds_per_s": round(frames / tt / 100, 1),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
