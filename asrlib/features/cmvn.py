"""Global cepstral mean and variance normalisation (CMVN), with statistics stored in Kaldi's format.

The statistics are a 2 x (D+1) float64 matrix, as written by Kaldi's ``compute-cmvn-stats``: row 0 holds the
per-dimension sums followed by the frame count, row 1 the per-dimension sums of squares followed by 0. They are
stored in ``cmvn.ark`` / ``cmvn.scp`` under the key ``global``.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Tuple

import numpy as np
from tqdm import tqdm

from asrlib.io_utils import AsrError, PathLike
from asrlib.kaldi_io import MatrixReader, write_double_matrices

log = logging.getLogger(__name__)

GLOBAL_KEY = "global"
VAR_FLOOR = 1e-10  # Kaldi's floor in ApplyCmvn


def accumulate_cmvn_stats(feats_scp: PathLike, show_progress: bool = True) -> np.ndarray:
    """Sum the features of every utterance in ``feats_scp`` into Kaldi CMVN stats (float64, 2 x (D+1))."""
    reader = MatrixReader(feats_scp)
    if len(reader) == 0:
        raise AsrError(f"{feats_scp} lists no utterances; cannot compute CMVN statistics")
    stats = None
    for utt, feats in tqdm(reader, total=len(reader), desc="cmvn stats", unit="utt", disable=not show_progress,
                           mininterval=1.0):
        if stats is None:
            dim = feats.shape[1]
            stats = np.zeros((2, dim + 1), dtype=np.float64)
        elif feats.shape[1] != stats.shape[1] - 1:
            raise AsrError(f"{feats_scp}: '{utt}' has dimension {feats.shape[1]}, expected {stats.shape[1] - 1} "
                           f"(features from different configurations mixed?)")
        f64 = feats.astype(np.float64)
        stats[0, :-1] += f64.sum(axis=0)
        stats[1, :-1] += (f64 * f64).sum(axis=0)
        stats[0, -1] += len(feats)
    if stats[0, -1] <= 0:
        raise AsrError(f"{feats_scp}: all utterances have zero frames; cannot compute CMVN statistics")
    return stats


def write_cmvn(out_dir: PathLike, stats: np.ndarray) -> Path:
    """Write ``out_dir/cmvn.ark`` and ``cmvn.scp`` (key ``global``) atomically; returns the scp path."""
    _check_stats(stats, "stats")
    ark = Path(out_dir) / "cmvn.ark"
    write_double_matrices(ark, [(GLOBAL_KEY, np.ascontiguousarray(stats, dtype=np.float64))])
    return ark.with_suffix(".scp")


def compute_global_cmvn(feats_scp: PathLike, out_dir: PathLike, show_progress: bool = True) -> np.ndarray:
    """Accumulate stats over ``feats_scp`` and write them to ``out_dir/cmvn.{ark,scp}``; returns the stats."""
    stats = accumulate_cmvn_stats(feats_scp, show_progress)
    write_cmvn(out_dir, stats)
    return stats


def _check_stats(stats: np.ndarray, where: str) -> None:
    if stats.ndim != 2 or stats.shape[0] != 2 or stats.shape[1] < 2:
        raise AsrError(f"{where}: CMVN stats must be a 2 x (D+1) matrix, got shape {stats.shape}")
    if not np.isfinite(stats).all() or stats[0, -1] < 1:
        raise AsrError(f"{where}: CMVN stats are not finite or count no frames")


@dataclass
class Cmvn:
    """Global normalisation ``(x - mean) * inv_std`` (both float32 vectors of the feature dimension)."""
    mean: np.ndarray
    inv_std: np.ndarray

    @property
    def dim(self) -> int:
        return int(self.mean.shape[0])

    @classmethod
    def from_stats(cls, stats: np.ndarray, var_floor: float = VAR_FLOOR) -> Tuple["Cmvn", int]:
        """Build from Kaldi stats; returns (cmvn, number of dimensions whose variance was floored)."""
        _check_stats(stats, "stats")
        count = stats[0, -1]
        mean = stats[0, :-1] / count
        var = stats[1, :-1] / count - mean * mean
        floored = int((var < var_floor).sum())
        var = np.maximum(var, var_floor)
        return cls(mean.astype(np.float32), (1.0 / np.sqrt(var)).astype(np.float32)), floored

    def apply(self, feats: np.ndarray) -> np.ndarray:
        """Normalise a (T, D) float32 feature matrix (returns a new float32 array)."""
        if feats.ndim != 2 or feats.shape[1] != self.dim:
            raise AsrError(f"CMVN has dimension {self.dim}, features have shape {feats.shape}")
        return ((feats - self.mean) * self.inv_std).astype(np.float32, copy=False)


def load_cmvn(cmvn_scp: PathLike, var_floor: float = VAR_FLOOR) -> Cmvn:
    """Load the ``global`` CMVN stats from ``cmvn_scp``; variances below ``var_floor`` are floored (warned)."""
    reader = MatrixReader(cmvn_scp, double=True)
    if GLOBAL_KEY not in reader:
        raise AsrError(f"{cmvn_scp} has no '{GLOBAL_KEY}' entry; recompute it with steps.compute_cmvn")
    stats = reader[GLOBAL_KEY]
    _check_stats(stats, str(cmvn_scp))
    cmvn, floored = Cmvn.from_stats(stats, var_floor)
    if floored:
        log.warning("%s: variance of %d of %d dimensions floored to %g (constant feature dimensions?)",
                    cmvn_scp, floored, cmvn.dim, var_floor)
    return cmvn
