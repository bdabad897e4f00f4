"""Transcribe your own audio with a trained model: the Python API behind ``asr transcribe``.

    from asrlib.app.recognizer import Recognizer

    rec = Recognizer.from_dir("recipes/digits/exp/lstm_ctc")   # or a dir made by `asr package`
    result = rec.transcribe_file("my.wav")                      # any rate, mono or multi-channel, wav/flac/...
    print(result.text)
    for w in result.words:
        print(w.word, w.start, w.end, w.confidence)
    result = rec.transcribe(samples, sample_rate)                # numpy [n] or [n, channels], float or int PCM

**Front end** (the same for every model type): channels are averaged (downmix), the audio is resampled to the
model's rate (16 kHz for the recipes) with lhotse's band-limited sinc resampler, and 80-dim fbank is computed with
exactly the settings of the feature stage (:mod:`asrlib.features.fbank`, dither 0). All of it runs on chunks of
``chunk_seconds`` of audio with enough overlap that the result is *identical* to processing the whole recording at
once: the resampler sees its filter's context on both sides of a chunk, and fbank frames are computed from a chunk
extended by one frame shift on each side (every frame depends only on its own 25 ms window).

**Segments**: a recording is decoded as segments cut at its pauses (``decode.segment``, :mod:`asrlib.decode.segment`):
the network runs each segment from a zero state, chunk by chunk with the LSTM state carried within it (see
:mod:`asrlib.app.model_dir`), and the search (TLG or greedy) runs over each segment's log-probabilities, so a long
recording costs memory bounded by ``segment_max_seconds``, and a model trained on utterances never carries its
state across an hour. A short utterance is usually one segment, searched as the recipe's decode stage does;
``segment: none`` gives exactly the decode stage's search over the whole recording in one stream. Greedy decoding
of pieces longer than ``max_greedy_segment`` seconds is split at the longest runs of blank frames.

**Word times** come from the CTC alignment. One output frame is ``frame_shift × subsampling`` = 30 ms; output
frame ``f`` spans ``[0.03·f, 0.03·(f+1))`` seconds. Along the best path (TLG) or the per-frame argmax (greedy), each
run of consecutive frames with the same non-blank token is one emitted token. A word's ``start`` is the start of
the first frame of its first token, its ``end`` the end of the last frame of its last token (capped at the audio
duration). CTC emissions are peaky and a unidirectional LSTM emits a phone after hearing it, so times mark where
the model *recognised* the word: typically a little after the word begins, and ``end - start`` is shorter than the
spoken word. Words are in order and never overlap.

**Confidence** of a word: the mean, over the tokens emitted for it, of the token's peak posterior probability
``max_f exp(logp[f, token])`` over the frames of its run. 1.0 = the network was certain of every phone. (For the
greedy method, a word whose phones were all absent from the greedy phone string and filled in by the lexicon
match has confidence 0 and ``start == end``.)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from asrlib.config import DecodeConfig
from asrlib.errors import AsrError, PathLike
from asrlib.app.model_dir import DECODE_KEYS, AcousticBackend, ModelDir, open_model_dir, resolve_segment_method

METHODS = ("tlg", "greedy")
MIN_SAMPLES_SECONDS = 0.025  # one 25 ms fbank window


# ------------------------------------------------------------------------------------------------ results
@dataclass
class Word:
    word: str
    start: float  # seconds
    end: float  # seconds
    confidence: float  # 0..1, see the module docstring


@dataclass
class Segment:
    """A stretch of the recording decoded from a zero network state (see :mod:`asrlib.decode.segment`) that
    holds words: ``start``/``end`` bound the audio decoded (the words plus up to ``segment_pad`` of silence)."""

    start: float
    end: float
    text: str
    words: List[Word] = field(default_factory=list)


@dataclass
class Result:
    text: str
    words: List[Word] = field(default_factory=list)
    duration: float = 0.0  # seconds of input audio
    segments: List[Segment] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "text": self.text,
            "duration": round(self.duration, 3),
            "words": [
                {**asdict(w), "start": round(w.start, 3), "end": round(w.end, 3), "confidence": round(w.confidence, 3)}
                for w in self.words
            ],
            "segments": [{"start": round(s.start, 3), "end": round(s.end, 3), "text": s.text} for s in self.segments],
        }


# ------------------------------------------------------------------------------------------------ audio
def _to_mono_float(samples: np.ndarray) -> np.ndarray:
    """``[n]`` or ``[n, channels]`` float or integer PCM → float32 mono in [-1, 1] (channels averaged)."""
    x = np.asarray(samples)
    if x.ndim not in (1, 2):
        raise AsrError(f"audio must be a 1-D array [samples] or 2-D [samples, channels], got shape {x.shape}")
    if np.issubdtype(x.dtype, np.integer):
        info = np.iinfo(x.dtype)
        x = (x.astype(np.float64) - (info.max + info.min + 1) / 2) / ((info.max - info.min + 1) / 2)
    elif not np.issubdtype(x.dtype, np.floating):
        raise AsrError(f"audio samples must be numbers, got dtype {x.dtype}")
    if x.ndim == 2:
        if x.shape[1] > 64 and x.shape[0] < x.shape[1]:
            raise AsrError(
                f"audio of shape {x.shape} looks like [channels, samples]; pass [samples, channels] (transpose it)"
            )
        x = x.mean(axis=1)
    return np.ascontiguousarray(x, dtype=np.float32)


def _check_finite(block: np.ndarray, where: str) -> None:
    if not np.isfinite(block).all():
        raise AsrError(f"{where}: audio contains NaN or infinite sample values (corrupt float audio)")


def _array_blocks(x: np.ndarray, block: int) -> Iterator[np.ndarray]:
    for i in range(0, len(x), block):
        yield x[i : i + block]


def too_long(where: str, max_seconds: float) -> AsrError:
    """The error for an input longer than ``--max-duration``."""
    return AsrError(
        f"{where}: longer than the {max_seconds:g} s allowed (--max-duration; 0 = no limit): not transcribed"
    )


def open_audio_blocks(
    path: PathLike, block_seconds: float = 10.0, max_seconds: Optional[float] = None
) -> Tuple[int, Iterator[np.ndarray]]:
    """(sample rate, iterator over float32 mono blocks) of an audio file (anything libsndfile reads).

    Unreadable, empty or corrupt files raise :class:`AsrError` naming the file (the iterator may raise it too,
    for damage found only while decoding); so does a file whose header gives it more than ``max_seconds`` (None: no
    limit), before any of it is read.
    """
    import soundfile as sf

    path = Path(path)
    if not path.exists():
        raise AsrError(f"{path}: no such file")
    if not path.is_file():
        raise AsrError(f"{path}: not a regular file")
    if path.stat().st_size == 0:
        raise AsrError(f"{path}: empty file (0 bytes)")
    try:
        f = sf.SoundFile(str(path))
    except PermissionError:
        raise AsrError(f"{path}: permission denied") from None
    except Exception as e:  # noqa: BLE001 - libsndfile's error types vary by version; all mean "cannot read"
        msg = " ".join(str(e).split()).replace(f"Error opening {str(path)!r}: ", "")
        raise AsrError(f"{path}: cannot read audio ({msg})") from None
    if f.frames == 0:
        f.close()
        raise AsrError(f"{path}: no audio samples (empty recording)")
    sr = int(f.samplerate)
    if max_seconds is not None and f.frames > max_seconds * sr:
        f.close()
        raise too_long(str(path), max_seconds)
    block = max(1, int(block_seconds * sr))

    def gen() -> Iterator[np.ndarray]:
        with f:
            while True:
                try:
                    x = f.read(block, dtype="float32", always_2d=True)
                except Exception as e:  # noqa: BLE001
                    raise AsrError(f"{path}: cannot decode audio ({' '.join(str(e).split())})") from None
                if len(x) == 0:
                    return
                yield np.ascontiguousarray(x.mean(axis=1), dtype=np.float32)

    return sr, gen()


def resample_stream(blocks: Iterable[np.ndarray], orig: int, new: int, block_hint: int) -> Iterator[np.ndarray]:
    """Resample a stream of sample blocks from ``orig`` to ``new`` Hz, identical to resampling the concatenation.

    Uses lhotse's sinc-interpolation :class:`Resample` (torchaudio's algorithm, no torchaudio needed). Each
    output block is computed from an input span of a whole number of resampling periods plus ``P`` samples of
    context on both sides (``P`` ≥ the filter's half-width, zeros before the start and after the end — as the
    one-shot resampler pads).
    """
    if orig == new:
        yield from blocks
        return
    import torch
    from lhotse.augmentation.resample import Resample

    rs = Resample(orig, new)
    g = math.gcd(orig, new)
    o, n = orig // g, new // g
    ctx = math.ceil(rs.width / o) * o
    step = max(1, block_hint // o) * o
    skip = ctx // o * n
    buf = np.zeros(ctx, np.float32)  # buf[ctx] is the next input sample to turn into output
    total_in = produced = 0
    for blk in blocks:
        buf = np.concatenate([buf, blk])
        total_in += len(blk)
        while len(buf) >= ctx + step + ctx:
            with torch.no_grad():
                y = rs(torch.from_numpy(buf[: ctx + step + ctx])).numpy()
            out = y[skip : skip + step // o * n]
            produced += len(out)
            yield out
            buf = buf[step:]
    total_out = math.ceil(n * total_in / o)
    if total_out > produced:
        with torch.no_grad():
            y = rs(torch.from_numpy(np.concatenate([buf, np.zeros(ctx, np.float32)]))).numpy()
        yield y[skip : skip + total_out - produced]


def fbank_stream(
    blocks: Iterable[np.ndarray], extract, frames_per_chunk: int, shift: int = 160, min_samples: int = 400
) -> Iterator[np.ndarray]:
    """Fbank frames of a stream of 16 kHz sample blocks, identical to ``extract(concatenation)``.

    ``extract(samples) -> [frames, dim]`` is lhotse's Kaldi-compatible fbank with ``snip_edges=False``: frame
    ``i`` is computed from samples ``[i·shift - 120, i·shift + 280)`` only (edges reflected), and a signal of
    ``N`` samples has ``(N + shift // 2) // shift`` frames. So chunk frames ``[f0, f1)`` are taken from the
    samples ``[f0·shift - shift, f1·shift + shift)`` — dropping the chunk's first frame (if ``f0 > 0``), whose
    window was reflected at the chunk's edge. A recording shorter than ``min_samples`` (one window) is an error.
    """
    buf = np.zeros(0, np.float32)
    buf_start = 0  # global index of buf[0]
    f0 = 0  # next frame to output
    total = 0
    for blk in blocks:
        buf = np.concatenate([buf, blk]) if len(buf) else np.asarray(blk, np.float32)
        total += len(blk)
        while (f0 + frames_per_chunk) * shift + shift - buf_start <= len(buf):
            f1 = f0 + frames_per_chunk
            if total < min_samples:  # tiny chunks: wait for one 25 ms window of audio
                break
            feats = extract(buf[: f1 * shift + shift - buf_start])
            off = 0 if f0 == 0 else 1
            yield feats[off : off + (f1 - f0)]
            new_start = f1 * shift - shift
            buf = buf[new_start - buf_start :]
            buf_start, f0 = new_start, f1
    if total < min_samples:
        raise AsrError(
            f"audio too short: {total} samples, need at least {min_samples} "
            f"({min_samples / (shift * 100):.3f} s) for one 25 ms frame"
        )
    n_frames = (total + shift // 2) // shift
    if n_frames > f0:
        feats = extract(buf)
        off = 0 if f0 == 0 else 1
        yield feats[off : off + (n_frames - f0)]


# ------------------------------------------------------------------------------------------------ alignment
def token_runs(frame_tokens: Sequence[int]) -> List[Tuple[int, int, int]]:
    """CTC emissions along a frame-level token path: ``(token, first frame, last frame)`` for each run of
    consecutive frames with the same non-blank token (blank = 0)."""
    runs: List[Tuple[int, int, int]] = []
    prev = 0
    for f, t in enumerate(int(t) for t in frame_tokens):
        if t != 0 and t == prev:
            runs[-1] = (t, runs[-1][1], f)
        elif t != 0:
            runs.append((t, f, f))
        prev = t
    return runs


def _match_exact(
    words: Sequence[str], prons: Dict[str, List[List[int]]], toks: Sequence[int]
) -> Optional[List[Tuple[int, int]]]:
    """Split ``toks`` into the words' pronunciations exactly: run-index spans ``[a, b)`` per word, or None.

    Depth-first over the pronunciation choices (iterative), remembering dead ends ``(word, position)``, so the
    work is at most words × positions × pronunciations.
    """
    toks = list(toks)
    failed = set()
    stack: List[Tuple[int, int]] = []  # (start position, pronunciation index) of each matched word
    j = i = k = 0
    while True:
        advanced = False
        if j < len(words):
            ps = prons.get(words[j], [])
            while k < len(ps):
                p = ps[k]
                if (j + 1, i + len(p)) not in failed and toks[i : i + len(p)] == p:
                    stack.append((i, k))
                    j, i, k = j + 1, i + len(p), 0
                    advanced = True
                    break
                k += 1
        elif i == len(toks):
            ends = [s for s, _ in stack[1:]] + [len(toks)]
            return [(s, e) for (s, _), e in zip(stack, ends)]
        if advanced:
            continue
        failed.add((j, i))
        if not stack:
            return None
        i, k = stack.pop()
        j, k = j - 1, k + 1


def _match_edit(
    words: Sequence[str], prons: Dict[str, List[List[int]]], toks: Sequence[int]
) -> List[Optional[Tuple[int, int]]]:
    """Minimum-edit alignment of ``toks`` to the words (any of each word's pronunciations): for each word the
    span ``[a, b)`` of the runs it matched or substituted, or None if all its phones were deletions.

    Dynamic programming over (phone-lattice node) × (position in ``toks``), one numpy row per node: costs 1 for a
    substitution, an inserted run or a deleted phone. O(nodes × runs) time and memory — used per segment.
    """
    n = len(toks)
    t = np.asarray(toks, dtype=np.int64)
    idx = np.arange(n + 1)
    # nodes: boundary node per word boundary, plus one node per phone position of each pronunciation
    rows: List[np.ndarray] = []
    back: List[Tuple[np.ndarray, np.ndarray, List[Tuple[int, int, int]]]] = []  # (choice, op, preds)
    owner: List[int] = []  # word index owning a node's incoming phone (-1 for boundary nodes)

    def add_node(preds: List[Tuple[int, int, int]], word: int) -> int:
        """preds: (node, phone, is_boundary_join); returns the node id."""
        best = np.full(n + 1, np.inf)
        choice = np.full(n + 1, -1, dtype=np.int64)
        op = np.zeros(n + 1, dtype=np.int8)  # 0 start, 1 sub/match, 2 delete phone, 3 insert run, 4 join
        for k, (u, ph, join) in enumerate(preds):
            ru = rows[u]
            if join:
                cand = ru
                better = cand < best
                best, choice, op = np.where(better, cand, best), np.where(better, k, choice), np.where(better, 4, op)
                continue
            sub = np.full(n + 1, np.inf)
            sub[1:] = ru[:-1] + (t != ph)
            better = sub < best
            best, choice, op = np.where(better, sub, best), np.where(better, k, choice), np.where(better, 1, op)
            dele = ru + 1
            better = dele < best
            best, choice, op = np.where(better, dele, best), np.where(better, k, choice), np.where(better, 2, op)
        # insertions: best[i] = min_k<=i best[k] + (i - k)
        ins = np.minimum.accumulate(best - idx) + idx
        better = ins < best
        op = np.where(better, 3, op)
        best = np.where(better, ins, best)
        rows.append(best)
        back.append((choice, op, preds))
        owner.append(word)
        return len(rows) - 1

    start = np.full(n + 1, np.inf)
    start[0] = 0
    rows.append(np.minimum.accumulate(start - idx) + idx)  # node 0: leading insertions
    back.append((np.full(n + 1, -1), np.where(idx > 0, 3, 0).astype(np.int8), []))
    owner.append(-1)
    boundary = 0
    for j, w in enumerate(words):
        ends = []
        for p in prons.get(w, []) or [[]]:
            u = boundary
            for ph in p:
                u = add_node([(u, ph, 0)], j)
            ends.append((u, 0, 1))
        boundary = add_node(ends, -1)
    # trace back from (boundary, n)
    spans: List[List[int]] = [[] for _ in words]
    node, i = boundary, n
    while not (node == 0 and i == 0):
        choice, op, preds = back[node]
        o = int(op[i])
        if o == 3:
            i -= 1
            continue
        u = preds[int(choice[i])][0]
        if o == 1:
            spans[owner[node]].append(i - 1)
            i -= 1
        node = u
    return [(min(s), max(s) + 1) if s else None for s in spans]


def align_words(
    words: Sequence[str], prons: Dict[str, List[List[int]]], runs: Sequence[Tuple[int, int, int]]
) -> List[Optional[Tuple[int, int]]]:
    """Run-index span ``[a, b)`` of each word (None: no run), exact when the runs spell the words."""
    toks = [r[0] for r in runs]
    exact = _match_exact(words, prons, toks)
    if exact is not None:
        return list(exact)
    return _match_edit(words, prons, toks)


def timed_words(
    words: Sequence[str],
    prons: Dict[str, List[List[int]]],
    runs: Sequence[Tuple[int, int, int]],
    posteriors: Sequence[float],
    frame_seconds: float,
    duration: float,
    start: int,
) -> List[Word]:
    """``words`` (a best path's) with times and confidences: ``runs`` are that path's token runs (:func:`token_runs`)
    in the recording's output frames, ``posteriors`` the best posterior of each run's token over its frames, and
    ``start`` the output frame the path begins at (a word with no run of its own gets the end of the one before,
    or ``start``); times are capped at ``duration`` seconds."""
    spans = align_words(words, prons, runs)
    fs = frame_seconds
    out: List[Word] = []
    prev_end = round(start * fs, 6)
    for w, span in zip(words, spans):
        if span is None:
            t = min(prev_end, duration)
            out.append(Word(w, t, t, 0.0))
            continue
        a, b = span
        begin = round(min(runs[a][1] * fs, duration), 6)
        end = round(min((runs[b - 1][2] + 1) * fs, duration), 6)
        out.append(Word(w, begin, end, float(np.mean(posteriors[a:b]))))
        prev_end = end
    return out


def result_of_stream(
    segments: Sequence, prons: Dict[str, List[List[int]]], frame_seconds: float, duration: float
) -> Result:
    """The :class:`Result` of a streaming recogniser's input from its segments (:class:`asrlib.export.streaming.
    StreamSegment`: words, times and best path), word times and confidences as :class:`Recognizer` gives them."""
    out: List[Segment] = []
    for seg in segments:
        runs = [(t, f0 + seg.first, f1 + seg.first) for t, f0, f1 in token_runs(seg.tokens)]
        posteriors = [float(seg.posteriors[f0 - seg.first : f1 - seg.first + 1].max()) for _, f0, f1 in runs]
        words = timed_words(seg.words, prons, runs, posteriors, frame_seconds, duration, seg.first)
        out.append(Segment(min(seg.start, duration), min(seg.end, duration), " ".join(seg.words), words))
    words = [w for seg in out for w in seg.words]
    return Result(" ".join(w.word for w in words), words, duration, out)


class _SegmentCollector:
    """An endpointer's sink that keeps each finished segment's ``(first output frame, log-probs, end frame)``."""

    def __init__(self) -> None:
        self.scores: List[np.ndarray] = []
        self.done: List[Tuple[int, np.ndarray, int]] = []

    def decode(self, scores: np.ndarray) -> None:
        if len(scores):
            self.scores.append(scores)

    def end_segment(self, start: int, end: int) -> None:
        if self.scores:
            self.done.append((start, np.concatenate(self.scores).astype(np.float32, copy=False), end))
        self.scores = []

    def take(self) -> List[Tuple[int, np.ndarray, int]]:
        done, self.done = self.done, []
        return done


# ------------------------------------------------------------------------------------------------ recognizer
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
        from asrlib.decode.search import GreedyWordDecoder, TlgDecoder
        from asrlib.lang.lexicon import read_lexicon_ids, read_tokens, read_words
        from asrlib.features.fbank import FbankExtractor, FbankOptions

        if method not in METHODS:
            raise AsrError(f"unknown method '{method}' (choose from {', '.join(METHODS)})")
        if chunk_seconds <= 0:
            raise AsrError(f"chunk_seconds must be > 0, got {chunk_seconds}")
        self.model_dir, self.method = model_dir, method
        self.decode_config = decode or model_dir.decode_config()
        check_segment_settings(self.decode_config, str(model_dir.root))
        self.backend: AcousticBackend = model_dir.load_backend(device)  # a torch model on device (auto: CUDA if any)
        self.segment_method = resolve_segment_method(self.decode_config.segment, self.backend, str(model_dir.root))
        self.sample_rate = model_dir.sample_rate
        lang = model_dir.lang_dir
        tokens = read_tokens(lang / "tokens.txt")
        if len(tokens) != self.backend.vocab_size:
            raise AsrError(
                f"the model outputs {self.backend.vocab_size} tokens but {lang / 'tokens.txt'} has "
                f"{len(tokens)}: the lang dir does not belong to this model"
            )
        if method == "tlg":
            if not (lang / "TLG.fst").is_file():
                raise AsrError(f"{lang} has no TLG.fst; build it (steps.prepare_lang) or use --method greedy")
            c = self.decode_config
            self.decoder = TlgDecoder(
                lang,
                beam=c.beam,
                max_active=c.max_active,
                acoustic_scale=c.acoustic_scale,
                blank_penalty=c.blank_penalty,
            )
        else:
            self.decoder = GreedyWordDecoder(lang)
        self.id2word = read_words(lang / "words.txt")
        self.prons = read_lexicon_ids(lang)
        self._extractor = FbankExtractor(
            FbankOptions(num_mel_bins=self.backend.num_mel_bins, dither=0.0, sample_rate=self.sample_rate)
        )
        self.frame_shift = float(model_dir.meta.get("frame_shift", 0.01))
        self.shift_samples = int(round(self.frame_shift * self.sample_rate))
        self.frame_seconds = self.frame_shift * self.backend.subsampling
        self.chunk_seconds = float(chunk_seconds)
        self.max_duration = max_duration  # seconds of input audio, at most (None: no limit)
        self._frames_per_chunk = max(1, int(round(self.chunk_seconds / self.frame_shift)))
        self.max_greedy_frames = max(1, int(max_greedy_segment / self.frame_seconds))
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

    # -------------------------------------------------------------------------------- log-probs
    def _fbank(self, samples: np.ndarray) -> np.ndarray:
        return self._extractor.features(samples)  # under torch.inference_mode

    def _feature_stream(
        self,
        blocks: Iterable[np.ndarray],
        sample_rate: int,
        where: str,
        counted: List[int],
        progress: Optional[Callable[[float], None]] = None,
    ) -> Iterator[np.ndarray]:
        """Raw fbank chunks of the recording (exactly those of the whole recording); ``counted[0]`` adds up the
        input samples; ``progress(seconds)`` is told each block's input seconds."""
        if int(sample_rate) != sample_rate or sample_rate <= 0:
            raise AsrError(f"{where}: bad sample rate {sample_rate}")
        sample_rate = int(sample_rate)

        def checked() -> Iterator[np.ndarray]:
            for b in blocks:
                _check_finite(b, where)
                counted[0] += len(b)
                if self.max_duration is not None and counted[0] > self.max_duration * sample_rate:
                    raise too_long(where, self.max_duration)  # a stream, or a header that understates
                if progress is not None:
                    progress(len(b) / sample_rate)
                yield b

        hint = max(1, int(self.chunk_seconds * sample_rate))
        audio = resample_stream(checked(), sample_rate, self.sample_rate, hint)
        min_samples = int(round(MIN_SAMPLES_SECONDS * self.sample_rate))
        try:
            yield from fbank_stream(audio, self._fbank, self._frames_per_chunk, self.shift_samples, min_samples)
        except AsrError as e:
            raise AsrError(str(e) if str(e).startswith(where) else f"{where}: {e}") from None

    def _run_network(self, feats: Iterable[np.ndarray]) -> np.ndarray:
        """Log-probs of fbank chunks through one fresh stream (zero state)."""
        stream = self.backend.stream()
        outs = [stream.accept(f) for f in feats]
        outs.append(stream.finish())
        return np.concatenate(outs).astype(np.float32, copy=False)

    def _chunks(self, feats: np.ndarray) -> Iterator[np.ndarray]:
        return _array_blocks(feats, self._frames_per_chunk) if len(feats) else iter(())

    def _log_probs_blocks(self, blocks: Iterable[np.ndarray], sample_rate: int, where: str) -> Tuple[np.ndarray, int]:
        """(log-probs [T, V] of the recording in one stream, number of input samples)."""
        counted = [0]
        lp = self._run_network(self._feature_stream(blocks, sample_rate, where, counted))
        return lp, counted[0]

    def _segments(self, feats: Iterable[np.ndarray]) -> Iterator[Tuple[int, np.ndarray, int]]:
        """``(first output frame, log-probs, end frame)`` of each segment of the recording
        (:mod:`asrlib.decode.segment`, :mod:`asrlib.decode.endpoint`), each run from a zero state; at most
        ``segment_max_seconds`` of features are held at a time."""
        from asrlib.decode.segment import blank_nonspeech, energy_nonspeech, plan_segments, to_output_frames

        c, stack = self.decode_config, self.backend.subsampling
        if self.segment_method == "none":
            lp = self._run_network(feats)
            yield 0, lp, len(lp)
            return
        if self.segment_method == "endpoint":
            yield from self._endpoint_segments(feats)
            return
        fs = self.frame_seconds
        min_sil = max(1, int(round(c.segment_min_silence / fs)))
        pad = int(round(c.segment_pad / fs))
        max_len = max(2 * min_sil + 1, int(round(c.segment_max_seconds / fs)))

        def plan(buf: np.ndarray, final: bool) -> Tuple[List[Tuple[int, int]], int]:
            if self.segment_method == "energy":
                flags = to_output_frames(energy_nonspeech(buf, c.segment_threshold_db), stack)
            else:
                flags = blank_nonspeech(self._run_network(self._chunks(buf)))[: len(buf) // stack]
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
            while len(buf) >= max_len * stack or final:
                segs, keep = plan(buf, final)
                for a, b in segs:  # a final segment takes the last partial stack too (the stream drops it)
                    end = len(buf) if final and b * stack >= len(buf) - stack else b * stack
                    left = context_before(a * stack)
                    x = np.concatenate([left, buf[a * stack : end], buf[end : end + ctx]])
                    lp = self._run_network(self._chunks(x))  # len(x) // stack rows
                    seg = lp[len(left) // stack : (len(left) + end) // stack - a]
                    yield out0 + a, seg, out0 + a + len(seg)
                before = context_before(keep * stack)
                buf, out0 = buf[keep * stack :], out0 + keep
                if final:
                    break

    def _endpoint_segments(self, feats: Iterable[np.ndarray]) -> Iterator[Tuple[int, np.ndarray, int]]:
        """``decode.segment: endpoint``: the segments that :class:`asrlib.decode.endpoint.Endpointer` cuts, as the
        streaming recogniser's endpointing does: each segment's end found by its own network, run from a zero state
        at its start, the next one's start by the network that goes on listening. Each segment's log-probs are the
        network's from its start to where its pause ended it (searched whole, as the streaming recogniser searches
        them); its end is given ``min_silence / 2`` into that pause, before the next one's start."""
        from asrlib.decode.endpoint import EndpointRules

        rules = EndpointRules.of_decode(vars(self.decode_config), even_if_off=True)
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

    def log_probs(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        """CTC log-probabilities ``[T, V]`` (one row per 30 ms output frame) of in-memory audio."""
        x = _to_mono_float(samples)
        if len(x) == 0:
            raise AsrError("audio: no samples")
        return self._log_probs_blocks(
            _array_blocks(x, max(1, int(self.chunk_seconds * sample_rate))), sample_rate, "audio"
        )[0]

    # -------------------------------------------------------------------------------- transcription
    def transcribe(self, samples: np.ndarray, sample_rate: int) -> Result:
        """Words with times and confidences for ``samples`` (``[n]`` or ``[n, channels]``) at ``sample_rate``;
        a long recording is decoded in segments cut at its pauses (``decode.segment``)."""
        x = _to_mono_float(samples)
        if len(x) == 0:
            raise AsrError("audio: no samples")
        return self._transcribe_blocks(
            _array_blocks(x, max(1, int(self.chunk_seconds * sample_rate))), sample_rate, "audio"
        )

    def transcribe_file(self, path: PathLike, progress: Optional[Callable[[float], None]] = None) -> Result:
        """Like :meth:`transcribe` for an audio file; problems are an :class:`AsrError` naming the file.
        ``progress(seconds)`` is called with the seconds of audio read since its last call."""
        sr, blocks = open_audio_blocks(path, self.chunk_seconds, self.max_duration)
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
        for first, lp, end in self._segments(self._feature_stream(blocks, sample_rate, where, counted, progress)):
            words = self._decode_words(lp, None, first)
            if words:
                fs = self.frame_seconds
                end = max(end * fs, words[-1].end)
                segments.append(Segment(round(first * fs, 6), round(end, 6), " ".join(w.word for w in words), words))
        duration = counted[0] / sample_rate
        for seg in segments:  # times past the end of the audio (its last partial frame)
            seg.end = min(seg.end, duration)
            for w in seg.words:
                w.start, w.end = min(w.start, duration), min(w.end, duration)
        words = [w for seg in segments for w in seg.words]
        return Result(" ".join(w.word for w in words), words, duration, segments)

    def decode_log_probs(self, lp: np.ndarray, duration: float) -> Result:
        """Search ``lp`` (one stream, no segmentation) and attach word times / confidences (see the module
        docstring)."""
        words = self._decode_words(lp, duration)
        return Result(" ".join(w.word for w in words), words, duration)

    def _decode_words(self, lp: np.ndarray, duration: Optional[float], first: int = 0) -> List[Word]:
        """Words of ``lp``, whose frame 0 is the recording's output frame ``first``; times capped at
        ``duration`` (None: not capped)."""
        if self.method == "tlg":
            words, frame_tokens = self._search_tlg(lp)
            pieces = [(0, len(lp), words)]
        else:
            frame_tokens = np.argmax(lp, axis=1) if len(lp) else np.zeros(0, np.int64)
            pieces = [(a, b, self.decoder.decode(lp[a:b])) for a, b in self._greedy_segments(frame_tokens)]
        out: List[Word] = []
        for a, b, seg_words in pieces:
            runs = [(t, f0 + a, f1 + a) for t, f0, f1 in token_runs(frame_tokens[a:b])]
            out.extend(
                self._words_with_times(seg_words, runs, lp, math.inf if duration is None else duration, a, first)
            )
        return out

    def _search_tlg(self, lp: np.ndarray) -> Tuple[List[str], np.ndarray]:
        from asrlib.kaldi_imports import kaldifst

        words = self.decoder.decode(lp)
        if not words:
            return [], np.zeros(len(lp), np.int64)
        ok, lattice = self.decoder.decoder.get_best_path()
        ok2, isyms, osyms, _ = kaldifst.get_linear_symbol_sequence(lattice) if ok else (False, [], [], None)
        if not ok2 or len(isyms) != len(lp) or [self.id2word[o] for o in osyms] != words:
            raise AsrError("internal error: the TLG best path does not have one token per frame")
        return words, np.asarray(isyms, np.int64) - 1  # TLG input label = token id + 1

    def _greedy_segments(self, frame_tokens: np.ndarray) -> List[Tuple[int, int]]:
        """Split frames into pieces of at most ``max_greedy_frames``, cutting in the middle of the longest run of
        blank frames of each over-long piece (or at its limit if it has no blank)."""
        t_len, limit = len(frame_tokens), self.max_greedy_frames
        if t_len <= limit:
            return [(0, t_len)]
        pieces, a = [], 0
        while t_len - a > limit:
            window = frame_tokens[a : a + limit]
            blank = np.concatenate([[False], window == 0, [False]]).astype(np.int8)
            edges = np.flatnonzero(np.diff(blank))
            starts, ends = edges[::2], edges[1::2]
            if len(starts):
                k = int(np.argmax(ends - starts))
                cut = a + int((starts[k] + ends[k]) // 2)
                cut = cut if cut > a else a + limit
            else:
                cut = a + limit
            pieces.append((a, cut))
            a = cut
        pieces.append((a, t_len))
        return pieces

    def _words_with_times(
        self,
        words: Sequence[str],
        runs: List[Tuple[int, int, int]],
        lp: np.ndarray,
        duration: float,
        seg_start: int,
        first: int = 0,
    ) -> List[Word]:
        """Words with times; ``runs`` index frames of ``lp``, whose frame 0 is the recording's frame ``first``."""
        posteriors = [float(np.exp(lp[f0 : f1 + 1, tok].max())) for tok, f0, f1 in runs]
        runs = [(t, f0 + first, f1 + first) for t, f0, f1 in runs]
        return timed_words(words, self.prons, runs, posteriors, self.frame_seconds, duration, seg_start + first)
