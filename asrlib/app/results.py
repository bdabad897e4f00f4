"""What the recognizer returns: a :class:`Result` of timed :class:`Word` s, grouped in the :class:`Segment` s of
the recording that were decoded from a zero network state (times in seconds; see :mod:`asrlib.app.word_times` for
how times and confidences are found)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import List, Sequence


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

    @classmethod
    def of_segments(cls, segments: Sequence[Segment], duration: float) -> "Result":
        """The result whose words are the segments' words in order, its text theirs joined by spaces."""
        words = [w for seg in segments for w in seg.words]
        return cls(" ".join(w.word for w in words), words, duration, list(segments))


def capped_result(segments: Sequence[Segment], duration: float) -> Result:
    """:meth:`Result.of_segments`, with segment ends and word times past ``duration`` (the recording's last partial
    output frame) brought back to it."""
    for seg in segments:
        seg.end = min(seg.end, duration)
        for w in seg.words:
            w.start, w.end = min(w.start, duration), min(w.end, duration)
    return Result.of_segments(segments, duration)
