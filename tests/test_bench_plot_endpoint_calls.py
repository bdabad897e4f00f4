"""bench/plot_endpoint_calls.py: the points of bench/long_form.py's offline_paired figures, and their plot."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import plot_endpoint_calls as pec  # noqa: E402  (bench/ is not a package)

PAIRED = {
    "length": 60,
    "method": "auto",
    "pairs": 4,
    "auto": {"median": 1.2, "quartiles": [1.1, 1.3], "network_frames": 1.6},
    "one_stream": {"median": 0.7, "quartiles": [0.6, 0.8], "network_frames": 1.0},
    "calls 4 / 1 / 1": {"median": 1.33, "quartiles": [1.3, 1.4], "network_frames": 1.47},
}


def test_points_label_the_chosen_calls_and_skip_the_header(tmp_path):
    pts = pec.points(PAIRED, "auto")
    assert pts == [
        ("OFFLINE_CALLS (chosen)", 1.6, 1.2, [1.1, 1.3]),
        ("one stream", 1.0, 0.7, [0.6, 0.8]),
        ("4 / 1 / 1", 1.47, 1.33, [1.3, 1.4]),
    ]
    out = tmp_path / "calls.png"
    pec.plot(pts, "t", out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
