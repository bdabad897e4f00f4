"""Features for the GMM system, made from the fbank archive of the feature stage (no second front end).

``mfcc_deltas`` (default, what Kaldi's train_mono uses): the CMVN-normalised log-mel filterbank goes through
Kaldi's MFCC DCT (orthonormal DCT-II, ``num_ceps`` coefficients, cepstral liftering 22): these are MFCCs of the
same mel filterbank, mean-normalised because the DCT is linear. Then deltas and delta-deltas (window 2, edges
replicated, Kaldi's ``add-deltas``): 3 x 13 = 39 dimensions. ``fbank``: the normalised filterbank itself
(diagonal Gaussians fit it less well: its dimensions are strongly correlated).
"""

from __future__ import annotations

import numpy as np

from asrlib.errors import AsrError

FEATURE_KINDS = ("mfcc_deltas", "fbank")


def dct_matrix(num_ceps: int, num_bins: int, lifter: float = 22.0) -> np.ndarray:
    """(num_bins, num_ceps) matrix: liftered orthonormal DCT-II, as Kaldi's MFCC computes it."""
    if num_ceps > num_bins:
        raise AsrError(f"gmm.num_ceps ({num_ceps}) cannot exceed the number of mel bins ({num_bins})")
    j = np.arange(num_bins) + 0.5
    k = np.arange(num_ceps)[:, None]
    m = np.sqrt(2.0 / num_bins) * np.cos(np.pi / num_bins * j[None, :] * k)
    m[0] = np.sqrt(1.0 / num_bins)
    if lifter > 0:
        m *= (1.0 + 0.5 * lifter * np.sin(np.pi * np.arange(num_ceps) / lifter))[:, None]
    return m.T.astype(np.float32)


def deltas(x: np.ndarray, window: int = 2) -> np.ndarray:
    """Regression deltas over +-window frames (edge frames replicated)."""
    t = len(x)
    pad = np.concatenate([np.repeat(x[:1], window, 0), x, np.repeat(x[-1:], window, 0)])
    num = sum(k * (pad[window + k : window + k + t] - pad[window - k : window - k + t]) for k in range(1, window + 1))
    return (num / (2.0 * sum(k * k for k in range(1, window + 1)))).astype(np.float32)


class GmmFeatureMaker:
    """Normalised fbank (T, num_bins) -> GMM features (T, dim)."""

    def __init__(self, kind: str = "mfcc_deltas", num_ceps: int = 13):
        if kind not in FEATURE_KINDS:
            raise AsrError(f"gmm.feature_type must be one of {', '.join(FEATURE_KINDS)}, got '{kind}'")
        self.kind, self.num_ceps = kind, num_ceps
        self._dct: np.ndarray | None = None

    def dim(self, num_bins: int) -> int:
        return num_bins if self.kind == "fbank" else 3 * self.num_ceps

    def __call__(self, fbank: np.ndarray) -> np.ndarray:
        fbank = np.asarray(fbank, dtype=np.float32)
        if self.kind == "fbank":
            return np.ascontiguousarray(fbank)
        if self._dct is None or self._dct.shape[0] != fbank.shape[1]:
            self._dct = dct_matrix(self.num_ceps, fbank.shape[1])
        c = fbank @ self._dct
        d = deltas(c)
        return np.ascontiguousarray(np.concatenate([c, d, deltas(d)], axis=1), dtype=np.float32)
