"""bench/network_calls.py: each call size timed on the backend's own stream (whole stacks of fbank frames, the state
carried), and the per-call and per-frame costs fitted from them; on a clock that a fake network advances."""

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import network_calls as nc  # noqa: E402  (bench/ is not a package)


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_fit_recovers_a_networks_cost_per_call_and_per_frame(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(nc.time, "perf_counter", clock)
    seen = []

    class Stream:
        def accept(self, feats):
            assert feats.shape[1] == 8 and len(feats) % 3 == 0  # whole stacks of the backend's mel bins
            frames = len(feats) // 3
            seen.append(frames)
            clock.now += 2e-3 + frames * 50e-6  # 2 ms a call, 50 us an output frame
            return np.zeros((frames, 5), np.float32)

    class Backend:
        subsampling, num_mel_bins = 3, 8
        streams = 0

        def stream(self):
            Backend.streams += 1
            return Stream()

    f = nc.time_calls(Backend(), [1, 10, 100], reps=4)
    assert Backend.streams == 1  # one stream, its state carried across the calls
    assert seen == [1] * 7 + [10] * 7 + [100] * 7  # three untimed calls, then the timed ones, per size
    assert f["us"] == {"1": 2050.0, "10": 2500.0, "100": 7000.0}
    assert abs(f["per_call_us"] - 2000) < 1 and abs(f["per_frame_us"] - 50) < 0.01 and f["call_in_frames"] == 40.0
