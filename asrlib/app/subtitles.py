"""Subtitles (SubRip ``.srt``, WebVTT ``.vtt``) from a transcription: what ``asr transcribe --format srt|vtt`` writes.

Cues follow the segments of the recording (:mod:`asrlib.decode.segment`: stretches between pauses). A segment
longer than a reader can take in is split between words into cues of at most :data:`MAX_CUE_SECONDS` seconds and
:data:`MAX_CUE_CHARS` characters, shown on at most two lines of :data:`MAX_LINE_CHARS` (the usual broadcast
guidance). The first cue of a segment starts with the segment, a later one with its first word; each cue ends
where the next cue of its segment starts, the last one with the segment.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

MAX_CUE_SECONDS = 7.0
MAX_LINE_CHARS = 42
MAX_CUE_CHARS = 2 * MAX_LINE_CHARS


def timestamp(seconds: float, sep: str) -> str:
    """``HH:MM:SS<sep>mmm`` (``sep`` ',' for SRT, '.' for WebVTT)."""
    ms = max(0, int(round(seconds * 1000)))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def wrap(text: str) -> str:
    """One line, or two split at the space nearest the middle when longer than :data:`MAX_LINE_CHARS`."""
    if len(text) <= MAX_LINE_CHARS or " " not in text:
        return text
    mid = len(text) / 2
    cut = min((i for i, ch in enumerate(text) if ch == " "), key=lambda i: abs(i - mid))
    return text[:cut] + "\n" + text[cut + 1 :]


def cues(result: Dict) -> List[Tuple[float, float, str]]:
    """``(start, end, text)`` of each cue of ``result`` (a :meth:`asrlib.app.results.Result.to_dict`)."""
    words: Sequence[Dict] = result.get("words", [])
    out: List[Tuple[float, float, str]] = []
    k = 0
    for seg in result.get("segments", []):
        seg_words = words[k : k + len(seg["text"].split())]
        k += len(seg_words)
        groups: List[List[Dict]] = [[]]
        for w in seg_words:
            g = groups[-1]
            text = " ".join([x["word"] for x in g] + [w["word"]])
            if g and (len(text) > MAX_CUE_CHARS or w["end"] - g[0]["start"] > MAX_CUE_SECONDS):
                groups.append([w])
            else:
                g.append(w)
        groups = [g for g in groups if g]
        starts = [seg["start"]] + [g[0]["start"] for g in groups[1:]]
        ends = starts[1:] + [seg["end"]]
        out += [(s, max(e, s), " ".join(w["word"] for w in g)) for s, e, g in zip(starts, ends, groups)]
    return out


def subtitles(result: Dict, fmt: str) -> str:
    """The text of a ``.srt`` (``fmt`` "srt") or ``.vtt`` ("vtt") file for ``result``."""
    if fmt not in ("srt", "vtt"):
        raise ValueError(f"unknown subtitle format {fmt!r}")
    sep = "," if fmt == "srt" else "."
    blocks = []
    for i, (start, end, text) in enumerate(cues(result), 1):
        head = f"{i}\n" if fmt == "srt" else ""
        blocks.append(f"{head}{timestamp(start, sep)} --> {timestamp(end, sep)}\n{wrap(text)}\n")
    body = "\n".join(blocks)
    return ("WEBVTT\n\n" + body) if fmt == "vtt" else body
