"""bench/long_form.py's interval of the long-minus-pieces gap: resampled over utterances, centred on the gap."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import long_form  # noqa: E402  (bench/ is not a package)

REFS = {f"u{i}": "one two three four five" for i in range(40)}


def test_gap_interval_brackets_the_gap_and_is_zero_when_long_equals_pieces():
    groups = [[f"u{i}" for i in range(20)], [f"u{i}" for i in range(20, 40)]]
    joined = [" ".join(REFS[u] for u in g) for g in groups]
    assert long_form.gap_interval(groups, REFS, joined, joined) == [0.0, 0.0]
    # the long hypotheses lose one word in 8 of the 40 utterances: gap 8 / 200 = +4 points
    long = [" ".join(REFS[u].replace("three", "") if int(u[1:]) % 5 == 0 else REFS[u] for u in g) for g in groups]
    lo, hi = long_form.gap_interval(groups, REFS, long, joined)
    assert 0.0 < lo < 4.0 < hi < 10.0
    lo2, hi2 = long_form.gap_interval(groups, REFS, joined, long)  # the other way round: the mirror image
    assert (lo2, hi2) == (-hi, -lo)
