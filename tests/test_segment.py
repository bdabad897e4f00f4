"""Segmentation of long recordings (asrlib/decode/segment.py) and subtitles (asrlib/app/subtitles.py): where cuts go,
what is kept, bounded buffers; energy flags on real silence and tones."""

import numpy as np
import pytest

from asrlib.config import DecodeConfig, check_segment_settings
from asrlib.decode.segment import energy_nonspeech, plan_segments, runs_of, to_output_frames
from asrlib.errors import AsrError
from asrlib.app.subtitles import cues, subtitles, timestamp, wrap


def flags(spec: str) -> np.ndarray:
    """'s' = speech frame, '.' = non-speech frame."""
    return np.array([c == "." for c in spec])


def test_runs_of():
    assert runs_of(flags("..ss...s.")) == [(0, 2), (4, 7), (8, 9)]
    assert runs_of(flags("sss")) == []


def test_short_pause_is_cut_in_its_middle_and_edges_trimmed():
    #          0123456789012345678901
    f = flags("......sss....sss......")
    segs, keep = plan_segments(f, final=True, min_silence=3, pad=3, max_len=100)
    # leading silence keeps 3 frames of pad; the 4-frame pause (< 2 pad) is cut in its middle; trailing silence
    # after the last speech keeps 3 frames and the rest is never decoded
    assert segs == [(3, 11), (11, 19)]
    assert keep == len(f)


def test_long_pause_keeps_pad_on_each_side_and_skips_the_rest():
    f = flags("sss" + "." * 20 + "sss")
    segs, _ = plan_segments(f, final=True, min_silence=3, pad=2, max_len=100)
    assert segs == [(0, 5), (21, 26)]


def test_pause_shorter_than_min_silence_does_not_cut():
    f = flags("sss..sss..sss")
    segs, _ = plan_segments(f, final=True, min_silence=3, pad=1, max_len=100)
    assert segs == [(0, 13)]


def test_all_silence_gives_no_segment():
    segs, keep = plan_segments(flags("." * 50), final=True, min_silence=3, pad=2, max_len=100)
    assert segs == [] and keep == 50


def test_buffer_that_goes_on_keeps_its_open_end():
    # the pause at the end may go on: the segment before it is complete (pad kept), the rest is carried over
    f = flags("ssss.....")
    segs, keep = plan_segments(f, final=False, min_silence=3, pad=2, max_len=100)
    assert segs == [(0, 6)] and keep == 6
    # speech touching the end is not complete: nothing emitted, everything kept
    segs, keep = plan_segments(flags("ss...ssss"), final=False, min_silence=5, pad=2, max_len=100)
    assert segs == [] and keep == 0


def test_full_buffer_without_pause_is_cut_at_its_longest_non_speech_run():
    f = flags("ssss.sssss..sssssss")  # runs shorter than min_silence; buffer reached max_len
    segs, keep = plan_segments(f, final=False, min_silence=5, pad=2, max_len=len(f))
    assert segs == [(0, 11)] and keep == 11  # middle of the 2-frame run at 10..12
    segs, keep = plan_segments(flags("s" * 30), final=False, min_silence=5, pad=2, max_len=20)
    assert segs == [(0, 20)] and keep == 20  # no non-speech at all: cut at the limit


def test_every_frame_is_decoded_once_or_skipped_as_silence():
    rng = np.random.default_rng(3)
    for _ in range(200):
        f = rng.random(int(rng.integers(1, 300))) < rng.uniform(0.2, 0.9)
        segs, keep = plan_segments(
            f, final=True, min_silence=int(rng.integers(1, 10)), pad=int(rng.integers(0, 8)), max_len=1000
        )
        covered = np.zeros(len(f), int)
        for a, b in segs:
            assert 0 <= a < b <= len(f)
            covered[a:b] += 1
        assert covered.max(initial=0) <= 1  # no frame twice
        assert covered[~f].all()  # every speech frame in a segment
        assert [a for a, _ in segs] == sorted(a for a, _ in segs)


def test_energy_flags_find_silence_between_tones():
    sr, shift = 16000, 160
    from asrlib.features.fbank import FbankExtractor, FbankOptions

    t = np.arange(sr) / sr
    tone = 0.3 * np.sin(2 * np.pi * 700 * t)
    x = np.concatenate([np.zeros(sr // 2), tone, np.zeros(sr), tone, np.zeros(sr // 2)])
    x = (x + np.random.default_rng(0).normal(0, 1e-4, len(x))).astype(np.float32)
    feats = FbankExtractor(FbankOptions(num_mel_bins=40, dither=0.0, sample_rate=sr)).features(x)
    quiet = energy_nonspeech(feats, threshold_db=6.0)
    runs = [(a * shift / sr, b * shift / sr) for a, b in runs_of(quiet) if b - a >= 20]
    assert len(runs) == 3
    assert runs[1][0] == pytest.approx(1.5, abs=0.05) and runs[1][1] == pytest.approx(2.5, abs=0.05)
    out = to_output_frames(quiet, 3)
    assert len(out) == len(quiet) // 3 and out.dtype == bool


def test_segment_settings_are_checked():
    check_segment_settings(DecodeConfig(), "cfg")
    for bad in [
        dict(segment="vad"),
        dict(segment_min_silence=0),
        dict(segment_pad=-1),
        dict(segment_max_seconds=1.0, segment_min_silence=0.6),
        dict(segment_threshold_db=0),
    ]:
        with pytest.raises(AsrError, match="cfg: decode.segment"):
            check_segment_settings(DecodeConfig(**bad), "cfg")


# ------------------------------------------------------------------------------------------------ subtitles
def _result(segments):
    words, segs = [], []
    for start, end, ws in segments:
        words += [{"word": w, "start": s, "end": e, "confidence": 1.0} for w, s, e in ws]
        segs.append({"start": start, "end": end, "text": " ".join(w for w, _, _ in ws)})
    return {"text": " ".join(w["word"] for w in words), "words": words, "segments": segs}


def test_timestamps_and_wrapping():
    assert timestamp(3723.4567, ",") == "01:02:03,457"
    assert timestamp(0.0, ".") == "00:00:00.000"
    assert wrap("short") == "short"
    long = "ONE TWO THREE FOUR FIVE SIX SEVEN EIGHT NINE ZERO"
    lines = wrap(long).split("\n")
    assert len(lines) == 2 and " ".join(lines) == long and max(map(len, lines)) <= 42


def test_srt_and_vtt_cues_follow_segments_and_split_long_ones():
    res = _result(
        [
            (0.5, 2.0, [("HELLO", 0.6, 1.0), ("WORLD", 1.1, 1.8)]),
            (10.0, 30.0, [(f"W{i}", 10.5 + i, 11.0 + i) for i in range(15)]),
        ]
    )
    c = cues(res)
    assert c[0] == (0.5, 2.0, "HELLO WORLD")
    long_cues = c[1:]
    assert len(long_cues) >= 3  # 15 s of words: split at <= 7 s
    assert long_cues[0][0] == 10.0 and long_cues[-1][1] == 30.0
    assert " ".join(t for _, _, t in long_cues) == " ".join(f"W{i}" for i in range(15))
    for (s0, e0, _), (s1, _, _) in zip(long_cues, long_cues[1:]):
        assert e0 == s1 and s0 < e0
    srt = subtitles(res, "srt")
    assert srt.startswith("1\n00:00:00,500 --> 00:00:02,000\nHELLO WORLD\n\n2\n")
    vtt = subtitles(res, "vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:00.500 --> 00:00:02.000\nHELLO WORLD\n")
    assert subtitles(_result([]), "srt") == ""
