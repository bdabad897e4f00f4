"""Augmentation of a padded batch of features: SpecAugment's masks and a VTLP-like frequency warp, ours or lhotse's
SpecAugment (``train.spec_augment_impl``; docs/data.md has the measurement between them), and the on-the-fly noise
of :mod:`asrlib.train.noise_aug`.

:class:`BatchAugment` runs them where the batch is built, in the DataLoader's workers (as lhotse's and icefall's
datasets do), off the training step: each batch's draws come from a generator seeded by (seed, rank, epoch, batch
number), so the batches are the same with any number of workers, and a resumed run, which knows where it is in
the epoch, augments exactly as an uninterrupted one without the RNG state in the checkpoint."""

from __future__ import annotations

import contextlib
import random
from functools import partial
from typing import Callable, Iterator, Optional, Tuple

import numpy as np
import torch

from asrlib.errors import AsrError

SPEC_AUGMENT_IMPLS = ("ours", "lhotse")


def freq_warp(x: torch.Tensor, max_warp: float, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Vocal-tract-length-style perturbation on (N, T, D) filterbank features: each utterance's mel axis is stretched
    by a random factor in [1 - max_warp, 1 + max_warp] (linear interpolation between bins, edges clamped), which
    imitates a speaker with a shorter or longer vocal tract. One batched matrix product with each utterance's (D, D)
    interpolation matrix (7x faster than gathering the bins). Draws from ``generator`` (default: torch's global)."""
    n, _, d = x.shape
    dev = x.device
    alpha = 1.0 + (torch.rand(n, 1, generator=generator).to(dev) * 2 - 1) * max_warp
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
    generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """Optional frequency warping, then frequency masks (each up to ``max_f`` bins) and time masks (each up to
    ``max_t_frac`` of the utterance's frames, inside them), zeros after CMVN = the mean. The whole batch's draws at
    once (no per-utterance loop), from ``generator`` (default: torch's global RNG), on the CPU."""
    x = freq_warp(x, max_warp, generator) if max_warp > 0 else x
    n, t_max, d = x.shape
    dev = x.device

    def rand(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=generator).to(dev)

    lens = lens.to(dev)
    f = (rand(n, num_freq_masks) * (max_f + 1)).long()
    f0 = (rand(n, num_freq_masks) * (d - f).clamp(min=1)).long()
    max_t = (lens * max_t_frac).long().clamp(min=1).unsqueeze(1)
    t = (rand(n, num_time_masks) * (max_t + 1)).long()
    t0 = (rand(n, num_time_masks) * (lens.unsqueeze(1) - t).clamp(min=1)).long()
    masked = _span_mask(d, f0, f).unsqueeze(1) | _span_mask(t_max, t0, t).unsqueeze(2)
    return x.masked_fill(masked, 0.0)


def lhotse_spec_augment(
    x: torch.Tensor,
    lens: torch.Tensor,
    time_warp: int,
    max_warp: float = 0.0,
    generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """lhotse's SpecAugment with our masks (2 frequency masks of up to 10 bins, time masks of up to 10 % of the
    padded length in all), plus its time warp (``time_warp_factor``) inside each utterance's frames; our frequency
    warp first when ``max_warp``. lhotse draws from Python's, NumPy's and torch's global RNGs: with ``generator``,
    they are seeded from it for the call and put back as they were after it."""
    if generator is not None:
        with _global_rngs(int(torch.randint(0, 2**62, (), generator=generator))):
            return lhotse_spec_augment(x, lens, time_warp, max_warp)
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


@contextlib.contextmanager
def _global_rngs(seed: int) -> Iterator[None]:
    """Python's, NumPy's and torch's (CPU) global RNGs seeded with ``seed`` inside, restored after."""
    state = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
    random.seed(seed), np.random.seed(seed % 2**32), torch.manual_seed(seed)
    try:
        yield
    finally:
        random.setstate(state[0]), np.random.set_state(state[1]), torch.random.set_rng_state(state[2])


Augment = Callable[..., torch.Tensor]  # (N, T, D) features, (N,) lengths, generator= -> augmented


def make_spec_augment(impl: str, freq_warp_max: float, time_warp: int) -> Augment:
    """The batch augmentation of ``train.spec_augment_impl``: (N, T, D) features, (N,) lengths -> augmented."""
    if impl == "ours":
        return partial(spec_augment, max_warp=freq_warp_max)
    if impl == "lhotse":
        return partial(lhotse_spec_augment, time_warp=time_warp, max_warp=freq_warp_max)
    raise AsrError(f"train.spec_augment_impl must be one of {', '.join(SPEC_AUGMENT_IMPLS)}, got {impl!r}")


class BatchAugment:
    """A training batch's augmentation: ``noise`` (:class:`~asrlib.train.noise_aug.NoiseAugment`, or None), then
    ``spec`` (a :func:`make_spec_augment`, or None), on a generator seeded by :meth:`key` and ``seed``; run by
    :class:`asrlib.train.loader.BatchDataset` where the batch is padded (in a worker)."""

    def __init__(self, spec: Optional[Augment], noise=None, seed: int = 0, settings: Optional[tuple] = None) -> None:
        """``settings``: what made ``spec`` and ``noise`` (:meth:`of`); two with the same settings are equal."""
        self.spec, self.noise, self.seed, self.settings = spec, noise, seed, settings

    @classmethod
    def of(cls, tcfg, cmvn, sample_rate: int, num_mel_bins: int) -> Optional["BatchAugment"]:
        """The augmentation of a ``train`` config section (None: none); ``cmvn``: the features' normalisation, for
        the noise's SNR."""
        from asrlib.train.noise_aug import NoiseAugment

        spec = make_spec_augment(tcfg.spec_augment_impl, tcfg.freq_warp, tcfg.time_warp) if tcfg.spec_augment else None
        noise = None
        if tcfg.noise_prob > 0:
            noise = NoiseAugment(
                cmvn, sample_rate, num_mel_bins, tcfg.noise_prob, tcfg.noise_snr_min, tcfg.noise_snr_max
            )
        if spec is None and noise is None:
            return None
        settings = (tcfg.spec_augment, tcfg.spec_augment_impl, tcfg.freq_warp, tcfg.time_warp, tcfg.noise_prob)
        settings += (tcfg.noise_snr_min, tcfg.noise_snr_max, tcfg.seed, sample_rate, num_mel_bins)
        return cls(spec, noise, tcfg.seed, settings)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BatchAugment) and self.settings is not None and self.settings == other.settings

    __hash__ = None  # type: ignore[assignment]

    @staticmethod
    def key(rank: int, epoch: int, number: int) -> Tuple[int, int, int]:
        """What a batch's draws depend on besides the seed: the learner, the epoch and the batch's number in it."""
        return rank, epoch, number

    def generator(self, key: Tuple[int, int, int]) -> torch.Generator:
        return torch.Generator().manual_seed(random.Random(f"augment/{self.seed}/{key}").getrandbits(62))

    def __call__(self, batch: dict, key: Tuple[int, int, int]) -> dict:
        g = self.generator(key)
        x, lens = batch["feats"], batch["feat_lens"]
        if self.noise is not None:
            x = self.noise(x, lens, generator=g)
        if self.spec is not None:
            x = self.spec(x, lens, generator=g)
        return {**batch, "feats": x}
