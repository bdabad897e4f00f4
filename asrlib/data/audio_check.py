"""Fast sanity checks of one audio file (header via a small RIFF walk + soundfile, samples via soundfile).

:func:`check_audio` returns ``None`` for a usable file, otherwise a short reason ``"<category>: <details>"``
(the category is what ``excluded.txt`` summaries count), e.g.
``"wrong-sample-rate: 8000 Hz, expected 16000 Hz (resample: sox IN.wav -r 16000 OUT.wav)"``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

import numpy as np
import soundfile as sf

from asrlib.errors import PathLike

_UNKNOWN_SIZES = (0, 0xFFFFFFFF)  # streamed WAVs (size unknown at write time) and RF64
_STREAMED_MIN = 0x7FFF0000  # e.g. espeak-ng --stdout writes a huge placeholder size


@dataclass
class AudioStatus:
    """Outcome of :func:`inspect_audio`: ``reason`` is None when usable; ``duration`` in seconds when known."""

    reason: Optional[str]
    duration: Optional[float] = None


def _riff_data_chunk(path: Path) -> Tuple[Optional[str], Optional[int], Optional[int], int]:
    """Walk the RIFF chunks up to ``data``: (problem, declared data bytes, data offset, block align)."""
    size = path.stat().st_size
    block_align = 0
    with open(path, "rb") as f:
        head = f.read(12)
        if len(head) < 12 or head[:4] not in (b"RIFF", b"RF64") or head[8:12] != b"WAVE":
            start = head[:4]
            kind = (
                "MP3"
                if start[:3] == b"ID3" or start[:2] in (b"\xff\xfb", b"\xff\xf3")
                else "FLAC"
                if start == b"fLaC"
                else "Ogg"
                if start == b"OggS"
                else "big-endian RIFX WAV"
                if start == b"RIFX"
                else None
            )
            what = f"looks like {kind}" if kind else f"starts with {start!r}, not 'RIFF....WAVE'"
            return f"not-a-wav: {what} (convert: sox IN -r RATE -c 1 -b 16 OUT.wav)", None, None, 0
        pos = 12
        for _ in range(64):
            hdr = f.read(8)
            if len(hdr) < 8:
                return "corrupt-header: no 'data' chunk found (file truncated or not a PCM WAV)", None, None, 0
            cid, csize = hdr[:4], struct.unpack("<I", hdr[4:])[0]
            if cid == b"fmt ":
                fmt = f.read(min(csize, 16))
                if len(fmt) >= 14:
                    block_align = struct.unpack("<H", fmt[12:14])[0]
                f.seek(pos + 8 + csize + (csize & 1))
            elif cid == b"data":
                return None, csize, pos + 8, block_align
            else:
                f.seek(pos + 8 + csize + (csize & 1))
            pos += 8 + csize + (csize & 1)
            if pos > size:
                return (
                    (
                        "corrupt-header: a chunk before 'data' runs past the end of the file (corrupt or "
                        "truncated header)"
                    ),
                    None,
                    None,
                    0,
                )
    return "corrupt-header: too many chunks before 'data'", None, None, 0


def _is_flac(path: Path) -> bool:
    """A file named ``*.flac`` that starts like one (a FLAC file under another name is still not-a-wav)."""
    with open(path, "rb") as f:
        return path.suffix.lower() == ".flac" and f.read(4) == b"fLaC"


def inspect_audio(path: PathLike, expected_sample_rate: Optional[int] = 16000) -> AudioStatus:
    """Check that ``path`` is a readable, complete, mono, non-silent PCM WAV (or ``.flac``) at
    ``expected_sample_rate``."""
    path = Path(path)
    if not path.exists():
        return AudioStatus("missing-file: no such file (check the path in wav.scp)")
    if not path.is_file():
        return AudioStatus("not-a-file: path is a directory or special file")
    size = path.stat().st_size
    if size == 0:
        return AudioStatus("empty-file: 0 bytes (re-create or re-copy it)")
    try:
        flac = _is_flac(path)  # a .flac file is read in place (soundfile), never converted
        problem, declared, offset, block_align = (None, 0, 0, 0) if flac else _riff_data_chunk(path)
    except PermissionError:
        return AudioStatus("unreadable: permission denied (chmod +r the file)")
    except OSError as e:
        return AudioStatus(f"unreadable: {e.strerror or e}")
    if problem:
        return AudioStatus(problem)
    assert declared is not None and offset is not None
    available = size - offset
    if not flac and declared not in _UNKNOWN_SIZES and declared < _STREAMED_MIN:
        if declared > available:
            return AudioStatus(
                f"truncated: header promises {declared} bytes of audio but the file holds "
                f"{available} (re-copy or re-generate it)"
            )
    try:
        info = sf.info(str(path))
    except PermissionError:
        return AudioStatus("unreadable: permission denied (chmod +r the file)")
    except RuntimeError as e:  # soundfile.LibsndfileError
        return AudioStatus(f"corrupt-header: {str(e).splitlines()[-1][:120]}")
    if info.format not in ("WAV", "WAVEX", "RF64") + (("FLAC",) if flac else ()):
        return AudioStatus(f"not-a-wav: contains {info.format} audio (convert: sox IN -b 16 OUT.wav)")
    if block_align and declared not in _UNKNOWN_SIZES and declared < _STREAMED_MIN and declared % block_align:
        return AudioStatus(
            f"truncated: audio data ({declared} bytes) is not a whole number of {block_align}-byte frames"
        )
    if info.frames == 0:
        return AudioStatus("zero-length: valid header but no samples")
    duration = info.frames / info.samplerate
    if info.channels != 1:
        return AudioStatus(
            f"multi-channel: {info.channels} channels, expected mono (mix down: sox IN.wav -c 1 OUT.wav)", duration
        )
    if expected_sample_rate and info.samplerate != expected_sample_rate:
        return AudioStatus(
            f"wrong-sample-rate: {info.samplerate} Hz, expected {expected_sample_rate} Hz "
            f"(resample: sox IN.wav -r {expected_sample_rate} OUT.wav)",
            duration,
        )
    try:
        silent = _all_zero(path)
    except RuntimeError as e:  # soundfile.LibsndfileError
        return AudioStatus(f"corrupt-data: cannot decode samples ({str(e).splitlines()[-1][:100]})", duration)
    if silent:
        return AudioStatus("silent: every sample is zero", duration)
    return AudioStatus(None, duration)


def _all_zero(path: Path, block: int = 1 << 18) -> bool:
    with sf.SoundFile(str(path)) as f:
        while True:
            x = f.read(block, dtype="int32" if f.subtype.startswith("PCM") else "float32")
            if x.size == 0:
                return True
            if np.any(x):
                return False


def check_audio(
    path: PathLike,
    expected_sample_rate: Optional[int] = 16000,
    min_duration: Optional[float] = None,
    max_duration: Optional[float] = None,
) -> Optional[str]:
    """None if ``path`` is a usable mono WAV at ``expected_sample_rate`` within the duration bounds, else a reason.

    Reasons (category first): missing-file, not-a-file, empty-file, unreadable, not-a-wav, corrupt-header,
    truncated, zero-length, multi-channel, wrong-sample-rate, corrupt-data, silent, too-short, too-long.
    """
    status = inspect_audio(path, expected_sample_rate)
    if status.reason:
        return status.reason
    return check_duration(status.duration, min_duration, max_duration)


def check_duration(
    duration: Optional[float], min_duration: Optional[float], max_duration: Optional[float]
) -> Optional[str]:
    """The too-short / too-long reason for ``duration`` seconds, or None."""
    if duration is None:
        return None
    if min_duration is not None and duration < min_duration:
        return f"too-short: {duration:.3f} s < minimum {min_duration:g} s"
    if max_duration is not None and duration > max_duration:
        return f"too-long: {duration:.2f} s > maximum {max_duration:g} s"
    return None
