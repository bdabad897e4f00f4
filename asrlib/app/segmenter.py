"""A recording's segments: where it is cut, and the network's log-probabilities of each piece.

A recording is decoded as segments cut at its pauses (``decode.segment``, :mod:`asrlib.decode.segment`): the
network runs each segment from a zero state, chunk by chunk with the LSTM state carried within it (see
:mod:`asrlib.app.model_dir`), and the search (TLG or greedy) runs over each segment's log-probabilities, so a long
recording costs memory bounded by ``segment_max_seconds``, and a model trained on utterances never carries its
state across an hour. Under ``energy`` and ``blank`` a recording no longer than ``segment_max_seconds`` is one
segment, searched as the recipe's decode stage does (cutting a read sentence at its pauses cost 6.4 points of WER on
speechocean762's test utterances: the model loses the context of the words beside each cut, the LM its history);
``segment: none`` gives exactly the decode stage's search over the whole recording of any length in one stream.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, List, Tuple

import numpy as np

from asrlib.app.model_dir import AcousticBackend
from asrlib.config import DecodeConfig
from asrlib.decode.endpoint import CallSizes, EndpointRules
from asrlib.decode.segment import blank_nonspeech, energy_nonspeech, plan_segments, to_output_frames

#: ``(first output frame, log-probs [frames, V], end output frame)`` of one segment
SegmentScores = Tuple[int, np.ndarray, int]


def network_log_probs(backend: AcousticBackend, feats: Iterable[np.ndarray]) -> np.ndarray:
    """Log-probs of fbank chunks through one fresh stream (zero state)."""
    stream = backend.stream()
    outs = [stream.accept(f) for f in feats]
    outs.append(stream.finish())
    return np.concatenate(outs).astype(np.float32, copy=False)


class Segmenter:
    """Cuts one recording's fbank chunks into segments by ``method`` (a resolved ``decode.segment``: none, energy,
    blank or endpoint, with the ``decode`` settings) and runs the network over each: ``run_network(chunks)`` gives
    the log-probs of fbank chunks from a zero state, ``chunks(feats)`` cuts frames into chunks; under ``endpoint``
    an ``endpointer_type`` (:class:`asrlib.decode.endpoint.Endpointer`) cuts, calling ``backend``'s streams in
    ``endpoint_calls``."""

    def __init__(
        self,
        method: str,
        decode: DecodeConfig,
        backend: AcousticBackend,
        frame_seconds: float,
        run_network: Callable[[Iterable[np.ndarray]], np.ndarray],
        chunks: Callable[[np.ndarray], Iterator[np.ndarray]],
        endpoint_calls: CallSizes,
        endpointer_type: type,
    ) -> None:
        self.method, self.decode, self.backend, self.frame_seconds = method, decode, backend, frame_seconds
        self.run_network, self.chunks = run_network, chunks
        self.endpoint_calls, self.endpointer_type = endpoint_calls, endpointer_type

    def segments(self, feats: Iterable[np.ndarray]) -> Iterator[SegmentScores]:
        """``(first output frame, log-probs, end frame)`` of each segment of the recording
        (:mod:`asrlib.decode.segment`, :mod:`asrlib.decode.endpoint`), each run from a zero state; at most
        ``segment_max_seconds`` of features are held at a time."""
        if self.method == "none":
            lp = self.run_network(feats)
            yield 0, lp, len(lp)
        elif self.method == "endpoint":
            yield from self._endpointed(feats)
        else:
            yield from self._planned(feats)

    def _planned(self, feats: Iterable[np.ndarray]) -> Iterator[SegmentScores]:
        """``decode.segment`` energy or blank: segments planned over at most ``segment_max_seconds`` of features
        at a time (:func:`asrlib.decode.segment.plan_segments`), each run with ``segment_context`` of the
        recording on each side."""
        c, stack = self.decode, self.backend.subsampling
        fs = self.frame_seconds
        min_sil = max(1, int(round(c.segment_min_silence / fs)))
        pad = int(round(c.segment_pad / fs))
        max_len = max(2 * min_sil + 1, int(round(c.segment_max_seconds / fs)))

        def plan(buf: np.ndarray, final: bool) -> Tuple[List[Tuple[int, int]], int]:
            if self.method == "energy":
                flags = to_output_frames(energy_nonspeech(buf, c.segment_threshold_db), stack)
            else:
                flags = blank_nonspeech(self.run_network(self.chunks(buf)))[: len(buf) // stack]
            return plan_segments(flags, final, min_sil, pad, max_len)

        ctx = int(round(c.segment_context / fs)) * stack  # fbank frames of context on each side
        buf, out0 = np.zeros((0, self.backend.num_mel_bins), np.float32), 0
        before = buf  # up to ``ctx`` fbank frames of the recording just before ``buf``

        def context_before(end: int) -> np.ndarray:
            """The (up to) ``ctx`` fbank frames of the recording before ``buf[end]``."""
            lo = end - ctx
            return buf[lo:end] if lo >= 0 else np.concatenate([before[max(0, len(before) + lo) :], buf[:end]])

        final = False
        it = iter(feats)
        while not final:
            chunk = next(it, None)
            if chunk is not None:
                buf = np.concatenate([buf, chunk]) if len(buf) else np.asarray(chunk, np.float32)
                if len(buf) < max_len * stack:
                    continue
            final = chunk is None
            if final and out0 == 0 and not len(before):  # the whole recording fits one plan: not cut
                lp = self.run_network(self.chunks(buf))
                yield 0, lp, len(lp)
                return
            while len(buf) >= max_len * stack or final:
                segs, keep = plan(buf, final)
                for a, b in segs:  # a final segment takes the last partial stack too (the stream drops it)
                    end = len(buf) if final and b * stack >= len(buf) - stack else b * stack
                    left = context_before(a * stack)
                    x = np.concatenate([left, buf[a * stack : end], buf[end : end + ctx]])
                    lp = self.run_network(self.chunks(x))  # len(x) // stack rows
                    seg = lp[len(left) // stack : (len(left) + end) // stack - a]
                    yield out0 + a, seg, out0 + a + len(seg)
                before = context_before(keep * stack)
                buf, out0 = buf[keep * stack :], out0 + keep
                if final:
                    break

    def _endpointed(self, feats: Iterable[np.ndarray]) -> Iterator[SegmentScores]:
        """``decode.segment: endpoint``: the segments that :class:`asrlib.decode.endpoint.Endpointer` cuts, as the
        streaming recogniser's endpointing does: each segment's end found by its own network, run from a zero state
        at its start, the next one's start by the network that goes on listening. Each segment's log-probs are the
        network's from its start to where its pause ended it (searched whole, as the streaming recogniser searches
        them); its end is given ``min_silence / 2`` into that pause, before the next one's start."""
        rules = EndpointRules.of_decode(vars(self.decode), even_if_off=True)
        sink = _SegmentCollector()
        stack, dim = self.backend.subsampling, self.backend.num_mel_bins
        ep = self.endpointer_type(rules, stack, dim, self.frame_seconds, self.backend.stream, sink, self.endpoint_calls)
        rest = np.zeros((0, dim), np.float32)
        for chunk in feats:
            buf = np.concatenate([rest, chunk]) if len(rest) else np.asarray(chunk, np.float32)
            usable = len(buf) // stack * stack
            rest = buf[usable:]
            ep.accept(buf[:usable])
            yield from sink.take()
        ep.finish()  # frames that do not fill a last stack are dropped, as the network's stream drops them
        yield from sink.take()


class _SegmentCollector:
    """An endpointer's sink that keeps each finished segment's ``(first output frame, log-probs, end frame)``."""

    def __init__(self) -> None:
        self.scores: List[np.ndarray] = []
        self.done: List[SegmentScores] = []

    def decode(self, scores: np.ndarray) -> None:
        if len(scores):
            self.scores.append(scores)

    def end_segment(self, start: int, end: int) -> None:
        if self.scores:
            self.done.append((start, np.concatenate(self.scores).astype(np.float32, copy=False), end))
        self.scores = []

    def take(self) -> List[SegmentScores]:
        done, self.done = self.done, []
        return done
