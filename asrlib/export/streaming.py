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
and a fresh search, by :class:`asrlib.decode.endpoint.Endpointer` (its docstring has the rules), the same code that
cuts ``asr transcribe``'s input with ``decode.segment: endpoint``, so the network never carries its state across
more audio than it was trained on. :meth:`Stream.finish` returns the words of every segment in order;
:attr:`Stream.segments` has each one's words and times. A bundle's ``decode`` settings (``segment_min_silence``,
``segment_pad``, ``segment_max_seconds``; :meth:`EndpointRules.of_bundle`) give the rules that the offline
recogniser uses on it. Memory is bounded: the front end forgets the frames it has given to the network.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, List, Optional, Tuple

import numpy as np

from asrlib.decode.endpoint import ENDPOINT_RUN_SECONDS, Endpointer, EndpointRules  # noqa: F401 - re-exported
from asrlib.decode.search_scores import apply_search
from asrlib.export.bundle import SHERPA_BEAM, SHERPA_MAX_ACTIVE, Bundle, check_audio, check_bundle
from asrlib.export.runtime import open_streaming_model
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
        self.model = open_streaming_model(path, self.bundle.feat_dim, num_threads)
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
        self._frames_used = 0  # fbank frames given to the network (the front end forgets them); no endpointing
        self.network = rec.model.stream()  # its LSTM (h, c) [+ online CMN's running sum and count]; no endpointing
        self.decoder = kaldi_decoder.FasterDecoder(rec.graph, rec.decoder_opts)
        self.decoder.init_decoding()
        self.frames_decoded = 0  # network output frames searched in the current segment
        self.segments: List[StreamSegment] = []  # finished segments (endpointing), in order
        self.segment_start = 0  # output frame of the stream where the current segment begins
        # endpointing: the endpointer runs the network and tells this stream (its sink) each segment's frames
        self.endpointer: Optional[Endpointer] = None
        if ep is not None:
            self.endpointer = Endpointer(ep, rec.stack, b.feat_dim, rec.frame_seconds, rec.model.stream, self)
        self.finished = False
        self.timings: List[ChunkTiming] = []
        self.logprobs: List[np.ndarray] = []  # the current segment's log-probs, for tests / inspection (T' × V)

    @property
    def frames_used(self) -> int:
        """Fbank frames of the input given to the network."""
        return self.endpointer.frames_used if self.endpointer is not None else self._frames_used

    @property
    def network_frames(self) -> int:
        """Fbank frames the network has run over (with endpointing: the detector's and the reruns' included)."""
        return self.endpointer.network_frames if self.endpointer is not None else self._frames_used

    @property
    def recent(self) -> np.ndarray:
        """With endpointing: the input's last fbank frames, kept to start the next segment from."""
        return (
            self.endpointer.recent
            if self.endpointer is not None
            else np.zeros((0, self.rec.bundle.feat_dim), np.float32)
        )

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
        ready, used = self.fbank.num_frames_ready, self.frames_used
        n = (ready - used) // stack * stack
        if n <= 0:
            return
        frames = np.stack([self.fbank.get_frame(i) for i in range(used, used + n)])
        self.fbank.pop(n)  # memory stays bounded on long inputs
        if self.endpointer is not None:
            self.endpointer.accept(frames)
            return
        self._frames_used += n
        self.decode(self.network.accept(frames))

    def decode(self, scores: np.ndarray) -> None:
        """Search the current segment's next log-probs (the endpointer's sink, too)."""
        from asrlib.kaldi_imports import kaldi_decoder

        self.logprobs.append(scores)
        scores = apply_search(scores, self.rec.acoustic_scale, self.rec.blank_penalty)
        if len(scores):
            self.decoder.advance_decoding(kaldi_decoder.DecodableCtc(scores, offset=self.frames_decoded))
            self.frames_decoded += scores.shape[0]

    def end_segment(self, start: int, end: int) -> None:
        """The endpointer's sink: close the current segment (from output frame ``start``; kept if it has words;
        ``end``: the output frame given as its end) and reset the search for the next."""
        self.segment_start = start
        seg = self._segment_of(end)
        if seg is not None:
            self.segments.append(seg)
        self.segment_start, self.frames_decoded, self.logprobs = end, 0, []
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
            if self.endpointer is not None:
                self.endpointer.finish()
            elif hasattr(self.network, "finish"):  # an LC-BLSTM's chunks that wait for their right context
                self.decode(self.network.finish())
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
