"""Augmentation of a padded batch of features in the training process (on the checkpointed global torch RNG, so
resume stays exact): SpecAugment's masks and a VTLP-like frequency warp."""

from __future__ import annotations

import torch


def freq_warp(x: torch.Tensor, max_warp: float) -> torch.Tensor:
    """Vocal-tract-length-style perturbation on (N, T, D) filterbank features: each utterance's mel axis is stretched
    by a random factor in [1 - max_warp, 1 + max_warp] (linear interpolation between bins, edges clamped), which
    imitates a speaker with a shorter or longer vocal tract. Uses the global torch RNG (checkpointed)."""
    n, _, d = x.shape
    alpha = 1.0 + (torch.rand(n, 1) * 2 - 1) * max_warp
    pos = (torch.arange(d, dtype=torch.float32).unsqueeze(0) * alpha).clamp(0, d - 1)  # (N, D) source bins
    lo = pos.floor().long()
    hi = (lo + 1).clamp(max=d - 1)
    w = (pos - lo).unsqueeze(1)
    lo_v = x.gather(2, lo.unsqueeze(1).expand(-1, x.shape[1], -1))
    hi_v = x.gather(2, hi.unsqueeze(1).expand(-1, x.shape[1], -1))
    return lo_v * (1 - w) + hi_v * w


def spec_augment(
    x: torch.Tensor,
    lens: torch.Tensor,
    num_freq_masks: int = 2,
    max_f: int = 10,
    num_time_masks: int = 2,
    max_t_frac: float = 0.05,
    max_warp: float = 0.0,
) -> torch.Tensor:
    """Optional frequency warping, then frequency and time masking (zeros after CMVN = the mean).
    Uses the global torch RNG (checkpointed)."""
    x = freq_warp(x, max_warp) if max_warp > 0 else x.clone()
    n, _, d = x.shape
    for i in range(n):
        for _ in range(num_freq_masks):
            f = int(torch.randint(0, max_f + 1, (1,)))
            f0 = int(torch.randint(0, max(1, d - f), (1,)))
            x[i, :, f0 : f0 + f] = 0
        t_len = int(lens[i])
        max_t = max(1, int(t_len * max_t_frac))
        for _ in range(num_time_masks):
            t = int(torch.randint(0, max_t + 1, (1,)))
            t0 = int(torch.randint(0, max(1, t_len - t), (1,)))
            x[i, t0 : t0 + t] = 0
    return x
