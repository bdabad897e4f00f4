"""Word times and confidences of a streaming recogniser's segments (asrlib.app.word_times.result_of_stream): a
token run's confidence is its token's peak posterior over every frame of the run, the last one included; times
in the recording's output frames (30 ms)."""

from types import SimpleNamespace

import numpy as np
import pytest

from asrlib.app.word_times import result_of_stream


def test_a_words_confidence_is_each_runs_peak_posterior_over_all_its_frames():
    # output frames 10..19 of the recording: word A = token 1 (frames 11-12), word B = tokens 2 (14) and 3 (16-18)
    tokens = [0, 1, 1, 0, 2, 0, 3, 3, 3, 0]
    post = np.array([0.9, 0.5, 0.8, 0.9, 0.7, 0.9, 0.2, 0.3, 0.6, 0.9])  # peaks at each run's last frame
    seg = SimpleNamespace(first=10, tokens=tokens, posteriors=post, words=["A", "B"], start=0.3, end=0.6)
    res = result_of_stream([seg], {"A": [[1]], "B": [[2, 3]]}, 0.03, 10.0)
    (a, b) = res.segments[0].words
    assert (a.word, a.start, a.end, a.confidence) == ("A", 0.33, 0.39, pytest.approx(0.8))
    assert (b.word, b.start, b.end, b.confidence) == ("B", 0.42, 0.57, pytest.approx((0.7 + 0.6) / 2))
    assert res.text == "A B"
