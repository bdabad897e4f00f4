"""A chunked (streaming) recogniser on a mobile bundle: audio in any chunk sizes, words out as it goes.

Pipeline per stream:

1. **Front end**: kaldi-native-fbank's ``OnlineFbank`` with the bundle's settings (those of the feature stage and of
   sherpa-onnx). It emits a frame as soon as its 25 ms window is complete; the last frames (whose window is
   reflected at the end, ``snip_edges=false``) come when :meth:`Stream.finish` says the input has ended. Whole
   or chunked, the frames are identical.
2. **Network**: ``model.streaming.int8.onnx`` on every complete group of ``subsampling`` frames available, carrying
   the LSTM state (h, c) from call to call. A unidirectional LSTM has no look-ahead, so the log-probs equal those of
   one pass over the whole utterance (up to float rounding of matrix products of different sizes).
3. **Search**: kaldi-decoder's ``FasterDecoder`` over ``TLG.fst``, advanced frame-synchronously with the new
   log-probs (``DecodableCtc`` with a frame offset). Frame-synchronous beam search over the same scores visits the
   same tokens whether the frames come at once or in chunks, so the final words equal whole-utterance decoding
   (:func:`recognize_whole` — checked by tests/test_export_streaming.py).

Latency of a chunk = chunk duration (buffering) + processing time of the chunk + the front end's look-ahead
(15 ms: the rest of a 25 ms window) + up to (subsampling − 1) × 10 ms waiting for a full stack.

**Endpointing** (``endpoint``: :class:`EndpointRules`, off by default as in sherpa-onnx's Python API): a long input
(a meeting, a voicemail box) is cut into *segments*, each decoded from a zero network state (LSTM and online CMN)
and a fresh search, as the offline recogniser's ``decode.segment`` does (:mod:`asrlib.decode.segment`), so the
network never carries its state across more audio than it was trained on. Silence = a run of frames whose best
token is the CTC blank. A segment ends when, after some speech, the silence has lasted ``min_silence`` (sherpa-onnx's
and Kaldi online2's rule 2), or when it reaches ``max_segment`` (rule 3; the frames after the cut run again from a
zero state). After a pause the stream *waits*: the network goes on with its old state as a detector, and the last
``pad`` seconds of fbank frames are kept. Its first non-blank frame ``b`` starts the next segment, from a zero
state, in the middle of the pause (at most ``pad`` before ``b``; before the input's first speech, ``pad`` before
``b``), and the kept frames from there on run again. Where it starts matters: a unidirectional CTC model emits a
word's token after the word, so the blank run that follows an utterance lasts until the next one's first word is
over, and a segment started where the endpoint fired (``min_silence`` into that run) often began inside that word
and lost it (on the digits test set's 60 s recordings: 5.82 % WER against 3.46 % from the middle of the pause;
docs/long-recordings.md). The input's leading silence runs once: the detector starts from a zero state at the
input's start, so when its first non-blank frame comes within ``pad`` of the start it *is* the first segment, its
output taken as it is. A segment that hears no speech for ``pad + min_silence`` (a false start) is dropped and the
wait goes on. :meth:`Stream.finish` returns the words of every segment in order; :attr:`Stream.segments` has each
one's words and times (a segment ends ``min_silence / 2`` after its pause began). A bundle's ``decode`` settings
(``segment_min_silence``, ``segment_pad``, ``segment_max_seconds``; :meth:`EndpointRules.of_bundle`) give the rules
that the offline recogniser uses on it. Memory is bounded: the front end forgets the frames it has given to the
network.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, List, Optional, Tuple

import numpy as np

from asrlib.decode.search_scores import apply_search
from asrlib.export.bundle import SHERPA_BEAM, SHERPA_MAX_ACTIVE, Bundle, check_audio, check_bundle
from asrlib.export.runtime import StreamingOnnxModel
from asrlib.errors import AsrError, PathLike

ENDPOINT_RUN_SECONDS = 1.0  # with endpointing, the most audio the network runs over in one call (see Stream._advance)


def fbank_options(sample_rate: int, num_mel_bins: int):
    """kaldi-native-fbank options equal to the feature stage (lhotse FbankConfig defaults) and sherpa-onnx."""
    import kaldi_native_fbank as knf

    o = knf.FbankOptions()
    o.frame_opts.samp_freq = float(sample_rate)
    o.frame_opts.dither = 0.0
    o.frame_opts.snip_edges = False
    o.frame_opts.frame_shift_ms = 10.0
    o.frame_opts.frame_length_ms = 25.0
    o.frame_opts.window_type = "povey"
    o.frame_opts.preemph_coeff = 0.97
    o.frame_opts.remove_dc_offset = True
    o.mel_opts.num_bins = int(num_mel_bins)
    o.mel_opts.low_freq = 20.0
    o.mel_opts.high_freq = -400.0
    o.use_energy = False
    return o


def compute_fbank(samples: np.ndarray, sample_rate: int, num_mel_bins: int) -> np.ndarray:
    """Whole-utterance fbank (T, num_mel_bins) with :func:`fbank_options`."""
    import kaldi_native_fbank as knf

    f = knf.OnlineFbank(fbank_options(sample_rate, num_mel_bins))
    f.accept_waveform(float(sample_rate), np.asarray(samples, np.float32))
    f.input_finished()
    n = f.num_frames_ready
    if n == 0:
        return np.zeros((0, num_mel_bins), np.float32)
    return np.stack([f.get_frame(i) for i in range(n)]).astype(np.float32)


@dataclass
class ChunkTiming:
    samples: int
    seconds: float


@dataclass
class EndpointRules:
    """Where a stream's segments end and the next ones begin (module docstring); seconds of network output frames."""

    min_silence: float = (
        0.6  # a pause (blank run) this long after speech ends a segment (sherpa-onnx 1.2 s, Kaldi 0.5-2 s)
    )
    pad: float = 2.0  # the most of a pause kept before a segment's first speech (the offline ``segment_pad``)
    max_segment: float = 20.0  # no segment is longer (sherpa-onnx and Kaldi online2: 20 s)

    def __post_init__(self) -> None:
        if not (0 < self.min_silence < self.max_segment and self.pad >= self.min_silence / 2):
            raise AsrError(
                f"endpoint rules need 0 < min_silence < max_segment and pad >= min_silence / 2, got min_silence "
                f"{self.min_silence}, pad {self.pad}, max_segment {self.max_segment}"
            )

    @classmethod
    def of_bundle(
        cls, bundle: Bundle, even_if_off: bool = False, **overrides: Optional[float]
    ) -> Optional["EndpointRules"]:
        """The rules of a bundle's ``decode`` settings (those of the offline recogniser, DecodeConfig's defaults
        where the bundle has none), each of ``overrides`` (``segment_min_silence``, ``segment_pad``,
        ``segment_max_seconds``; None: the bundle's) in place of the bundle's; None when its ``segment`` is
        ``none``, unless ``even_if_off`` (the user asked for endpointing)."""
        from asrlib.config import SEGMENT_PAUSE_KEYS, DecodeConfig

        d, dflt = bundle.info.get("decode", {}), DecodeConfig()
        unknown = set(overrides) - set(SEGMENT_PAUSE_KEYS)
        if unknown:
            raise TypeError(f"unknown endpoint settings {sorted(unknown)}")

        def get(k: str) -> float:
            v = overrides.get(k)
            return float(d.get(k, getattr(dflt, k)) if v is None else v)

        if d.get("segment", dflt.segment) == "none" and not even_if_off:
            return None
        return cls(
            get("segment_min_silence"),
            max(get("segment_pad"), get("segment_min_silence") / 2),
            get("segment_max_seconds"),
        )


@dataclass
class StreamSegment:
    """A finished segment of a stream: its words and the seconds of input it covers; for word times, its best path:
    the token of each output frame decoded (0: blank) from the stream's output frame ``first`` on, and that token's
    posterior (not compared by ``==``)."""

    start: float
    end: float
    words: List[str]
    first: int = 0
    tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False, compare=False)
    posteriors: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32), repr=False, compare=False)


class StreamingRecognizer:
    """Loads a bundle once; :meth:`new_stream` starts an utterance. ``model`` = "int8" or a path to another
    streaming ONNX model with the same signature (e.g. fp32, for comparisons). ``acoustic_scale``,
    ``blank_penalty``: the search's; None: the bundle's ``decode`` settings (the recipe's, which its networks'
    output carries for sherpa-onnx: the same search as sherpa-onnx's on the bundle)."""

    def __init__(
        self,
        bundle_dir: PathLike,
        model: str = "int8",
        num_threads: int = 1,
        beam: float = SHERPA_BEAM,
        max_active: int = SHERPA_MAX_ACTIVE,
        acoustic_scale: Optional[float] = None,
        blank_penalty: Optional[float] = None,
        endpoint: Optional[EndpointRules] = None,
    ):
        from asrlib.kaldi_imports import kaldi_decoder

        from asrlib.lang.graphs import read_fst

        self.bundle: Bundle = check_bundle(bundle_dir)
        path = self.bundle.path("model.streaming.int8.onnx") if model == "int8" else Path(model)
        self.model = StreamingOnnxModel(path, self.bundle.feat_dim, num_threads)
        self.stack = self.bundle.subsampling
        self.id2word = self.bundle.id2word()
        self.graph = read_fst(self.bundle.path("TLG.fst"))
        self.decoder_opts = kaldi_decoder.FasterDecoderOptions(beam=float(beam), max_active=int(max_active))
        # the search: the bundle's (the recipe's decode settings, folded into its networks' output, so what
        # sherpa-onnx does on it) unless given; the network's output is unfolded to log-probs (StreamingOnnxModel)
        dec = self.bundle.info.get("decode", {})
        self.acoustic_scale = float(dec.get("acoustic_scale", 1.0) if acoustic_scale is None else acoustic_scale)
        self.blank_penalty = float(dec.get("blank_penalty", 0.0) if blank_penalty is None else blank_penalty)
        self.endpoint = endpoint
        self.frame_seconds = self.stack * 0.01  # output frame: subsampling fbank frames of 10 ms

    def new_stream(self) -> "Stream":
        return Stream(self)

    def recognize(self, samples: np.ndarray, sample_rate: int, chunk_samples: Optional[int] = None) -> List[str]:
        """Feed ``samples`` in chunks of ``chunk_samples`` (all at once when None) and return the final words."""
        x = check_audio(samples, sample_rate, self.bundle.sample_rate)
        step = chunk_samples or max(1, len(x))
        return self.recognize_blocks((x[i : i + step] for i in range(0, len(x), step)), sample_rate).finish()

    def recognize_blocks(
        self, blocks: Iterable[np.ndarray], sample_rate: int, progress: Optional[Callable[[float], object]] = None
    ) -> "Stream":
        """Feed ``blocks``, the successive pieces of one input (e.g. a file read block by block), to a new stream
        and finish it. Returns the stream: its words (``finish()``), its segments, and its processing time and
        samples per block (``timings``). ``progress`` is called with each block's seconds."""
        s = self.new_stream()
        for x in blocks:
            s.accept_waveform(sample_rate, x)
            if progress is not None:
                progress(len(x) / sample_rate)
        s.finish()
        return s


class Stream:
    """One utterance being recognised, or a long input in segments with endpointing (see the module docstring)."""

    def __init__(self, rec: StreamingRecognizer):
        from asrlib.kaldi_imports import kaldi_decoder
        import kaldi_native_fbank as knf

        self.rec = rec
        b, ep = rec.bundle, rec.endpoint
        self.fbank = knf.OnlineFbank(fbank_options(b.sample_rate, b.feat_dim))
        self.frames_used = 0  # fbank frames given to the network (the front end forgets them)
        self.network_frames = 0  # fbank frames the network has run over, the detector's and reruns' included
        self.state = rec.model.zero_state()  # LSTM (h, c) [+ online CMN's running sum and count]
        self.decoder = kaldi_decoder.FasterDecoder(rec.graph, rec.decoder_opts)
        self.decoder.init_decoding()
        self.frames_decoded = 0  # network output frames searched in the current segment
        self.segments: List[StreamSegment] = []  # finished segments (endpointing), in order
        self.segment_start = 0  # output frame of the stream where the current segment begins
        self.trailing_silence = 0  # output frames of blank at the end of the current segment
        self.heard_speech = False  # a non-blank best token in the current segment
        # Endpointing: between segments the stream *waits* for speech, watching the network's output with the
        # state it had (the detector), and keeps the last ``pad`` seconds of fbank frames to start the next one from.
        self.waiting = ep is not None
        self.detector = self.state
        self.detector_frames = 0  # output frames the detector has run since its state was last zeroed
        # While the detector runs from a zero state from the input's start and has not run over more than ``pad``,
        # it can become the first segment: its output so far is kept.
        self.from_start = ep is not None
        self.detector_scores: List[np.ndarray] = []
        self.pause_start = 0  # output frame of the stream where the pause being waited out began
        self.after_segment = False  # that pause follows a segment (else it is the input's leading silence)
        self.pad = int(round(ep.pad / rec.frame_seconds)) if ep else 0  # in output frames
        self.recent = np.zeros((0, b.feat_dim), np.float32)  # the stream's last fbank frames (endpointing)
        self.finished = False
        self.timings: List[ChunkTiming] = []
        self.logprobs: List[np.ndarray] = []  # the current segment's log-probs, for tests / inspection (T' × V)

    def accept_waveform(self, sample_rate: int, samples: np.ndarray) -> None:
        """Add audio; runs the network and the search on every complete stack of frames now available."""
        if self.finished:
            raise AsrError("this stream is finished; start a new one with new_stream()")
        t0 = time.perf_counter()
        x = check_audio(samples, sample_rate, self.rec.bundle.sample_rate)
        self.fbank.accept_waveform(float(sample_rate), x)
        self._advance()
        self.timings.append(ChunkTiming(len(x), time.perf_counter() - t0))

    def _advance(self) -> None:
        stack = self.rec.stack
        ready = self.fbank.num_frames_ready
        n = (ready - self.frames_used) // stack * stack
        if n <= 0:
            return
        frames = np.stack([self.fbank.get_frame(i) for i in range(self.frames_used, self.frames_used + n)])
        self.fbank.pop(n)  # memory stays bounded on long inputs
        if self.rec.endpoint is None:
            self._run(frames)
            return
        # endpointing: at most ENDPOINT_RUN_SECONDS at a time, since a pause's rerun goes to the end of the frames
        # run (a whole file given at once would otherwise run again from each pause to its end); chunks up to that
        # long run as they come. Same words and segments either way.
        step = max(1, self._frames(ENDPOINT_RUN_SECONDS)) * stack
        for i in range(0, n, step):
            self._run(frames[i : i + step])

    def _run(self, pending: np.ndarray) -> None:
        """Run the network (and search, endpointing) over ``pending``, the stream's next fbank frames."""
        stack = self.rec.stack
        self.frames_used += len(pending)
        if self.rec.endpoint is not None:
            self.recent = np.concatenate([self.recent, pending])[-(self.pad + 1) * stack - len(pending) :]
        while len(pending):  # the stream's last frames, in the current mode
            self.network_frames += len(pending)
            first = self.frames_used // stack - len(pending) // stack  # output frame of the stream of pending[0]
            if self.waiting:
                scores, self.detector = self.rec.model.run(pending, self.detector)
                pending = self._watch(scores, first)
            else:
                scores, self.state = self.rec.model.run(pending, self.state)
                pending = self._take(scores, pending, first)

    def _take(self, scores: np.ndarray, pending: np.ndarray, first: int) -> np.ndarray:
        """The current segment's next output ``scores``, of the fbank frames ``pending`` from stream frame
        ``first``: search and endpointing. Returns the fbank frames still to run (in the mode that follows)."""
        rule, cut = self._endpoint(scores) if self.rec.endpoint is not None else (None, None)
        self._decode(scores[:cut])
        if rule is None:
            return pending[:0]
        if rule == "length":  # the frames after the cut: again, from a zero state
            self._end_segment(first + cut)
            return pending[cut * self.rec.stack :]
        # a pause: wait for the next speech
        if rule == "pause":
            self.pause_start, self.after_segment = first + cut - self.trailing_silence, True
        detector = self.state  # has run over all of these frames
        self._end_segment(min(first + cut, self.pause_start + self._frames(self.rec.endpoint.min_silence) // 2))
        self.waiting, self.detector, self.detector_frames = True, detector, len(scores)
        return self._watch(scores[cut:], first + cut)

    def _oldest(self) -> int:
        """The output frame of the stream that ``recent`` begins at."""
        return self.frames_used // self.rec.stack - len(self.recent) // self.rec.stack

    def _frames(self, seconds: float) -> int:
        return int(round(seconds / self.rec.frame_seconds))

    def _decode(self, scores: np.ndarray) -> None:
        from asrlib.kaldi_imports import kaldi_decoder

        self.logprobs.append(scores)
        scores = apply_search(scores, self.rec.acoustic_scale, self.rec.blank_penalty)
        if len(scores):
            self.decoder.advance_decoding(kaldi_decoder.DecodableCtc(scores, offset=self.frames_decoded))
            self.frames_decoded += scores.shape[0]

    def _endpoint(self, scores: np.ndarray) -> Tuple[Optional[str], Optional[int]]:
        """Which rule ends the current segment within ``scores`` (its next frames), and the first frame after
        it; (None, None) when none does. Advances the silence / speech counts over the frames up to there."""
        rules, fs = self.rec.endpoint, self.rec.frame_seconds
        length = self.frames_decoded
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
        """Waiting: ``scores`` are the detector's output from stream frame ``first`` on. At its first non-blank
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
            if self.detector_frames * self.rec.frame_seconds > self.rec.endpoint.max_segment:
                self.detector, self.detector_frames = self.rec.model.zero_state(), 0  # bounded state age
                self.from_start, self.detector_scores = False, []
            return self.recent[:0]
        a, b, oldest, stack = self.pause_start, first + int(speech[0]), self._oldest(), self.rec.stack
        from_start, self.from_start, self.waiting = self.from_start, False, False
        got, self.detector_scores = self.detector_scores, []
        if from_start and oldest == 0 and b <= self.pad:
            self.segment_start, self.state = 0, self.detector
            return self._take(np.concatenate(got), self.recent, 0)
        start = (a + b) // 2 if self.after_segment and b - a <= 2 * self.pad else max(a, b - self.pad)
        start = max(start, oldest)
        self.segment_start, self.state = start, self.rec.model.zero_state()
        return self.recent[(start - oldest) * stack :]

    def _end_segment(self, end: int) -> None:
        """Close the current segment (kept if it has words; ``end``: the output frame given as its end) and reset
        the search and the network state for the next."""
        seg = self._segment_of(end)
        if seg is not None:
            self.segments.append(seg)
        self.segment_start, self.frames_decoded, self.logprobs = end, 0, []
        self.trailing_silence, self.heard_speech = 0, False
        self.state = self.rec.model.zero_state()
        self.decoder.init_decoding()

    def _segment_of(self, end: int) -> Optional[StreamSegment]:
        """The segment decoded so far (from ``segment_start``; ``end``: the output frame given as its end) with its
        best path, or None when it has no words."""
        words, labels = self._best_path(use_final=True)
        if not words:
            return None
        lp = self.all_logprobs()
        # TLG input label = token id + 1, one per frame (else: the frames' best tokens, for approximate times)
        tokens = np.asarray(labels, np.int64) - 1 if len(labels) == len(lp) else np.argmax(lp, axis=1)
        post = np.exp(lp[np.arange(len(lp)), tokens]).astype(np.float32)
        fs = self.rec.frame_seconds
        return StreamSegment(
            round(self.segment_start * fs, 3), round(end * fs, 3), words, self.segment_start, tokens, post
        )

    def _best_path(self, use_final: bool) -> Tuple[List[str], List[int]]:
        """The current segment's best words and its input labels, one per frame decoded ([] and [] if none)."""
        from asrlib.kaldi_imports import kaldifst

        if self.frames_decoded == 0:
            return [], []
        ok, lattice = self.decoder.get_best_path(use_final_probs=use_final)
        if not ok:
            return [], []
        ok, ilabels, olabels, _ = kaldifst.get_linear_symbol_sequence(lattice)
        return ([self.rec.id2word[w] for w in olabels], list(ilabels)) if ok else ([], [])

    def _best_words(self, use_final: bool) -> List[str]:
        return self._best_path(use_final)[0]

    def partial(self) -> List[str]:
        """The best words so far: the finished segments' and the current one's (not using final-state weights)."""
        return [w for seg in self.segments for w in seg.words] + self._best_words(use_final=False)

    def finish(self) -> List[str]:
        """End of input: flush the front end's last frames, run them, return the final words of every segment
        (frames that do not fill a last stack are dropped, as in training)."""
        if not self.finished:
            t0 = time.perf_counter()
            self.fbank.input_finished()
            self._advance()
            if self.rec.endpoint is not None and not self.waiting and self.frames_decoded:
                self._end_segment(self.segment_start + self.frames_decoded)
            self.finished = True
            self.timings.append(ChunkTiming(0, time.perf_counter() - t0))
        if self.rec.endpoint is not None:
            return [w for seg in self.segments for w in seg.words]
        return self._best_words(use_final=True)

    def all_segments(self) -> List[StreamSegment]:
        """After :meth:`finish`: :attr:`segments`; without endpointing, the whole input as one segment (if it has
        words)."""
        if self.rec.endpoint is not None or not self.finished:
            return list(self.segments)
        seg = self._segment_of(self.frames_decoded)
        return [seg] if seg is not None else []

    def all_logprobs(self) -> np.ndarray:
        """The log-probs of the frames decoded (with endpointing: of the current segment's)."""
        return np.concatenate(self.logprobs) if self.logprobs else np.zeros((0, 0), np.float32)


def recognize_whole(
    bundle_dir: PathLike,
    samples: np.ndarray,
    sample_rate: int,
    model: Optional[PathLike] = None,
    beam: float = SHERPA_BEAM,
    max_active: int = SHERPA_MAX_ACTIVE,
) -> Tuple[List[str], np.ndarray]:
    """Whole-utterance reference: fbank of all samples → offline ONNX model (``model.int8.onnx`` unless
    ``model``) → TLG search over its output as it is, as sherpa-onnx searches it. Returns (words, log-probs)."""
    from asrlib.decode.search import TlgDecoder
    from asrlib.decode.search_scores import undo_search
    from asrlib.export.runtime import OnnxAcousticModel

    b = check_bundle(bundle_dir)
    x = check_audio(samples, sample_rate, b.sample_rate)
    feats = compute_fbank(x, b.sample_rate, b.feat_dim)
    am = OnnxAcousticModel(model or b.path("model.int8.onnx"))
    dec = TlgDecoder(_lang_view(b), beam=beam, max_active=max_active)
    out = am.scores(feats)  # searched as sherpa-onnx does: the output as it is
    return dec.decode(out), undo_search(out, *am.search)


def _lang_view(b: Bundle) -> Path:
    """The bundle dir serves as a lang dir for TlgDecoder (tokens.txt, words.txt, TLG.fst)."""
    return b.dir
