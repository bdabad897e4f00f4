"""Cutting a long recording into segments at its pauses, so that the network starts each one from a zero state.

A recurrent acoustic model is trained on utterances of a few seconds that start from a zero state. Run over a
whole meeting or lecture it carries that state across hours of audio it never saw in training, and its error rate
grows (measured on the digits recipe: 7.7 % WER on 60 s recordings against 2.2 % on the same speech as
utterances). The recognizer therefore decodes a long recording as *segments* cut at its pauses, each from a fresh
network state, as Kaldi's online2 endpointing and sherpa-onnx's endpoint rules do for live audio.

Where the pauses are comes from a per-frame *non-speech* flag, by one of two methods (``decode.segment``):

* ``blank`` (the default): a frame is non-speech when the CTC network's best token is blank
  (:func:`blank_nonspeech`), from a pass of the network over the buffered audio from a zero state: the model's own
  idea of where nothing is said, robust to the noise it was trained on. Costs a second pass of the network (each
  segment is then run again from a zero state).
* ``energy``: a frame is non-speech when its log mel energy (:func:`frame_energy`) is within
  ``segment_threshold_db`` of the local floor, the minimum of the smoothed energy within ±1 s
  (:func:`energy_nonspeech`). Needs no model, but misses pauses where the background changes (on the digits
  test set's concatenations, whose utterances each have their own noise, it finds fewer than 60 % of the
  utterance boundaries even with 0.1 s runs).

Segments are planned by :func:`plan_segments` over a buffer of at most ``segment_max_seconds`` (whichever method
gives the flags): every non-speech run of at least ``segment_min_silence`` seconds ends a segment, cut in its middle
when it is shorter than twice ``segment_pad``; a longer pause keeps ``segment_pad`` seconds on each side and its
middle is not decoded. A stretch with no such pause is cut, at the latest after ``segment_max_seconds``, in the
middle of its longest non-speech run. Everything works in *output frames* (``subsampling`` fbank frames each), so
segment times stay on the network's frame grid.

Why the middle: a CTC model emits a token *after* hearing it, so a blank run begins after the last word ends and
ends after the next one begins; and a model trained on utterances with short leading silence is hurt by long ones
(the digits model's test WER goes from 2.53 to 5.83 % with 0.1 s of near-silence put before each utterance, to
12.58 % with 0.3 s: its online CMN's running mean is pulled down by silence). Both argue against cutting near
either end of a pause. bench/long_form.py measures the methods; docs/long-recordings.md has the figures.

The recognizer runs each segment from a zero state over the segment alone, or with ``segment_context`` seconds of
the recording on each side whose outputs it drops (Kaldi's extra left / right context for chunked BLSTM decoding):
a bidirectional model then keeps its context across a cut that fell between the words of one utterance (on AN4,
with joined training, the long recordings reached the per-utterance WER; docs/long-recordings.md).

``segment: none`` decodes the recording as one stream (the state carried throughout; memory grows with its
length): the behaviour before segmentation, kept for comparison.
"""

from __future__ import annotations

import math
from typing import List, Tuple

import numpy as np

from asrlib.config import SEGMENT_METHODS  # noqa: F401 - re-exported: the methods this module implements

FLOOR_WINDOW_FRAMES = 100  # ±1 s of fbank frames for the local energy floor
SMOOTH_FRAMES = 5  # moving average of the energy before the floor and threshold


def frame_energy(feats: np.ndarray) -> np.ndarray:
    """Log of the total mel energy of each fbank frame (fbank rows are natural-log mel energies)."""
    f = np.asarray(feats, np.float64)
    if len(f) == 0:
        return np.zeros(0)
    m = f.max(axis=1, keepdims=True)
    return (m + np.log(np.exp(f - m).sum(axis=1, keepdims=True)))[:, 0]


def _moving(x: np.ndarray, width: int, how: str) -> np.ndarray:
    """Centred moving mean or minimum over ``width`` frames (edges: the part of the window inside ``x``)."""
    if len(x) == 0 or width <= 1:
        return x.copy()
    half = width // 2
    pad = np.pad(x, half, mode="edge")
    win = np.lib.stride_tricks.sliding_window_view(pad, 2 * half + 1)
    return win.mean(axis=1) if how == "mean" else win.min(axis=1)


def energy_nonspeech(feats: np.ndarray, threshold_db: float) -> np.ndarray:
    """Per fbank frame: True where the smoothed energy is within ``threshold_db`` of the local floor."""
    e = _moving(frame_energy(feats), SMOOTH_FRAMES, "mean")
    floor = _moving(e, 2 * FLOOR_WINDOW_FRAMES + 1, "min")
    return e < floor + threshold_db * math.log(10) / 10


def blank_nonspeech(log_probs: np.ndarray) -> np.ndarray:
    """Per output frame: True where blank (token 0) is the network's best token."""
    return np.argmax(log_probs, axis=1) == 0 if len(log_probs) else np.zeros(0, bool)


def to_output_frames(flags: np.ndarray, stack: int) -> np.ndarray:
    """Fbank-frame flags → output-frame flags: an output frame is non-speech when all its ``stack`` frames are."""
    n = len(flags) // stack
    return flags[: n * stack].reshape(n, stack).all(axis=1)


def runs_of(flags: np.ndarray) -> List[Tuple[int, int]]:
    """``[start, end)`` of each run of True."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], flags.astype(np.int8), [0]])))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


def plan_segments(
    nonspeech: np.ndarray, final: bool, min_silence: int, pad: int, max_len: int
) -> Tuple[List[Tuple[int, int]], int]:
    """Segments ``[a, b)`` (output frames of the buffer) that are complete, and where the buffer's rest begins.

    ``nonspeech`` flags the buffer's frames; ``final``: the recording ends with the buffer (else more follows,
    and a silence run touching the end may go on). ``min_silence``, ``pad``, ``max_len`` in output frames (see
    the module docstring). Returns ``(segments, keep_from)``: frames before ``keep_from`` are done with (decoded
    in a segment or skipped as silence); the caller keeps the rest and calls again with more frames. When the
    buffer is at least ``max_len`` long and not final, ``keep_from`` > 0 (a cut is forced), so the buffer is bounded.
    """
    n = len(nonspeech)
    segs: List[Tuple[int, int]] = []
    start = 0  # where the segment being built begins
    for a, b in runs_of(nonspeech):
        if b - a < min_silence:
            continue
        if a <= start:  # silence before the segment's first speech: skip all but the pad
            start = max(start, b - pad)
            continue
        open_end = b == n and not final  # a run touching the end of a buffer that goes on
        end = a + pad if (open_end or b - a > 2 * pad) else (a + b) // 2
        segs.append((start, min(end, n)))
        # an open run's rest is kept (the next call skips it as leading silence)
        start = min(end, n) if open_end else max(b - pad, end)
    if final:
        if start < n and not nonspeech[start:].all():
            segs.append((start, n))
        return segs, n
    if n - start >= max_len:  # no pause long enough: cut in the longest non-speech run, else at the limit
        window = nonspeech[start : start + max_len]
        inner = [(a, b) for a, b in runs_of(window) if a > 0]
        if inner:
            a, b = max(inner, key=lambda r: r[1] - r[0])
            cut = start + (a + b) // 2
        else:
            cut = start + max_len
        segs.append((start, cut))
        start = cut
    return segs, start
