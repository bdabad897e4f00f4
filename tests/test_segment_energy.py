"""The energy side of recording segmentation (asrlib/decode/segment.py), frame by frame against its definition:
the log of each fbank frame's total mel energy, smoothed over SMOOTH_FRAMES, and a frame is non-speech when it is
within the threshold of the local floor, the minimum over FLOOR_WINDOW_FRAMES on each side (windows at the ends
of the recording repeat the end frame)."""

import math

import numpy as np
from scipy.special import logsumexp

from asrlib.decode import segment


def test_frame_energy_is_the_log_of_the_total_mel_energy():
    feats = np.random.default_rng(0).normal(0, 3, (40, 23)).astype(np.float32) + 700.0  # large: no overflow
    np.testing.assert_allclose(segment.frame_energy(feats), logsumexp(feats.astype(np.float64), axis=1), rtol=1e-12)
    assert segment.frame_energy(np.zeros((0, 23))).shape == (0,)


def _window(x, t, half):
    return [x[min(max(j, 0), len(x) - 1)] for j in range(t - half, t + half + 1)]


def test_nonspeech_is_within_the_threshold_of_the_floor_of_a_two_sided_window():
    """A level plateau with a dip in it: plateau frames whose floor window reaches the dip are speech (the dip sets
    their floor), the others non-speech; the boundary is exactly FLOOR_WINDOW_FRAMES from the smoothed dip."""
    energy = np.full(600, 10.0)
    energy[280:300] = 0.0  # 20 frames, far below the plateau
    feats = energy[:, None]  # one mel bin: the frame's energy is its value
    threshold_db = 3.0
    got = segment.energy_nonspeech(feats, threshold_db)
    h, f = segment.SMOOTH_FRAMES // 2, segment.FLOOR_WINDOW_FRAMES
    smooth = np.array([np.mean(_window(energy, t, h)) for t in range(len(energy))])
    floor = np.array([min(_window(smooth, t, f)) for t in range(len(energy))])
    want = smooth < floor + threshold_db * math.log(10) / 10
    np.testing.assert_array_equal(got, want)
    # (what that means here: speech within the floor window's reach of the dip, the dip itself at its own floor)
    assert want[:175].all() and not want[182:280].any() and want[284:296].all()
    assert not want[300:398].any() and want[405:].all()
