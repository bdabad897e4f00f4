"""Synthetic background noise: white, pink (1/f power) and babble-like (several speech-band, syllable-modulated
streams). One generator for the digits corpus' noisy utterances (``local.digits``) and for on-the-fly noise
augmentation in training (``asrlib.train.noise_aug``)."""

from __future__ import annotations

import numpy as np

NOISE_KINDS = ("white", "pink", "babble")


def shaped_noise(rng: np.random.Generator, n: int, sr: int, kind: str) -> np.ndarray:
    """``n`` samples of unit-RMS noise of ``kind`` (one of :data:`NOISE_KINDS`) at sample rate ``sr``."""
    if kind == "white":
        x = rng.standard_normal(n)
    elif kind in ("pink", "babble"):
        freqs = np.fft.rfftfreq(n, 1.0 / sr)
        f = np.maximum(freqs, 20.0)
        if kind == "pink":
            spec = (rng.standard_normal(len(f)) + 1j * rng.standard_normal(len(f))) / np.sqrt(f)
            x = np.fft.irfft(spec, n)
        else:  # babble: sum of talkers = band-limited noise with a random 2-7 Hz "syllable" envelope each
            x = np.zeros(n)
            band = np.exp(-0.5 * (np.log(f / 500.0) / 0.8) ** 2)
            for _ in range(int(rng.integers(4, 9))):
                spec = (rng.standard_normal(len(f)) + 1j * rng.standard_normal(len(f))) * band
                stream = np.fft.irfft(spec, n)
                t = np.arange(n) / sr
                env = np.maximum(0.0, np.sin(2 * np.pi * rng.uniform(2, 7) * t + rng.uniform(0, 6.3))) ** 2
                x += stream * (0.3 + env)
    else:
        raise ValueError(f"unknown noise kind {kind!r}; one of {NOISE_KINDS}")
    return x / (np.sqrt(np.mean(x**2)) + 1e-12)
