"""Algorithmic latency of an acoustic model: how long after a sound the posterior of its output frame can exist.

Output frame j covers the 10 ms frames ``[j S, (j + 1) S)`` (S = ``model.stack``). Its posterior needs every fbank
frame up to the last one the network looks at for it, F(j), and fbank frame i (25 ms window centred on its 10 ms
slot, ``snip_edges=false``) needs audio up to ``i × shift + (shift + window) / 2``. The latency of frame j is that
time minus the start of its slot, and the model's is the largest over j:

- unidirectional: F(j) = (j + 1) S − 1: latency = S × shift + (window − shift) / 2 (waiting for a full stack);
  with a look-ahead of K output frames (``model.lookahead``), F(j) = (j + 1 + K) S − 1: K S × shift more (reported
  as ``right_context``);
- LC-BLSTM (:mod:`asrlib.models.lc_blstm`): F(j) = ((c + 1) N + M) S − 1 for chunk c = j // N, largest at a
  chunk's first frame: latency = N S × shift (chunk) + M S × shift (right context) + (window − shift) / 2;
- a plain BLSTM hears the whole utterance: no bound (None).

There is no output delay term: the CTC targets are not delayed. tests/test_lc_blstm.py checks the figure by
streaming a click through a model and timing when its frame's posterior comes out.
"""

from __future__ import annotations

from typing import Dict, Optional

from asrlib.config import ModelConfig

FRAME_SHIFT_MS = 10.0
FRAME_LENGTH_MS = 25.0


def latency_parts_ms(
    cfg: ModelConfig, shift_ms: float = FRAME_SHIFT_MS, window_ms: float = FRAME_LENGTH_MS, run_chunk: int = 1
) -> Optional[Dict[str, float]]:
    """The latency's parts in ms (``chunk``, ``right_context``, ``output_delay``, ``feature_window``, ``total``),
    or None for a plain BLSTM (whole-utterance look-ahead). ``run_chunk``: the output frames a unidirectional model
    is run with per call (``export.chunk_frames`` of a look-ahead model's bundle), 1 for its own latency."""
    if cfg.bidirectional and cfg.chunk_frames <= 0:
        return None
    frame = cfg.stack * shift_ms
    chunk = (cfg.chunk_frames if cfg.chunk_frames > 0 else run_chunk) * frame
    right = (cfg.right_context + cfg.lookahead) * frame  # the LC-BLSTM's, or the unidirectional look-ahead's
    window = (window_ms - shift_ms) / 2
    return {
        "chunk": chunk,
        "right_context": right,
        "output_delay": 0.0,
        "feature_window": window,
        "total": chunk + right + window,
    }


def algorithmic_latency_ms(cfg: ModelConfig) -> Optional[float]:
    """The model's algorithmic latency in ms (:func:`latency_parts_ms`), None for a plain BLSTM."""
    parts = latency_parts_ms(cfg)
    return None if parts is None else parts["total"]
