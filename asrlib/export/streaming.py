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
    """One utterance being recognised (see the module docstring)."""

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
        self.frames_decoded = 0  # network output frames searched
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
        scores, self.state = self.rec.model.run(feats, self.state)
        self.logprobs.append(scores)
        if self.rec.blank_penalty or self.rec.acoustic_scale != 1.0:
            scores = scores.copy()
            scores[:, 0] -= self.rec.blank_penalty
            scores *= self.rec.acoustic_scale
        self.decoder.advance_decoding(
            kaldi_decoder.DecodableCtc(np.ascontiguousarray(scores, np.float32), offset=self.frames_decoded)
        )
        self.frames_decoded += scores.shape[0]

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
        """The best words so far (not using final-state weights)."""
        return self._best_words(use_final=False)

    def finish(self) -> List[str]:
        """End of input: flush the front end's last frames, run them, return the final words (frames that do
        not fill a last stack are dropped, as in training)."""
        if not self.finished:
            t0 = time.perf_counter()
            self.fbank.input_finished()
            self._advance()
            self.finished = True
            self.timings.append(ChunkTiming(0, time.perf_counter() - t0))
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
