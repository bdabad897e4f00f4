"""Training cuts with their ends moved (``train.boundary_jitter``), so that the network does not learn where a
corpus's recordings happen to start and end.

A long recording is decoded in segments cut in the middle of its pauses (asrlib/decode/segment.py), so a segment
starts and ends with another amount of silence than the utterance's own recording had. A model trained only on
the corpus's own boundaries is sensitive to that: the AN4 BLSTM's dev WER moves from 6.65 % to 5.78-10.12 % when
each utterance loses or gains 50-200 ms of audio at one end (docs/long-recordings.md, which also has what moving
the ends in training measured: the recipes keep it off).

Each training cut's start and its end are moved independently by a whole number of fbank frames drawn uniformly
from ``[-J, J]`` (``J`` = ``boundary_jitter`` seconds; ``boundary_jitter_mode`` ``extend``: ``[0, J]``, ``trim``:
``[-J, 0]``): a negative move drops frames at that end, a positive one adds
frames there, copies of the cut's own outermost frames (``EDGE_FRAMES`` of them, repeated: its own background, not a
constant). A move that would leave the cut too few frames for its CTC targets is not made. The features are moved
before the normalisation (utterance or online CMN sees the moved cut, as it sees a segment), in the loader's
workers; the draws come from an RNG seeded by (seed, epoch, batch index), like the joins
(:mod:`asrlib.train.concat`), so a resumed run sees the same batches. Dev batches are not moved.
"""

from __future__ import annotations

import numpy as np
from lhotse import CutSet

from asrlib.errors import AsrError
from asrlib.features.fbank import FRAME_SHIFT
from asrlib.train.batch_plan import BatchPlan, batch_rng

EDGE_FRAMES = 5  # the outermost frames repeated to extend a cut (50 ms)


JITTER_MODES = ("both", "extend", "trim")  # moves drawn from [-J, J], [0, J], [-J, 0]


class BoundaryJitter:
    def __init__(self, seconds: float, seed: int, mode: str = "both") -> None:
        if not 0.0 <= seconds <= 1.0:
            raise AsrError(f"train.boundary_jitter must be in [0, 1] seconds, got {seconds}")
        if mode not in JITTER_MODES:
            raise AsrError(f"train.boundary_jitter_mode must be one of {', '.join(JITTER_MODES)}, got {mode!r}")
        j = int(round(seconds / FRAME_SHIFT))
        self.low, self.high = (0 if mode == "extend" else -j), (0 if mode == "trim" else j)
        self.seed = seed

    def __call__(self, cuts: CutSet, epoch: int, index: int) -> BatchPlan:
        rng = batch_rng("jitter", self.seed, epoch, index)
        lo, hi = self.low, self.high
        parts = list(cuts)
        return BatchPlan(CutSet.from_cuts(parts), moves=[(rng.randint(lo, hi), rng.randint(lo, hi)) for _ in parts])


def move_ends(feats: np.ndarray, start: int, end: int, min_frames: int) -> np.ndarray:
    """``feats`` (T x D) with ``start`` frames added before it (< 0: removed from it) and ``end`` after it; unchanged
    when the result would have fewer than ``min_frames`` frames."""
    if len(feats) - max(0, -start) - max(0, -end) < max(1, min_frames):
        return feats
    x = feats[max(0, -start) : len(feats) - max(0, -end)]
    head = _edge(feats[:EDGE_FRAMES], start) if start > 0 else x[:0]
    tail = _edge(feats[-EDGE_FRAMES:], end) if end > 0 else x[:0]
    return np.concatenate([head, x, tail]) if len(head) or len(tail) else x


def _edge(frames: np.ndarray, n: int) -> np.ndarray:
    return np.resize(frames, (n, frames.shape[1])).astype(frames.dtype, copy=False)
