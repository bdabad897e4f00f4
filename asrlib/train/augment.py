"""Augmentation of a padded batch of features: SpecAugment's masks and a VTLP-like frequency warp, ours or lhotse's
SpecAugment (``train.spec_augment_impl``; docs/data.md has the measurement between them). Where it runs
(``train.spec_augment_in``): in the training process on the checkpointed global RNGs (the default), or in the loader's
workers (:class:`LoaderAugment`), each batch's draws from RNGs seeded by its place in the run. Either way a
resumed run sees the same augmented batches."""

from __future__ import annotations

import dataclasses
import random
from contextlib import contextmanager
from functools import partial
from typing import Callable, Iterator

import numpy as np
import torch

from asrlib.errors import AsrError
from asrlib.train.batch_plan import BatchPlan, batch_rng
from asrlib.train.checkpoint import seed_everything

SPEC_AUGMENT_IMPLS = ("ours", "lhotse")
SPEC_AUGMENT_IN = ("loader", "trainer")


def freq_warp(x: torch.Tensor, max_warp: float) -> torch.Tensor:
    """Vocal-tract-length-style perturbation on (N, T, D) filterbank features: each utterance's mel axis is stretched
    by a random factor in [1 - max_warp, 1 + max_warp] (linear interpolation between bins, edges clamped), which
    imitates a speaker with a shorter or longer vocal tract. One batched matrix product with each utterance's (D, D)
    interpolation matrix (7x faster than gathering the bins). Uses the global torch RNG."""
    n, _, d = x.shape
    dev = x.device
    alpha = 1.0 + (torch.rand(n, 1, device=dev) * 2 - 1) * max_warp
    pos = (torch.arange(d, dtype=torch.float32, device=dev).unsqueeze(0) * alpha).clamp(0, d - 1)  # (N, D) source
    lo = pos.floor().long()
    hi = (lo + 1).clamp(max=d - 1)
    w = (pos - lo).unsqueeze(1)
    interp = torch.zeros(n, d, d, dtype=x.dtype, device=dev)  # [utterance, source bin, output bin]
    interp.scatter_add_(1, lo.unsqueeze(1), (1 - w).to(x.dtype))
    interp.scatter_add_(1, hi.unsqueeze(1), w.to(x.dtype))
    return torch.bmm(x, interp)


def _span_mask(size: int, starts: torch.Tensor, widths: torch.Tensor) -> torch.Tensor:
    """(N, size) bool: whether position p of row i lies in one of row i's spans [starts[i, k], + widths[i, k])."""
    pos = torch.arange(size, device=starts.device).view(1, 1, size)
    return ((pos >= starts.unsqueeze(2)) & (pos < (starts + widths).unsqueeze(2))).any(dim=1)


def spec_augment(
    x: torch.Tensor,
    lens: torch.Tensor,
    num_freq_masks: int = 2,
    max_f: int = 10,
    num_time_masks: int = 2,
    max_t_frac: float = 0.05,
    max_warp: float = 0.0,
) -> torch.Tensor:
    """Optional frequency warping, then frequency masks (each up to ``max_f`` bins) and time masks (each up to
    ``max_t_frac`` of the utterance's frames, inside them), zeros after CMVN = the mean. The whole batch's draws at
    once (no per-utterance loop: this runs on every batch), from the global torch RNG (:class:`LoaderAugment` seeds
    it per batch; in the training process it is the checkpointed one, on CUDA the device's)."""
    warped = max_warp > 0
    x = freq_warp(x, max_warp) if warped else x
    n, t_max, d = x.shape
    dev = x.device
    lens = lens.to(dev)
    f = (torch.rand(n, num_freq_masks, device=dev) * (max_f + 1)).long()
    f0 = (torch.rand(n, num_freq_masks, device=dev) * (d - f).clamp(min=1)).long()
    max_t = (lens * max_t_frac).long().clamp(min=1).unsqueeze(1)
    t = (torch.rand(n, num_time_masks, device=dev) * (max_t + 1)).long()
    t0 = (torch.rand(n, num_time_masks, device=dev) * (lens.unsqueeze(1) - t).clamp(min=1)).long()
    keep_f = (~_span_mask(d, f0, f)).unsqueeze(1).to(x.dtype)  # (N, 1, D)
    keep_t = (~_span_mask(t_max, t0, t)).unsqueeze(2).to(x.dtype)  # (N, T, 1)
    # = x.masked_fill(freq | time mask, 0.0), bit for bit (+ 0.0 turns the products' -0.0 into 0.0), in half the time
    # or less (bench/augment_speed.py); in place on the warp's output, which is ours (no second batch-sized buffer).
    # Unlike the fill, a NaN or Inf under a mask stays (x * 0): the loader skips cuts with non-finite features.
    x = x.mul_(keep_t) if warped else x * keep_t
    return x.mul_(keep_f).add_(0.0)


def lhotse_spec_augment(x: torch.Tensor, lens: torch.Tensor, time_warp: int, max_warp: float = 0.0) -> torch.Tensor:
    """lhotse's SpecAugment with our masks (2 frequency masks of up to 10 bins, time masks of up to 10 % of the
    padded length in all), plus its time warp (``time_warp_factor``) inside each utterance's frames; our frequency
    warp first when ``max_warp``. Its draws come from Python's, NumPy's and torch's global RNGs."""
    from lhotse.dataset import SpecAugment

    sa = SpecAugment(
        time_warp_factor=time_warp or None,
        num_feature_masks=2,
        features_mask_size=10,
        num_frame_masks=2,
        frames_mask_size=max(1, int(0.05 * x.shape[1])),
        max_frames_mask_fraction=0.1,
        p=1.0,
    )
    x = freq_warp(x, max_warp) if max_warp > 0 else x
    lens = lens.cpu()  # lhotse reads the segments on the host
    segments = torch.stack([torch.arange(len(lens)), torch.zeros_like(lens), lens], dim=1).int()
    return sa(x, supervision_segments=segments)


Augment = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def augments_in_loader(spec_augment: bool, where: str, noise_in_trainer: bool) -> bool:
    """Whether SpecAugment runs in the loader's workers: ``train.spec_augment`` on and ``train.spec_augment_in``
    ``loader``, unless noise added in the training process (``train.noise_prob``) must go in before its masks."""
    if where not in SPEC_AUGMENT_IN:
        raise AsrError(f"train.spec_augment_in must be one of {', '.join(SPEC_AUGMENT_IN)}, got {where!r}")
    return spec_augment and where == "loader" and not noise_in_trainer


def make_spec_augment(impl: str, freq_warp_max: float, time_warp: int) -> Augment:
    """The batch augmentation of ``train.spec_augment_impl``: (N, T, D) features, (N,) lengths -> augmented."""
    if impl == "ours":
        return partial(spec_augment, max_warp=freq_warp_max)
    if impl == "lhotse":
        return partial(lhotse_spec_augment, time_warp=time_warp, max_warp=freq_warp_max)
    raise AsrError(f"train.spec_augment_impl must be one of {', '.join(SPEC_AUGMENT_IMPLS)}, got {impl!r}")


# ------------------------------------------------------------------------------------------------ in the workers


@contextmanager
def seeded_rngs(seed: int) -> Iterator[None]:
    """Python's, NumPy's and torch's (CPU) global RNGs seeded by ``seed`` inside, restored after: the draws of a batch
    are a function of its seed alone, in a worker process or in the training process (0 workers), whose own
    checkpointed RNGs (dropout, noise) stay untouched."""
    py, npy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        seed_everything(seed)
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(npy)


class LoaderAugment:
    """SpecAugment (``train.spec_augment_in: loader``) applied by the loader's workers to each padded training batch,
    its draws from RNGs seeded by (seed, epoch, rank, batch index), like the joins' and the jitter's: a resumed run,
    any number of workers, sees the same augmented batches. Off the training process's step, where it costs about
    1 ms of a digits step (docs/data.md#specaugment-in-the-workers)."""

    def __init__(self, augment: Augment, seed: int, rank: int) -> None:
        self.augment, self.seed, self.rank = augment, seed, rank

    def attach(self, cuts, epoch: int, index: int) -> BatchPlan:
        """A CutSet's or a plan's batch with the seed of its draws, which the worker makes on the padded batch."""
        seed = batch_rng("specaug", self.seed, epoch, self.rank, index).getrandbits(63)
        return dataclasses.replace(BatchPlan.of(cuts), seed=seed)

    def __call__(self, feats: torch.Tensor, lens: torch.Tensor, seed: int) -> torch.Tensor:
        with seeded_rngs(seed):
            return self.augment(feats, lens)
