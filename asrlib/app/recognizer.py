"""Transcribe your own audio with a trained model: the Python API behind ``asr transcribe``.

    from asrlib.app.recognizer import Recognizer

    rec = Recognizer.from_dir("recipes/digits/exp/lstm_ctc")   # or a dir made by `asr package`
    result = rec.transcribe_file("my.wav")                      # any rate, mono or multi-channel, wav/flac/...
    print(result.text)
    for w in result.words:
        print(w.word, w.start, w.end, w.confidence)
    result = rec.transcribe(samples, sample_rate)                # numpy [n] or [n, channels], float or int PCM

The work is done by one unit per step, each in its module:

* the front end (:class:`asrlib.app.audio_input.FeatureReader`): audio at any rate, mono or not, → the model's raw
  fbank, chunk by chunk, exactly that of the whole recording;
* the segments (:class:`asrlib.app.segmenter.Segmenter`): where the recording is cut at its pauses
  (``decode.segment``) and the network's log-probabilities of each piece, from a zero state;
* the search (:class:`asrlib.app.word_search.WordSearch`): TLG or greedy, words with times and confidences
  (:mod:`asrlib.app.word_times`);
* the result (:mod:`asrlib.app.results`): the segments' words, times capped at the recording's duration.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, List, Optional, Tuple

import numpy as np

from asrlib.app.audio_input import FeatureReader
from asrlib.app.model_dir import DECODE_KEYS, AcousticBackend, ModelDir, open_model_dir, resolve_segment_method
from asrlib.app.results import Result, Segment, Word, capped_result
from asrlib.app.segmenter import Segmenter, SegmentScores, network_log_probs
from asrlib.app.word_search import METHODS, WordSearch, check_method
from asrlib.config import DecodeConfig
from asrlib.errors import AsrError, PathLike

__all__ = ["METHODS", "Recognizer", "Result", "Segment", "Word"]


class Recognizer:
    """Audio → words with times and confidences, for one model (see the module docstring).

    Not thread-safe (the search keeps state); use one Recognizer per thread or process.
    """

    def __init__(
        self,
        model_dir: ModelDir,
        method: str = "tlg",
        decode: Optional[DecodeConfig] = None,
        chunk_seconds: float = 10.0,
        max_greedy_segment: float = 30.0,
        max_duration: Optional[float] = None,
        device: str = "auto",
    ) -> None:
        from asrlib.config import check_segment_settings
        from asrlib.decode.endpoint import Endpointer

        check_method(method)
        if chunk_seconds <= 0:
            raise AsrError(f"chunk_seconds must be > 0, got {chunk_seconds}")
        self.model_dir, self.method = model_dir, method
        self.decode_config = decode or model_dir.decode_config()
        check_segment_settings(self.decode_config, str(model_dir.root))
        self.backend: AcousticBackend = model_dir.load_backend(device)  # a torch model on device (auto: CUDA if any)
        self.segment_method = resolve_segment_method(self.decode_config.segment, self.backend, str(model_dir.root))
        self.sample_rate = model_dir.sample_rate
        frame_shift = float(model_dir.meta.get("frame_shift", 0.01))
        self.frame_seconds = frame_shift * self.backend.subsampling
        self.search = WordSearch(
            model_dir.lang_dir,
            method,
            self.decode_config,
            self.backend.vocab_size,
            self.frame_seconds,
            max_greedy_segment,
        )
        self.reader = FeatureReader(
            self.sample_rate, self.backend.num_mel_bins, frame_shift, chunk_seconds, max_duration
        )
        self.endpoint_calls = self.backend.endpoint_calls  # the network's calls under decode.segment endpoint
        self.endpointer_type = Endpointer  # what cuts them (bench/long_form.py --oracle-calls: one that plans calls)

    @classmethod
    def from_dir(
        cls,
        path: PathLike,
        method: str = "tlg",
        chunk_seconds: float = 10.0,
        max_duration: Optional[float] = None,
        device: str = "auto",
        **decode: object,
    ) -> "Recognizer":
        """Load a packaged model dir (``asr package``) or a training experiment dir; decode settings (the
        :class:`DecodeConfig` fields recorded in the model dir: beam, max_active, acoustic_scale, blank_penalty and
        the ``segment*`` settings; else its defaults) can be overridden by keyword (None = keep). ``device``: where a
        torch model runs (auto: CUDA when there is one; cpu; cuda; cuda:N)."""
        md = open_model_dir(path)
        cfg = md.decode_config()
        for k, v in decode.items():
            if k not in DECODE_KEYS:
                raise AsrError(f"unknown decode setting '{k}' (known: {', '.join(DECODE_KEYS)})")
            if v is not None:
                setattr(cfg, k, type(getattr(cfg, k))(v))
        return cls(md, method=method, decode=cfg, chunk_seconds=chunk_seconds, max_duration=max_duration, device=device)

    # -------------------------------------------------------------------------------- the units' settings
    @property
    def decoder(self):
        """The search's decoder (:class:`asrlib.decode.search.TlgDecoder` or ``GreedyWordDecoder``)."""
        return self.search.decoder

    @property
    def frame_shift(self) -> float:
        """Seconds between fbank frames."""
        return self.reader.frame_shift

    @property
    def chunk_seconds(self) -> float:
        """Seconds of audio read and run through the network at a time."""
        return self.reader.chunk_seconds

    @property
    def max_duration(self) -> Optional[float]:
        """The longest input accepted, in seconds (None: no limit)."""
        return self.reader.max_duration

    # -------------------------------------------------------------------------------- log-probs
    def _fbank(self, samples: np.ndarray) -> np.ndarray:
        return self.reader.fbank(samples)

    def _chunks(self, feats: np.ndarray) -> Iterator[np.ndarray]:
        return self.reader.chunks(feats)

    def _run_network(self, feats: Iterable[np.ndarray]) -> np.ndarray:
        """Log-probs of fbank chunks through one fresh stream (zero state)."""
        return network_log_probs(self.backend, feats)

    def _segments(self, feats: Iterable[np.ndarray]) -> Iterator[SegmentScores]:
        """``(first output frame, log-probs, end frame)`` of each segment of the recording (:class:`Segmenter`,
        with this recognizer's network calls, call sizes and endpointer as they are now)."""
        segmenter = Segmenter(
            self.segment_method,
            self.decode_config,
            self.backend,
            self.frame_seconds,
            self._run_network,
            self._chunks,
            self.endpoint_calls,
            self.endpointer_type,
        )
        return segmenter.segments(feats)

    def log_probs(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        """CTC log-probabilities ``[T, V]`` (one row per 30 ms output frame) of in-memory audio."""
        blocks = self.reader.sample_blocks(samples, sample_rate)
        return self._run_network(self.reader.features(blocks, sample_rate, "audio", [0]))

    # -------------------------------------------------------------------------------- transcription
    def transcribe(self, samples: np.ndarray, sample_rate: int) -> Result:
        """Words with times and confidences for ``samples`` (``[n]`` or ``[n, channels]``) at ``sample_rate``;
        a long recording is decoded in segments cut at its pauses (``decode.segment``)."""
        return self._transcribe_blocks(self.reader.sample_blocks(samples, sample_rate), sample_rate, "audio")

    def transcribe_file(self, path: PathLike, progress: Optional[Callable[[float], None]] = None) -> Result:
        """Like :meth:`transcribe` for an audio file; problems are an :class:`AsrError` naming the file.
        ``progress(seconds)`` is called with the seconds of audio read since its last call."""
        sr, blocks = self.reader.open_file(path)
        return self._transcribe_blocks(blocks, sr, str(path), progress)

    def _transcribe_blocks(
        self,
        blocks: Iterable[np.ndarray],
        sample_rate: int,
        where: str,
        progress: Optional[Callable[[float], None]] = None,
    ) -> Result:
        counted: List[int] = [0]
        segments: List[Segment] = []
        fs = self.frame_seconds
        for first, lp, end in self._segments(self.reader.features(blocks, sample_rate, where, counted, progress)):
            words = self.search.words(lp, None, first)
            if words:
                end = max(end * fs, words[-1].end)
                segments.append(Segment(round(first * fs, 6), round(end, 6), " ".join(w.word for w in words), words))
        return capped_result(segments, counted[0] / sample_rate)

    def decode_log_probs(self, lp: np.ndarray, duration: float) -> Result:
        """Search ``lp`` (one stream, no segmentation) and attach word times / confidences (see
        :mod:`asrlib.app.word_times`)."""
        words = self.search.words(lp, duration)
        return Result(" ".join(w.word for w in words), words, duration)

    def _greedy_segments(self, frame_tokens: np.ndarray) -> List[Tuple[int, int]]:
        return self.search.greedy_pieces(frame_tokens)
