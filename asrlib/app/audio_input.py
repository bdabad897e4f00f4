"""The recognizer's front end: audio (a file, or samples in memory) → the model's raw fbank frames, in chunks.

The same for every model type: channels are averaged (downmix), the audio is resampled to the model's rate (16 kHz
for the recipes) with lhotse's band-limited sinc resampler, and 80-dim fbank is computed with exactly the settings
of the feature stage (:mod:`asrlib.features.fbank`, dither 0). All of it runs on chunks of ``chunk_seconds`` of
audio with enough overlap that the result is *identical* to processing the whole recording at once: the resampler
sees its filter's context on both sides of a chunk, and fbank frames are computed from a chunk extended by one frame
shift on each side (every frame depends only on its own 25 ms window).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Iterable, Iterator, List, Optional, Tuple

import numpy as np

from asrlib.errors import AsrError, PathLike

MIN_SAMPLES_SECONDS = 0.025  # one 25 ms fbank window


def to_mono_float(samples: np.ndarray) -> np.ndarray:
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


def check_finite(block: np.ndarray, where: str) -> None:
    if not np.isfinite(block).all():
        raise AsrError(f"{where}: audio contains NaN or infinite sample values (corrupt float audio)")


def array_blocks(x: np.ndarray, block: int) -> Iterator[np.ndarray]:
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


class FeatureReader:
    """Audio at any rate → raw fbank chunks of ``chunk_seconds`` (the model's ``sample_rate``, ``num_mel_bins``
    and ``frame_shift``), exactly those of the whole recording; an input longer than ``max_duration`` seconds
    (None: no limit) is an error."""

    def __init__(
        self,
        sample_rate: int,
        num_mel_bins: int,
        frame_shift: float,
        chunk_seconds: float,
        max_duration: Optional[float] = None,
    ) -> None:
        from asrlib.features.fbank import FbankExtractor, FbankOptions

        self.sample_rate = sample_rate
        self._extractor = FbankExtractor(FbankOptions(num_mel_bins=num_mel_bins, dither=0.0, sample_rate=sample_rate))
        self.frame_shift = frame_shift
        self.shift_samples = int(round(frame_shift * sample_rate))
        self.chunk_seconds = float(chunk_seconds)
        self.max_duration = max_duration  # seconds of input audio, at most (None: no limit)
        self.frames_per_chunk = max(1, int(round(self.chunk_seconds / frame_shift)))

    def fbank(self, samples: np.ndarray) -> np.ndarray:
        """Raw fbank of samples at the model's rate."""
        return self._extractor.features(samples)  # under torch.inference_mode

    def chunks(self, feats: np.ndarray) -> Iterator[np.ndarray]:
        """``feats`` in chunks of ``chunk_seconds``."""
        return array_blocks(feats, self.frames_per_chunk) if len(feats) else iter(())

    def sample_blocks(self, samples: np.ndarray, sample_rate: int) -> Iterator[np.ndarray]:
        """In-memory audio (``[n]`` or ``[n, channels]``) as mono blocks of ``chunk_seconds``."""
        x = to_mono_float(samples)
        if len(x) == 0:
            raise AsrError("audio: no samples")
        return array_blocks(x, max(1, int(self.chunk_seconds * sample_rate)))

    def open_file(self, path: PathLike) -> Tuple[int, Iterator[np.ndarray]]:
        """(sample rate, mono blocks of ``chunk_seconds``) of an audio file (:func:`open_audio_blocks`)."""
        return open_audio_blocks(path, self.chunk_seconds, self.max_duration)

    def features(
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
                check_finite(b, where)
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
            yield from fbank_stream(audio, self.fbank, self.frames_per_chunk, self.shift_samples, min_samples)
        except AsrError as e:
            raise AsrError(str(e) if str(e).startswith(where) else f"{where}: {e}") from None
