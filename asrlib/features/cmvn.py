"""Cepstral mean and variance normalisation (CMVN), with statistics stored in Kaldi's format.

The statistics are a 2 x (D+1) float64 matrix, as written by Kaldi's ``compute-cmvn-stats``: row 0 holds the
per-dimension sums followed by the frame count, row 1 the per-dimension sums of squares followed by 0.

* Global (``features.cmvn: global``, the default): the training set's statistics, in the training feature dir's
  ``cmvn.ark`` / ``cmvn.scp`` under the key ``global``; the model stores mean and 1/std and applies them itself.
* Per speaker (``features.cmvn: speaker``): Kaldi's ``compute-cmvn-stats --spk2utt`` + ``apply-cmvn --utt2spk
  --norm-vars=false``. Every set's feature dir holds ``cmvn_spk.ark`` / ``cmvn_spk.scp`` (one entry per speaker)
  and a copy of the set's ``utt2spk``; :func:`open_features` then subtracts each utterance's speaker mean, and the
  global normalisation (computed over the speaker-normalised training features) applies on top. A test speaker's
  mean comes from all of that speaker's utterances in the test set (unsupervised, as in Kaldi).
* Per utterance (``features.cmvn: utterance``, ESPnet's ``utterance_mvn`` without the variance): each recording
  minus its own mean (:func:`utterance_cmn`), no statistics files; the global normalisation (computed over the
  training features so normalised) applies on top.
* Online (``features.cmvn: online``, the causal form that a streaming recogniser can run, like Kaldi's
  ``apply-cmvn-online``): the global CMVN first, then frame t minus the running mean of frames 0..t, which starts
  from the training mean (0 after the global CMVN) with the weight of ``features.online_prior_frames`` frames
  (:func:`online_cmn`). The same statistics as ``global``; models apply it themselves, chunk by chunk, carrying
  the running sum and frame count (the exported ONNX graphs too).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

import numpy as np
from tqdm import tqdm

from asrlib.config import CMVN_MODES
from asrlib.errors import AsrError, PathLike
from asrlib.io.tables import read_table, write_table
from asrlib.kaldi_io import MatrixReader, write_double_matrices

log = logging.getLogger(__name__)

GLOBAL_KEY = "global"
SPEAKER_STATS = "cmvn_spk.scp"  # per-speaker stats in a set's feature dir (features.cmvn: speaker)
VAR_FLOOR = 1e-10  # Kaldi's floor in ApplyCmvn


def _accumulate(reader: MatrixReader, group: Callable[[str], str], show_progress: bool) -> Dict[str, np.ndarray]:
    """Kaldi CMVN stats (float64, 2 x (D+1)) per group of utterances, ``group(utt)`` naming an utterance's group."""
    where = reader.scp_path
    if len(reader) == 0:
        raise AsrError(f"{where} lists no utterances; cannot compute CMVN statistics")
    out: Dict[str, np.ndarray] = {}
    dim = None
    for utt, feats in tqdm(
        reader, total=len(reader), desc="cmvn stats", unit="utt", disable=not show_progress, mininterval=1.0
    ):
        if dim is None:
            dim = feats.shape[1]
        elif feats.shape[1] != dim:
            raise AsrError(
                f"{where}: '{utt}' has dimension {feats.shape[1]}, expected {dim} "
                f"(features from different configurations mixed?)"
            )
        stats = out.setdefault(group(utt), np.zeros((2, dim + 1), dtype=np.float64))
        f64 = feats.astype(np.float64)
        stats[0, :-1] += f64.sum(axis=0)
        stats[1, :-1] += (f64 * f64).sum(axis=0)
        stats[0, -1] += len(feats)
    empty = sorted(k for k, st in out.items() if st[0, -1] <= 0)
    if empty:
        raise AsrError(
            f"{where}: all utterances of {', '.join(empty[:5])} have zero frames; cannot compute CMVN statistics"
        )
    return out


def accumulate_cmvn_stats(feats_scp: PathLike, show_progress: bool = True, cmn: str = "") -> np.ndarray:
    """Sum the features of every utterance in ``feats_scp`` into Kaldi CMVN stats (float64, 2 x (D+1)); with
    ``cmn`` (speaker, utterance) the features are mean-normalised so first (:func:`open_features`)."""
    return _accumulate(open_features(feats_scp, cmn), lambda _: GLOBAL_KEY, show_progress)[GLOBAL_KEY]


def compute_speaker_cmvn(feats_scp: PathLike, utt2spk: PathLike, show_progress: bool = True) -> Dict[str, np.ndarray]:
    """Per-speaker stats of ``feats_scp`` (speakers from ``utt2spk``), written beside it as ``cmvn_spk.{ark,scp}``
    (keys = speakers, Kaldi's ``compute-cmvn-stats --spk2utt``) with a copy of the utt2spk entries it used."""
    reader = MatrixReader(feats_scp)
    u2s = dict(read_table(utt2spk))
    missing = [u for u in reader.keys() if not u2s.get(u)]
    if missing:
        raise AsrError(
            f"{utt2spk} has no speaker for {len(missing)} utterance(s) of {feats_scp}, e.g. "
            f"'{missing[0]}'; validate the data dir (steps.validate_data_dir) and recompute the features"
        )
    stats = _accumulate(reader, u2s.__getitem__, show_progress)
    out = Path(feats_scp).parent
    write_double_matrices(out / Path(SPEAKER_STATS).with_suffix(".ark"), sorted(stats.items()))
    write_table(out / "utt2spk", [(u, u2s[u]) for u in reader.keys()])
    return stats


def write_cmvn(out_dir: PathLike, stats: np.ndarray) -> Path:
    """Write ``out_dir/cmvn.ark`` and ``cmvn.scp`` (key ``global``) atomically; returns the scp path."""
    _check_stats(stats, "stats")
    ark = Path(out_dir) / "cmvn.ark"
    write_double_matrices(ark, [(GLOBAL_KEY, np.ascontiguousarray(stats, dtype=np.float64))])
    return ark.with_suffix(".scp")


def compute_global_cmvn(
    feats_scp: PathLike, out_dir: PathLike, show_progress: bool = True, cmn: str = ""
) -> np.ndarray:
    """Accumulate stats over ``feats_scp`` (mean-normalised first by ``cmn``: speaker or utterance) and
    write them to ``out_dir/cmvn.{ark,scp}``; returns the stats."""
    stats = accumulate_cmvn_stats(feats_scp, show_progress, cmn)
    write_cmvn(out_dir, stats)
    return stats


def _check_stats(stats: np.ndarray, where: str) -> None:
    if stats.ndim != 2 or stats.shape[0] != 2 or stats.shape[1] < 2:
        raise AsrError(f"{where}: CMVN stats must be a 2 x (D+1) matrix, got shape {stats.shape}")
    if not np.isfinite(stats).all() or stats[0, -1] < 1:
        raise AsrError(f"{where}: CMVN stats are not finite or count no frames")


OnlineState = Tuple[np.ndarray, float]  # (running sum of the normalised frames so far (D,), their number)


def online_cmn(
    z: np.ndarray, prior_frames: float, state: Optional[OnlineState] = None
) -> Tuple[np.ndarray, OnlineState]:
    """Causal mean normalisation of globally normalised frames ``z`` (T, D): frame t minus (sum of the frames up to
    and including t) / (their number + ``prior_frames``), i.e. the running mean with ``prior_frames`` frames of the
    training mean (zero) in front. ``state`` continues an utterance given in chunks (None: its start); returns the
    normalised frames (float32) and the state after them. Chunked or whole, the frames are the same."""
    import torch

    z64 = np.asarray(z, np.float64)
    s0, n0 = state if state is not None else (np.zeros(z64.shape[1], np.float64), 0.0)
    if len(z64) == 0:
        return np.asarray(z, np.float32), (s0, n0)
    # continued from s0 in order: chunked == whole. torch's cumsum adds in the same order as numpy's (a float64
    # running sum down each column: the same bits) at 0.4 of its time (35 against 87 us for 318 x 80 frames)
    sums = torch.cumsum(torch.from_numpy(np.vstack([s0[None], z64])), 0).numpy()[1:]
    counts = n0 + np.arange(1, len(z64) + 1, dtype=np.float64) + float(prior_frames)
    last = sums[-1].copy()
    np.subtract(z64, np.divide(sums, counts[:, None], out=sums), out=sums)  # in place: the same operations
    return sums.astype(np.float32), (last, n0 + len(z64))


@dataclass
class Cmvn:
    """Global normalisation ``(x - mean) * inv_std`` (both float32 vectors of the feature dimension), followed by
    :func:`online_cmn` when ``online_prior`` is not None (``features.cmvn: online``)."""

    mean: np.ndarray
    inv_std: np.ndarray
    online_prior: Optional[float] = None

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
        """Normalise a whole (T, D) float32 feature matrix (returns a new float32 array)."""
        return self.apply_chunk(feats)[0]

    def apply_chunk(
        self, feats: np.ndarray, state: Optional[OnlineState] = None
    ) -> Tuple[np.ndarray, Optional[OnlineState]]:
        """Normalise the next (T, D) frames of an utterance; ``state``: what the previous chunk returned (None at
        the start). Returns (frames, state for the next chunk)."""
        if feats.ndim != 2 or feats.shape[1] != self.dim:
            raise AsrError(f"CMVN has dimension {self.dim}, features have shape {feats.shape}")
        z = ((feats - self.mean) * self.inv_std).astype(np.float32, copy=False)
        if self.online_prior is None:
            return z, None
        return online_cmn(z, self.online_prior, state)


def check_cmvn_mode(mode: str) -> str:
    """``features.cmvn`` → the mean normalisation beside the global one: ``""`` (global only), ``speaker`` or
    ``utterance`` (before it, by :func:`open_features`), ``online`` (after it, by :class:`Cmvn`); anything else is
    an error."""
    if mode not in CMVN_MODES:
        raise AsrError(f"features.cmvn must be one of {', '.join(CMVN_MODES)}, got {mode!r}")
    return "" if mode == "global" else mode


def utterance_cmn(feats: np.ndarray) -> np.ndarray:
    """A (T, D) recording minus its own mean over all its frames (float32 out)."""
    x = np.asarray(feats, np.float64)
    return np.asarray(feats, np.float32) if len(x) == 0 else (x - x.mean(axis=0)).astype(np.float32)


class UtteranceCmnReader(MatrixReader):
    """A feats.scp whose matrices come out minus their own mean (:func:`utterance_cmn`)."""

    def __getitem__(self, key: str) -> np.ndarray:
        return utterance_cmn(super().__getitem__(key))


class SpeakerCmnReader(MatrixReader):
    """A feats.scp whose matrices come out minus their speaker's mean (``apply-cmvn --utt2spk --norm-vars=false``),
    from the ``cmvn_spk.scp`` and ``utt2spk`` that :func:`compute_speaker_cmvn` wrote beside it."""

    def __init__(self, scp_path: PathLike) -> None:
        super().__init__(scp_path)
        d = self.scp_path.parent
        stats_scp, u2s_path = d / SPEAKER_STATS, d / "utt2spk"
        if not stats_scp.is_file() or not u2s_path.is_file():
            raise AsrError(
                f"{d} has no per-speaker CMVN statistics ({SPEAKER_STATS}, utt2spk), needed with "
                f"features.cmvn: speaker (or by a model trained with it); compute them with python -m "
                f"steps.compute_cmvn --feats {self.scp_path} --utt2spk DATA_DIR/utt2spk --out-dir {d} "
                f"--speaker-only"
            )
        means = {spk: Cmvn.from_stats(st, VAR_FLOOR)[0].mean for spk, st in MatrixReader(stats_scp, double=True)}
        u2s = dict(read_table(u2s_path))
        self._mean: Dict[str, np.ndarray] = {}
        for utt in self.keys():
            if u2s.get(utt) not in means:
                raise AsrError(
                    f"{d}: utterance '{utt}' has no speaker statistics in {SPEAKER_STATS} (speaker "
                    f"{u2s.get(utt)!r}); the features changed after steps.compute_cmvn: rerun it"
                )
            self._mean[utt] = means[u2s[utt]]

    def __getitem__(self, key: str) -> np.ndarray:
        return (super().__getitem__(key) - self._mean[key]).astype(np.float32, copy=False)


def cmvn_info(features) -> dict:
    """What a trained model records of the config's ``features`` section (a saved model's ``info``): ``cmvn``
    (the mode) and, for ``online``, ``online_prior_frames``."""
    out = {"cmvn": features.cmvn}
    if features.cmvn == "online":
        out["online_prior_frames"] = float(features.online_prior_frames)
    return out


def cmvn_fingerprint(features) -> dict:
    """What a trained stage's fingerprint adds for ``features`` (the config's section): nothing for ``cmvn:
    global``, so outputs written before the option existed stay complete; :func:`cmvn_info` otherwise (switching
    the mode or the online prior retrains)."""
    return {} if features.cmvn == "global" else cmvn_info(features)


def online_prior(features) -> Optional[float]:
    """The :class:`Cmvn` ``online_prior`` for the config's ``features`` section: its prior weight with ``cmvn:
    online``, else None."""
    return float(features.online_prior_frames) if features.cmvn == "online" else None


def open_features(feats_scp: PathLike, cmn: str = "") -> MatrixReader:
    """The reader every consumer of a feats.scp uses: raw fbank (``cmn`` empty), or mean-normalised by speaker or
    by utterance (:func:`check_cmvn_mode`'s values)."""
    readers = {
        "": MatrixReader,
        "speaker": SpeakerCmnReader,
        "utterance": UtteranceCmnReader,
        "online": MatrixReader,
    }  # online: after the global CMVN (Cmvn.online_prior)
    if cmn not in readers:
        raise AsrError(f"no mean normalisation {cmn!r}; features.cmvn is one of {', '.join(CMVN_MODES)}")
    return readers[cmn](feats_scp)


def load_cmvn(cmvn_scp: PathLike, var_floor: float = VAR_FLOOR, online_prior: Optional[float] = None) -> Cmvn:
    """Load the ``global`` CMVN stats from ``cmvn_scp``; variances below ``var_floor`` are floored (warned);
    ``online_prior``: :func:`online_cmn` after them with that prior weight (``features.cmvn: online``)."""
    reader = MatrixReader(cmvn_scp, double=True)
    if GLOBAL_KEY not in reader:
        raise AsrError(f"{cmvn_scp} has no '{GLOBAL_KEY}' entry; recompute it with steps.compute_cmvn")
    stats = reader[GLOBAL_KEY]
    _check_stats(stats, str(cmvn_scp))
    cmvn, floored = Cmvn.from_stats(stats, var_floor)
    cmvn.online_prior = online_prior
    if floored:
        log.warning(
            "%s: variance of %d of %d dimensions floored to %g (constant feature dimensions?)",
            cmvn_scp,
            floored,
            cmvn.dim,
            var_floor,
        )
    return cmvn
