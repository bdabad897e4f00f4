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
network never carries its state across more audio than it was trained on. The rules are sherpa-onnx's three
endpoint rules (and Kaldi online2's), with silence = a run of frames whose best token is the CTC blank: a segment
ends when, after some speech, the silence has lasted ``min_silence`` (rule 2); when a segment has held nothing but
silence for ``max_silence`` (rule 1: the silence is dropped); or when it reaches ``max_segment`` (rule 3). The
frames after an endpoint are run again from the zero state. :meth:`Stream.finish` returns the words of every
segment in order; :attr:`Stream.segments` has each one's words and times. A bundle's ``decode`` settings
(``segment_min_silence``, ``segment_pad``, ``segment_max_seconds``; :meth:`EndpointRules.of_bundle`) give the
rules that the offline recogniser uses on it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np

from asrlib.export.bundle import SHERPA_BEAM, SHERPA_MAX_ACTIVE, Bundle, check_audio, check_bundle
from asrlib.export.runtime import StreamingOnnxModel
from asrlib.errors import AsrError, PathLike


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
    """When a stream ends a segment (module docstring); seconds of network output frames."""

    min_silence: float = 0.6  # rule 2: silence after speech that ends a segment (sherpa-onnx 1.2 s, Kaldi 0.5-2 s)
    max_silence: float = 2.0  # rule 1: a segment of nothing but silence is dropped after this (sherpa-onnx 2.4 s)
    max_segment: float = 20.0  # rule 3: no segment is longer (sherpa-onnx and Kaldi online2: 20 s)

    def __post_init__(self) -> None:
        if not (0 < self.min_silence and 0 < self.max_silence and self.min_silence < self.max_segment):
            raise AsrError(
                f"endpoint rules need 0 < min_silence < max_segment and max_silence > 0, got {self.min_silence}, "
                f"{self.max_silence}, {self.max_segment}"
            )

    @classmethod
    def of_bundle(cls, bundle: Bundle) -> Optional["EndpointRules"]:
        """The rules of a bundle's ``decode`` settings (those of the offline recogniser, DecodeConfig's defaults
        where the bundle has none); None when its ``segment`` is ``none``."""
        from asrlib.config import DecodeConfig

        d, dflt = bundle.info.get("decode", {}), DecodeConfig()
        get = lambda k: float(d.get(k, getattr(dflt, k)))  # noqa: E731
        if d.get("segment", dflt.segment) == "none":
            return None
        return cls(
            get("segment_min_silence"), max(get("segment_pad"), get("segment_min_silence")), get("segment_max_seconds")
        )


@dataclass
class StreamSegment:
    """A finished segment of a stream: its words and the seconds of input it covers."""

    start: float
    end: float
    words: List[str]


class StreamingRecognizer:
    """Loads a bundle once; :meth:`new_stream` starts an utterance. ``model`` = "int8" or a path to another
    streaming ONNX model with the same signature (e.g. fp32, for comparisons)."""

    def __init__(
        self,
        bundle_dir: PathLike,
        model: str = "int8",
        num_threads: int = 1,
        beam: float = SHERPA_BEAM,
        max_active: int = SHERPA_MAX_ACTIVE,
        acoustic_scale: float = 1.0,
        blank_penalty: float = 0.0,
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
        self.acoustic_scale, self.blank_penalty = float(acoustic_scale), float(blank_penalty)
        self.endpoint = endpoint
        self.frame_seconds = self.stack * 0.01  # output frame: subsampling fbank frames of 10 ms

    def new_stream(self) -> "Stream":
        return Stream(self)

    def recognize(self, samples: np.ndarray, sample_rate: int, chunk_samples: Optional[int] = None) -> List[str]:
        """Feed ``samples`` in chunks of ``chunk_samples`` (all at once when None) and return the final words."""
        s = self.new_stream()
        x = check_audio(samples, sample_rate, self.bundle.sample_rate)
        step = chunk_samples or max(1, len(x))
        for i in range(0, len(x), step):
            s.accept_waveform(sample_rate, x[i : i + step])
        return s.finish()


class Stream:
    """One utterance being recognised, or a long input in segments with endpointing (see the module docstring)."""

    def __init__(self, rec: StreamingRecognizer):
        from asrlib.kaldi_imports import kaldi_decoder
        import kaldi_native_fbank as knf

        self.rec = rec
        b = rec.bundle
        self.fbank = knf.OnlineFbank(fbank_options(b.sample_rate, b.feat_dim))
        self.frames_used = 0  # fbank frames given to the network
        self.state = rec.model.zero_state()  # LSTM (h, c) [+ online CMN's running sum and count]
        self.decoder = kaldi_decoder.FasterDecoder(rec.graph, rec.decoder_opts)
        self.decoder.init_decoding()
        self.frames_decoded = 0  # network output frames searched in the current segment
        self.segments: List[StreamSegment] = []  # finished segments (endpointing), in order
        self.segment_start = 0  # output frame of the stream where the current segment begins
        self.trailing_silence = 0  # output frames of blank at the end of the current segment
        self.heard_speech = False  # a non-blank best token in the current segment
        self.finished = False
        self.timings: List[ChunkTiming] = []
        self.logprobs: List[np.ndarray] = []  # kept for tests / inspection (small: T' × V)

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
        from asrlib.kaldi_imports import kaldi_decoder

        ready = self.fbank.num_frames_ready
        n = (ready - self.frames_used) // self.rec.stack * self.rec.stack
        if n <= 0:
            return
        feats = np.stack([self.fbank.get_frame(i) for i in range(self.frames_used, self.frames_used + n)])
        self.frames_used += n
        while len(feats):
            scores, self.state = self.rec.model.run(feats, self.state)
            cut = self._endpoint(scores) if self.rec.endpoint is not None else None
            if cut is not None:  # the frames after the endpoint: again, from a zero state
                scores, feats = scores[:cut], feats[cut * self.rec.stack :]
            else:
                feats = feats[:0]
            self.logprobs.append(scores)
            if self.rec.blank_penalty or self.rec.acoustic_scale != 1.0:
                scores = scores.copy()
                scores[:, 0] -= self.rec.blank_penalty
                scores *= self.rec.acoustic_scale
            if len(scores):
                self.decoder.advance_decoding(
                    kaldi_decoder.DecodableCtc(np.ascontiguousarray(scores, np.float32), offset=self.frames_decoded)
                )
                self.frames_decoded += scores.shape[0]
            if cut is not None:
                self._end_segment()

    def _endpoint(self, scores: np.ndarray) -> Optional[int]:
        """The first frame after an endpoint within ``scores`` (the current segment's next frames), else None;
        advances the silence / speech counts over the frames up to there."""
        rules, fs = self.rec.endpoint, self.rec.frame_seconds
        length = self.frames_decoded
        for i, tok in enumerate(np.argmax(scores, axis=1)):
            length += 1
            if tok == 0:
                self.trailing_silence += 1
            else:
                self.trailing_silence, self.heard_speech = 0, True
            silence = self.trailing_silence * fs
            if (
                (self.heard_speech and silence >= rules.min_silence)
                or (not self.heard_speech and silence >= rules.max_silence)
                or (length + 1) * fs > rules.max_segment + 1e-9  # the next frame would make it too long
            ):
                return i + 1
        return None

    def _end_segment(self) -> None:
        """Close the current segment (kept if it has words) and start the next from a zero state."""
        words = self._best_words(use_final=True)
        end = self.segment_start + self.frames_decoded
        if words:
            fs = self.rec.frame_seconds
            self.segments.append(StreamSegment(round(self.segment_start * fs, 3), round(end * fs, 3), words))
        self.segment_start, self.frames_decoded = end, 0
        self.trailing_silence, self.heard_speech = 0, False
        self.state = self.rec.model.zero_state()
        self.decoder.init_decoding()

    def _best_words(self, use_final: bool) -> List[str]:
        from asrlib.kaldi_imports import kaldifst

        if self.frames_decoded == 0:
            return []
        ok, lattice = self.decoder.get_best_path(use_final_probs=use_final)
        if not ok:
            return []
        ok, _, olabels, _ = kaldifst.get_linear_symbol_sequence(lattice)
        return [self.rec.id2word[w] for w in olabels] if ok else []

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
            if self.rec.endpoint is not None and self.frames_decoded:
                self._end_segment()
            self.finished = True
            self.timings.append(ChunkTiming(0, time.perf_counter() - t0))
        if self.rec.endpoint is not None:
            return [w for seg in self.segments for w in seg.words]
        return self._best_words(use_final=True)

    def all_logprobs(self) -> np.ndarray:
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
    ``model``) → TLG search. Returns (words, log-probs)."""
    from asrlib.decode.search import TlgDecoder
    from asrlib.export.runtime import OnnxAcousticModel

    b = check_bundle(bundle_dir)
    x = check_audio(samples, sample_rate, b.sample_rate)
    feats = compute_fbank(x, b.sample_rate, b.feat_dim)
    am = OnnxAcousticModel(model or b.path("model.int8.onnx"))
    logp = am.log_probs(feats)
    dec = TlgDecoder(_lang_view(b), beam=beam, max_active=max_active)
    return dec.decode(logp), logp


def _lang_view(b: Bundle) -> Path:
    """The bundle dir serves as a lang dir for TlgDecoder (tokens.txt, words.txt, TLG.fst)."""
    return b.dir
