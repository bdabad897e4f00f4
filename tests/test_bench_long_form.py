"""bench/long_form.py's interval of the long-minus-pieces gap: resampled over utterances, centred on the gap."""

import sys

import numpy as np
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


def test_gap_interval_draws_an_utterance_with_all_its_copies():
    """The 1 h recording holds the set several times: its copies are not independent draws. (Every utterance here
    has the same words, so the pieces joined read the same in either order.)"""
    ids = [f"u{i}" for i in range(20)]
    long = " ".join(REFS[u].replace("two", "") if int(u[1:]) % 4 == 0 else REFS[u] for u in ids)
    joined = " ".join(REFS[u] for u in ids)
    copies = long_form.gap_interval([ids, ids[::-1]], REFS, [long, _reorder(long, ids)], [joined, joined])
    refs = {**REFS, **{f"v{i}": REFS[f"u{i}"] for i in range(20)}}
    distinct = long_form.gap_interval(
        [ids, [f"v{i}" for i in range(20)][::-1]], refs, [long, _reorder(long, ids)], [joined, joined]
    )
    assert copies[0] < distinct[0] and copies[1] > distinct[1]  # wider: half as many independent draws


def _reorder(joined_hyp: str, ids) -> str:
    """The hypothesis of ``ids`` read in reverse order (each utterance has five words, 'two' dropped in some)."""
    words = {u: (REFS[u].replace("two", "") if int(u[1:]) % 4 == 0 else REFS[u]) for u in ids}
    return " ".join(words[u] for u in ids[::-1])


def test_paired_ratios_time_each_runner_against_the_utterances_in_rotating_order(monkeypatch):
    """Each recording's time against its utterances', side by side: one ratio per recording and repeat, each
    runner first as often as the others (a fake clock advanced by the runners)."""
    clock, order = [0.0], []

    def runner(name, per_path):
        def run(paths):
            order.append(name)
            clock[0] += per_path * len(paths)

        return run

    monkeypatch.setattr(long_form.time, "perf_counter", lambda: clock[0])
    groups, files = [["u0", "u1"], ["u2", "u3"], ["u4", "u5"]], ["a.wav", "b.wav", "c.wav"]
    wavs = {f"u{i}": f"u{i}.wav" for i in range(6)}
    runners = {"utts": runner("utts", 1.0), "seg": runner("seg", 3.0), "one_stream": runner("one_stream", 1.0)}
    out = long_form.paired_ratios(groups, files, wavs, 2, runners)
    assert out["pairs"] == 6
    assert out["seg"] == {"median": 1.5, "quartiles": [1.5, 1.5]} and out["one_stream"]["median"] == 0.5
    firsts = [order[i] for i in range(0, len(order), 3)]
    assert sorted(firsts) == sorted(["utts", "seg", "one_stream"] * 2)


def test_planned_calls_end_at_the_next_detection_and_give_the_same_segments():
    """--oracle-calls: a first pass records where the endpointer detected each segment's speech; the second, whose
    calls each end one frame after the next detection, cuts the same segments over fewer network frames than the
    call sizes' (no call runs on past a detection, so nothing after one runs twice)."""
    from asrlib.decode.endpoint import OFFLINE_CALLS
    from tests.test_endpoint import FS, RULES, STACK, ScriptedNetwork, Sink, features

    rng = np.random.default_rng(3)
    pattern = "".join(c * int(rng.integers(5, 60)) for c in "#.#.#.#.#.#.#." * 3)
    detections, feats = [], features(pattern)

    def run(kind):
        sink, sizes = Sink(), []

        class Counting(ScriptedNetwork):
            def accept(self, x):
                sizes.append(len(x) // STACK)
                return super().accept(x)

        ep = kind(RULES, STACK, 2, FS, lambda: Counting([]), sink, OFFLINE_CALLS)
        for i in range(0, len(feats), 200 * STACK):
            ep.accept(feats[i : i + 200 * STACK])
        ep.finish()
        return [(a, b) for a, b, _ in sink.segments], ep.network_frames, sizes

    sizes_only = run(long_form.planned(detections, record=True))
    assert len(detections) >= 10 and detections == sorted(set(detections))
    oracle = run(long_form.planned(detections))
    assert oracle[0] == sizes_only[0] and len(oracle[0]) >= 10
    assert oracle[1] < sizes_only[1]
    # what runs twice is each segment's start to its detection, nothing after: its calls end there
    again = sum(d + 1 - a for (a, _), d in zip(oracle[0][1:], detections[1:]))
    assert oracle[1] - len(feats) == again * STACK > 0
