"""The scores a TLG search is given, from CTC log-probs: ``blank_penalty`` subtracted at the blank (token 0), then
times ``acoustic_scale`` (the recipe's ``decode`` settings; kaldi-decoder's DecodableCtc has neither option), and
back. One place for both directions: :class:`asrlib.decode.search.TlgDecoder` and the streaming recogniser apply
it, and an exported network whose output carries it (``ScanAcousticModel.fold_search``, for sherpa-onnx) is
unfolded to log-probs with :func:`undo_search`."""

from __future__ import annotations

import numpy as np


def apply_search(logprobs: np.ndarray, acoustic_scale: float, blank_penalty: float) -> np.ndarray:
    """A float32 copy of ``logprobs`` ([..., V]; the caller's array is never modified) with the search applied."""
    scores = np.array(logprobs, dtype=np.float32)
    if blank_penalty:
        scores[..., 0] -= blank_penalty
    if acoustic_scale != 1.0:
        scores *= acoustic_scale
    return scores


def undo_search(scores: np.ndarray, acoustic_scale: float, blank_penalty: float) -> np.ndarray:
    """The log-probs of ``scores`` that carry the search (``scores`` itself when there is none)."""
    if (acoustic_scale, blank_penalty) == (1.0, 0.0):
        return scores
    logp = np.asarray(scores, np.float32) / np.float32(acoustic_scale)
    logp[..., 0] += np.float32(blank_penalty)
    return logp
