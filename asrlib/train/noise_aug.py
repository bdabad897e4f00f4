"""On-the-fly noise augmentation of filterbank features (icefall mixes MUSAN noise into cuts; this does the same in
the log-mel domain, so it costs no audio I/O and works on any feats.scp).

A bank of noise features is made once per run: :data:`asrlib.data.noise.NOISE_KINDS` noises (white, pink, babble;
``seconds`` each, fixed seed) through the same lhotse fbank as the corpus. For each training utterance, with
probability ``prob``, a random stretch of one bank noise is added at a random SNR in ``[snr_min, snr_max]`` dB:
mel energies add (``log(exp(x) + g exp(n))``, exact for the expected power spectrum, cross terms ignored), with the
gain ``g`` set from the utterance's active-speech energy (frames above its median energy) and the noise's mean
energy. Features come in CMVN-normalised and go out normalised the same way; padding frames are left as they are.
Draws use the global torch RNG, which checkpoints hold, so a resumed run augments exactly like an uninterrupted one.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from asrlib.data.noise import NOISE_KINDS, shaped_noise
from asrlib.features.cmvn import Cmvn
from asrlib.features.fbank import FbankExtractor, FbankOptions
from asrlib.errors import AsrError


class NoiseAugment:
    def __init__(
        self,
        cmvn: Cmvn,
        sample_rate: int,
        num_mel_bins: int,
        prob: float,
        snr_min: float,
        snr_max: float,
        seconds: float = 30.0,
        seed: int = 0,
        bank: Optional[torch.Tensor] = None,
    ) -> None:
        """``bank`` (K, T, D raw log-mel) replaces the generated noises (tests)."""
        if not 0.0 <= prob <= 1.0 or snr_min > snr_max:
            raise ValueError(
                f"noise augmentation needs 0 <= prob <= 1 and snr_min <= snr_max (got {prob}, {snr_min}, {snr_max})"
            )
        self.prob, self.snr_min, self.snr_max = prob, snr_min, snr_max
        self.mean = torch.from_numpy(np.asarray(cmvn.mean, dtype=np.float32))
        self.inv_std = torch.from_numpy(np.asarray(cmvn.inv_std, dtype=np.float32))
        if num_mel_bins != cmvn.dim:
            raise AsrError(
                f"noise augmentation: features.num_mel_bins is {num_mel_bins} in the config but the "
                f"training features have {cmvn.dim} dimensions; set features.num_mel_bins to {cmvn.dim}"
            )
        self.bank = bank if bank is not None else self._make_bank(sample_rate, num_mel_bins, seconds, seed)
        # mean mel energy per frame of each noise (log), for the SNR gain
        self.log_energy = torch.logsumexp(self.bank, dim=2).exp().mean(dim=1).log()

    @staticmethod
    def _make_bank(sample_rate: int, num_mel_bins: int, seconds: float, seed: int) -> torch.Tensor:
        fbank = FbankExtractor(FbankOptions(num_mel_bins=num_mel_bins, dither=0.0, sample_rate=sample_rate))
        rng = np.random.default_rng([seed, 104729])
        n = int(seconds * sample_rate)
        return torch.stack(
            [
                torch.from_numpy(fbank.features((0.1 * shaped_noise(rng, n, sample_rate, k)).astype(np.float32)))
                for k in NOISE_KINDS
            ]
        )

    def __call__(self, x: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        """(N, T, D) normalised features, (N,) lengths -> a new tensor with noise in some utterances."""
        x = x.clone()
        if self.bank.device != x.device:  # the training device (its draws stay on the CPU generator)
            self.mean, self.inv_std, self.bank, self.log_energy = (
                t.to(x.device) for t in (self.mean, self.inv_std, self.bank, self.log_energy)
            )
        k_bank, t_bank, _ = self.bank.shape
        for i in range(x.shape[0]):
            if float(torch.rand(())) >= self.prob:
                continue
            k = int(torch.randint(0, k_bank, ()))
            snr = self.snr_min + float(torch.rand(())) * (self.snr_max - self.snr_min)
            start = int(torch.randint(0, t_bank, ()))
            t = int(lens[i])
            if t == 0:
                continue
            raw = x[i, :t] / self.inv_std + self.mean
            energy = torch.logsumexp(raw, dim=1)  # log mel energy per frame
            active = energy[energy > energy.median()]
            active = active if active.numel() else energy  # a flat utterance: all frames
            log_gain = float(active.exp().mean().log()) - float(self.log_energy[k]) - snr / 10.0 * math.log(10.0)
            noise = self.bank[k, (start + torch.arange(t, device=x.device)) % t_bank]
            mixed = torch.logaddexp(raw, noise + log_gain)
            x[i, :t] = (mixed - self.mean) * self.inv_std
        return x
