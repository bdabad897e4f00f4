"""asrlib.app.audio_input.to_mono_float: integer PCM of any width and signedness to float in [-1, 1) exactly (the
zero code to 0.0, full scale to -1.0 and 1 - 1/half), channels averaged."""

import numpy as np

from asrlib.app.audio_input import to_mono_float


def test_integer_pcm_maps_its_codes_exactly():
    int16 = to_mono_float(np.array([-32768, -16384, 0, 1, 32767], np.int16))
    np.testing.assert_array_equal(int16, np.array([-1.0, -0.5, 0.0, 1 / 32768, 32767 / 32768], np.float32))
    uint8 = to_mono_float(np.array([0, 64, 128, 255], np.uint8))  # unsigned: the middle code is silence
    np.testing.assert_array_equal(uint8, np.array([-1.0, -0.5, 0.0, 127 / 128], np.float32))
    int32 = to_mono_float(np.array([-(2**31), 0, 2**30], np.int32))
    np.testing.assert_array_equal(int32, np.array([-1.0, 0.0, 0.5], np.float32))


def test_channels_are_averaged():
    stereo = np.array([[0.5, -0.5], [1.0, 0.0], [0.25, 0.75]], np.float32)
    np.testing.assert_array_equal(to_mono_float(stereo), np.array([0.0, 0.5, 0.5], np.float32))
