"""Endpointing: cutting a stream of audio into segments as it is heard, each decoded from a zero network state.

One implementation for both recognisers: the streaming one on a mobile bundle (:mod:`asrlib.export.streaming`) and
the offline one (``decode.segment: endpoint``, :class:`asrlib.app.recognizer.Recognizer`). It knows nothing of the
network or the search: it is given a way to start a network stream from a zero state (``new_stream()``, an object
whose ``accept(fbank)`` returns the log-probs of whole stacks of fbank frames, carrying its state) and a
:class:`SegmentSink` that searches each segment's frames and is told where each segment ends.

The rules (:class:`EndpointRules`, seconds of network output frames). Silence = a run of frames whose best token is
the CTC blank. A segment ends when, after some speech, the silence has lasted ``min_silence`` (sherpa-onnx's and
Kaldi online2's rule 2), or when it reaches ``max_segment`` (rule 3; the frames after the cut run again from a zero
state). After a pause the endpointer *waits*: the network goes on with its old state as a detector, and the last
``pad`` seconds of fbank frames are kept. The detector's first non-blank frame ``b`` starts the next segment, from a
zero state, in the middle of the pause (at most ``pad`` before ``b``; before the input's first speech, ``pad``
before ``b``), and the kept frames from there on run again. Where it starts matters: a unidirectional CTC model
emits a word's token after the word, so the blank run that follows an utterance lasts until the next one's first
word is over, and a segment started where the endpoint fired (``min_silence`` into that run) often began inside
that word and lost it (on the digits test set's 60 s recordings: 5.82 % WER against 3.46 % from the middle of the
pause; docs/long-recordings.md). The input's leading silence runs once: the detector starts from a zero state at the
input's start, so when its first non-blank frame comes within ``pad`` of the start it *is* the first segment, its
output taken as it is. A segment that hears no speech for ``pad + min_silence`` (a false start) is dropped and the
wait goes on. A segment is given as ending ``min_silence / 2`` after its pause began.

Each segment's end is found by the segment's own network (run from a zero state at its start), and the next one's
start by the network that goes on listening: what the offline ``blank`` planner (:mod:`asrlib.decode.segment`),
which takes both from one pass over up to ``segment_max_seconds`` of audio, lacks (on 6000 dev utterances of the
digits recipe, 60 s recordings: +0.09 against +0.28-0.32 long minus per utterance; docs/long-recordings.md).

The network's calls (:class:`CallSizes`) are bounded, since a pause's rerun goes from the middle of the pause to the end
of the call that heard the next speech (audio given in one piece would otherwise run again from each pause to its end).
The streaming recogniser runs each chunk as it comes, in calls of at most ``ENDPOINT_RUN_SECONDS`` (until the first
segment has ended, ``ENDPOINT_FIRST_RUN_SECONDS``). The offline one holds the frames until a call's worth is there:
``first`` seconds until the first segment has ended (a short input, an utterance, runs in one call, as one stream
would), ``segment`` while a segment is decoded (its first call, the rerun from its start, made up to that from the
frames held) and ``waiting`` between segments. Fewer calls pay for longer reruns, so the sizes depend on what a call
costs the engine (its backend's ``endpoint_calls``): ``OFFLINE_CALLS`` (4 / 3 / 0.5 s) for torch's oneDNN LSTM, whose
call costs as much as about 52 output frames, ``OFFLINE_CHEAP_CALLS`` (4 / 1 / 0.3 s) for ONNX Runtime's, about 4
(`bench/network_calls.py`). Both chosen side by side with each utterance decoded as one stream (`bench/long_form.py
--calls`, the tables in docs/long-recordings.md). However they are called, the network runs each pause's second half
again, from a zero state (1.24x the audio's frames on the digits test set). The words and segments are the same however
the input is chunked and whatever the calls' sizes (or a subclass's plan: ``_call_end``). Memory is bounded by ``pad``
of kept frames and a call's (and the held frames, fewer than a call's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional, Protocol, Tuple

import numpy as np

from asrlib.errors import AsrError

ENDPOINT_RUN_SECONDS = 1.0  # the most audio the network runs over in one call (module docstring)
ENDPOINT_FIRST_RUN_SECONDS = 4.0  # the same until the first segment ends (a short input: one call)


@dataclass(frozen=True)
class CallSizes:
    """How much of the input the network runs over in one call (seconds; module docstring): ``first`` until the
    first segment has ended, then ``segment`` while a segment is decoded (a segment's first call, which runs again
    from its start, is made up to it from the frames held) and ``waiting`` between segments. ``hold``: frames wait
    until there is a call's worth (an offline input, whose next frames are already there); else each input chunk
    runs as it comes (a stream: no added latency), in calls of at most these sizes."""

    first: float = ENDPOINT_FIRST_RUN_SECONDS
    segment: float = ENDPOINT_RUN_SECONDS
    waiting: float = ENDPOINT_RUN_SECONDS
    hold: bool = False


#: the offline recogniser's calls (asr transcribe; the input's next frames are there: module docstring) on a network
#: whose call costs much (torch's oneDNN LSTM: 3.3 ms, as much as ~52 output frames, on the digits model)
OFFLINE_CALLS = CallSizes(first=4.0, segment=3.0, waiting=0.5, hold=True)
#: the same on a network whose call costs little (ONNX Runtime's int8 network: 0.09 ms, ~4 output frames)
OFFLINE_CHEAP_CALLS = CallSizes(first=4.0, segment=1.0, waiting=0.3, hold=True)


class NetworkStream(Protocol):
    """A network run from a zero state, its state carried from call to call. A network whose output lags its input
    (an LC-BLSTM's chunks wait for their right context) returns fewer frames from ``accept``, has ``finish()`` (end of
    input: the rest) and says by ``lag`` how many output frames it may hold back at most."""

    def accept(self, feats: np.ndarray) -> np.ndarray:
        """Raw fbank ``[n, num_mel_bins]`` (a whole number of stacks) → log-probs ``[n // stack, V]`` (a lagging
        network: the next frames of its output, maybe fewer)."""


class _Net:
    """A network stream and where its output belongs: ``origin``, the output frame of the input where its input
    began, and the frames it has output (so its next output frame is ``origin + emitted``, whatever its lag)."""

    def __init__(self, stream: NetworkStream) -> None:
        self.stream, self.origin, self.emitted, self.finished = stream, -1, 0, False

    def accept(self, frames: np.ndarray, start: int) -> Tuple[np.ndarray, int]:
        """Run ``frames``, which begin at output frame ``start`` of the input → (scores, the output frame of the input
        that they begin at)."""
        if self.origin < 0:
            self.origin = start
        first = self.origin + self.emitted
        scores = self.stream.accept(frames)
        self.emitted += len(scores)
        return scores, first

    def finish(self) -> Tuple[Optional[np.ndarray], int]:
        """End of input: a lagging network's last scores (None for one that does not lag or has finished)."""
        first = self.origin + self.emitted
        fin = getattr(self.stream, "finish", None)
        if fin is None or self.finished or self.origin < 0:
            return None, first
        self.finished = True
        scores = fin()
        self.emitted += len(scores)
        return scores, first


class SegmentSink(Protocol):
    """What the endpointer hands each segment's frames to (a search) and tells where each segment ends."""

    def decode(self, scores: np.ndarray) -> None:
        """The current segment's next log-probs (maybe none)."""

    def end_segment(self, start: int, end: int) -> None:
        """The current segment, from output frame ``start`` of the input, is over (``end``: the frame given as its
        end); the next ``decode`` begins a new one."""


@dataclass
class EndpointRules:
    """Where segments end and the next ones begin (module docstring); seconds of network output frames."""

    min_silence: float = 0.6  # a pause (blank run) this long after speech ends a segment (sherpa-onnx 1.2 s)
    pad: float = 2.0  # the most of a pause kept before a segment's first speech (the offline ``segment_pad``)
    max_segment: float = 20.0  # no segment is longer (sherpa-onnx and Kaldi online2: 20 s)

    def __post_init__(self) -> None:
        if not (0 < self.min_silence < self.max_segment and self.pad >= self.min_silence / 2):
            raise AsrError(
                f"endpoint rules need 0 < min_silence < max_segment and pad >= min_silence / 2, got min_silence "
                f"{self.min_silence}, pad {self.pad}, max_segment {self.max_segment}"
            )

    @classmethod
    def of_decode(
        cls, decode: Mapping[str, object], even_if_off: bool = False, **overrides: Optional[float]
    ) -> Optional["EndpointRules"]:
        """The rules of ``decode`` settings (a recipe's ``decode:`` or a bundle's; DecodeConfig's defaults where
        it has none), each of ``overrides`` (``segment_min_silence``, ``segment_pad``, ``segment_max_seconds``;
        None: the settings') in place of the settings'; None when ``segment`` is ``none``, unless ``even_if_off``
        (the user asked for endpointing)."""
        from asrlib.config import SEGMENT_PAUSE_KEYS, DecodeConfig

        dflt = DecodeConfig()
        unknown = set(overrides) - set(SEGMENT_PAUSE_KEYS)
        if unknown:
            raise TypeError(f"unknown endpoint settings {sorted(unknown)}")

        def get(k: str) -> float:
            v = overrides.get(k)
            return float(decode.get(k, getattr(dflt, k)) if v is None else v)

        if decode.get("segment", dflt.segment) == "none" and not even_if_off:
            return None
        return cls(
            get("segment_min_silence"),
            max(get("segment_pad"), get("segment_min_silence") / 2),
            get("segment_max_seconds"),
        )

    @classmethod
    def of_bundle(cls, bundle, even_if_off: bool = False, **overrides: Optional[float]) -> Optional["EndpointRules"]:
        """:meth:`of_decode` of a mobile bundle's ``decode`` settings (``bundle.info["decode"]``)."""
        return cls.of_decode(bundle.info.get("decode", {}), even_if_off, **overrides)


class Endpointer:
    """One input cut into segments by :class:`EndpointRules` (module docstring). Feed it the input's fbank frames
    in whole stacks (:meth:`accept`), then :meth:`finish`; the ``sink`` receives each segment's log-probs and end."""

    def __init__(
        self,
        rules: EndpointRules,
        stack: int,
        feat_dim: int,
        frame_seconds: float,
        new_stream: Callable[[], NetworkStream],
        sink: SegmentSink,
        calls: CallSizes = CallSizes(),
    ) -> None:
        self.rules, self.stack, self.frame_seconds = rules, int(stack), float(frame_seconds)
        self._new_stream, self.sink, self.calls = new_stream, sink, calls
        self.held = np.zeros((0, feat_dim), np.float32)  # input frames not run yet (``calls.hold``)
        self.frames_used = 0  # fbank frames of the input received
        self.network_frames = 0  # fbank frames the network has run over, the detector's and reruns' included
        self.state = self.new_stream()  # the current segment's network
        self.lag = int(getattr(self.state.stream, "lag", 0))  # output frames a network may hold back
        self.segment_start = 0  # output frame of the input where the current segment begins
        self.segment_frames = 0  # output frames decoded in the current segment
        self.trailing_silence = 0  # output frames of blank at the end of the current segment
        self.heard_speech = False  # a non-blank best token in the current segment
        # Between segments the endpointer *waits* for speech, watching the output of the network with the state it
        # had (the detector), and keeps the last ``pad`` seconds of fbank frames to start the next one from.
        self.waiting = True
        self.detector = self.state
        self.detector_frames = 0  # output frames the detector has run since its state was last zeroed
        # While the detector runs from a zero state from the input's start and has not run over more than ``pad``,
        # it can become the first segment: its output so far is kept.
        self.from_start = True
        self.detector_scores: List[np.ndarray] = []
        self.pause_start = 0  # output frame of the input where the pause being waited out began
        self.after_segment = False  # that pause follows a segment (else it is the input's leading silence)
        self.pad = self._frames(rules.pad)  # in output frames
        self.recent = np.zeros((0, feat_dim), np.float32)  # the input's last fbank frames
        self.segments_ended = 0
        self.speech_at = -1  # output frame of the input of the last segment's first speech (its detection)
        self.finished = False

    def new_stream(self) -> _Net:
        return _Net(self._new_stream())

    def _frames(self, seconds: float) -> int:
        return int(round(seconds / self.frame_seconds))

    def accept(self, frames: np.ndarray) -> None:
        """The input's next fbank frames (a whole number of stacks), run in calls of :class:`CallSizes`."""
        if self.finished:
            raise AsrError("internal error: frames after the end of the input")
        if len(frames) % self.stack:
            raise AsrError(f"internal error: {len(frames)} fbank frames are not whole stacks of {self.stack}")
        frames = np.asarray(frames, np.float32)
        self.held = np.concatenate([self.held, frames]) if len(self.held) else frames
        self._run_held(final=not self.calls.hold)

    def finish(self) -> None:
        """End of input: the frames held run, and the segment being decoded (if any) ends with it."""
        if not self.finished:
            self._run_held(final=True)
            self._flush()
            if not self.waiting and self.segment_frames:
                self._end_segment(self.segment_start + self.segment_frames)
            self.finished = True

    def _call_end(self, start: int) -> int:
        """The input's fbank frame where a call from input fbank frame ``start`` ends (:class:`CallSizes`; a
        subclass may plan its calls otherwise: the words and segments are the same)."""
        c = self.calls
        seconds = c.first if self.segments_ended == 0 else c.waiting if self.waiting else c.segment
        return start + max(1, self._frames(seconds)) * self.stack

    def _run_held(self, final: bool) -> None:
        """Run the frames held, a call's worth at a time; the last ones, short of a call, only when ``final``."""
        while len(self.held):
            n = max(self.stack, self._call_end(self.frames_used) - self.frames_used)
            if len(self.held) < n and not final:
                return
            pending, self.held = self.held[:n], self.held[n:]
            self._run(pending)

    def _admit(self, frames: np.ndarray, pending: int) -> None:
        """``frames`` of the input join the call being run (``pending`` fbank frames of it, theirs included):
        counted, and kept in ``recent`` with the ``pad`` before the call."""
        self.frames_used += len(frames)
        self.recent = np.concatenate([self.recent, frames])[-(self.pad + 1 + self.lag) * self.stack - pending :]

    def _run(self, pending: np.ndarray) -> None:
        self._admit(pending, len(pending))
        self._loop(pending)

    def _flush(self) -> None:
        """End of input for a lagging network: the last scores of the network listening, and of any segment that
        they start, in turn."""
        while True:
            net = self.detector if self.waiting else self.state
            scores, first = net.finish()
            if scores is None:
                return
            self._loop(self._watch(scores, first) if self.waiting else self._take(scores, first))

    def _loop(self, pending: np.ndarray) -> None:
        """Run ``pending``, the input's last fbank frames (received), and the frames that each result asks to run."""
        stack = self.stack
        while len(pending):  # the input's last frames, in the current mode
            if not self.waiting and self.calls.hold and len(self.held):  # a segment's first call: up to a call
                more = self.held[: max(0, self._call_end(self.frames_used - len(pending)) - self.frames_used)]
                if len(more):
                    self.held = self.held[len(more) :]
                    pending = np.concatenate([pending, more])
                    self._admit(more, len(pending))
            self.network_frames += len(pending)
            start = self.frames_used // stack - len(pending) // stack  # output frame of the input of pending[0]
            if self.waiting:
                pending = self._watch(*self.detector.accept(pending, start))
            else:
                pending = self._take(*self.state.accept(pending, start))

    def _decode(self, scores: np.ndarray) -> None:
        self.sink.decode(scores)
        self.segment_frames += len(scores)

    def _take(self, scores: np.ndarray, first: int) -> np.ndarray:
        """The current segment's next output ``scores``, from output frame ``first`` of the input. Returns the fbank
        frames still to run (in the mode that follows)."""
        rule, cut = self._endpoint(scores)
        self._decode(scores[:cut])
        if rule is None:
            return self.recent[:0]
        if rule == "length":  # the frames after the cut (those received): again, from a zero state
            self._end_segment(first + cut)
            return self.recent[(first + cut - self._oldest()) * self.stack :]
        # a pause: wait for the next speech
        if rule == "pause":
            self.pause_start, self.after_segment = first + cut - self.trailing_silence, True
        detector = self.state  # has run over all of these frames
        self._end_segment(min(first + cut, self.pause_start + self._frames(self.rules.min_silence) // 2))
        self.waiting, self.detector, self.detector_frames = True, detector, len(scores)
        return self._watch(scores[cut:], first + cut)

    def _oldest(self) -> int:
        """The output frame of the input that ``recent`` begins at."""
        return self.frames_used // self.stack - len(self.recent) // self.stack

    def _endpoint(self, scores: np.ndarray) -> Tuple[Optional[str], Optional[int]]:
        """Which rule ends the current segment within ``scores`` (its next frames), and the first frame after
        it; (None, None) when none does. Advances the silence / speech counts over the frames up to there."""
        rules, fs = self.rules, self.frame_seconds
        length = self.segment_frames
        for i, tok in enumerate(np.argmax(scores, axis=1)):
            length += 1
            if tok == 0:
                self.trailing_silence += 1
            else:
                self.trailing_silence, self.heard_speech = 0, True
            silence = self.trailing_silence * fs
            if self.heard_speech and silence >= rules.min_silence:
                return "pause", i + 1
            if not self.heard_speech and silence >= rules.pad + rules.min_silence:
                return "no speech", i + 1  # a false start: the pause goes on
            if (length + 1) * fs > rules.max_segment + 1e-9:  # the next frame would make it too long
                return "length", i + 1
        return None, None

    def _watch(self, scores: np.ndarray, first: int) -> np.ndarray:
        """Waiting: ``scores`` are the detector's output from input frame ``first`` on. At its first non-blank
        frame ``b`` the next segment starts: the detector itself, with its output so far, when it runs from a
        zero state from the input's start and ``b`` is at most ``pad`` after that; else, from a zero state, in
        the middle of the pause (at most ``pad`` before ``b``; the input's leading silence: ``pad`` before
        ``b``). Returns the fbank frames to run in the segment (from its start to the last frame received, which
        the detector ran over), or none (still waiting, or the detector's output taken)."""
        speech = np.flatnonzero(np.argmax(scores, axis=1) != 0)
        if self.from_start:
            self.detector_scores.append(scores)
        if not len(speech):
            self.detector_frames += len(scores)
            if self.from_start and first + len(scores) > self.pad:
                self.from_start, self.detector_scores = False, []  # too much silence before the first segment
            if self.detector_frames * self.frame_seconds > self.rules.max_segment:
                self.detector, self.detector_frames = self.new_stream(), 0  # bounded state age
                self.from_start, self.detector_scores = False, []
            return self.recent[:0]
        a, b, oldest, stack = self.pause_start, first + int(speech[0]), self._oldest(), self.stack
        self.speech_at = b
        from_start, self.from_start, self.waiting = self.from_start, False, False
        got, self.detector_scores = self.detector_scores, []
        if from_start and oldest == 0 and b <= self.pad:
            self.segment_start, self.state = 0, self.detector
            return self._take(np.concatenate(got), 0)
        start = (a + b) // 2 if self.after_segment and b - a <= 2 * self.pad else max(a, b - self.pad)
        start = max(start, oldest)
        self.segment_start, self.state = start, self.new_stream()
        return self.recent[(start - oldest) * stack :]

    def _end_segment(self, end: int) -> None:
        """Close the current segment (``end``: the output frame given as its end) and start the next from a zero
        network state."""
        self.sink.end_segment(self.segment_start, end)
        self.segments_ended += 1
        self.segment_start, self.segment_frames = end, 0
        self.trailing_silence, self.heard_speech = 0, False
        self.state = self.new_stream()
