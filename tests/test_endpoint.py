"""The endpointer (asrlib/decode/endpoint.py) on a scripted network: where segments end and start, each from a zero
network state, the same however the input is chunked, bounded memory. The recognisers that use it are tested in
tests/test_export_streaming.py (the mobile bundle's stream) and tests/test_recognizer.py (asr transcribe)."""

import numpy as np
import pytest

from asrlib.decode.endpoint import OFFLINE_CALLS, CallSizes, Endpointer, EndpointRules
from asrlib.errors import AsrError

STACK, FS = 3, 0.03  # fbank frames per output frame, seconds per output frame


class ScriptedNetwork:
    """Output frame = token 1 where its stack's first feature is > 0, else blank; column 2 says how many output
    frames this stream has run since its zero state (so a test sees where each segment's network started)."""

    def __init__(self, started: list) -> None:
        self.age = 0
        started.append(self)

    def accept(self, feats: np.ndarray) -> np.ndarray:
        n = len(feats) // STACK
        speech = feats[: n * STACK, 0].reshape(n, STACK).mean(axis=1) > 0
        out = np.full((n, 3), -20.0, np.float32)
        out[np.arange(n), speech.astype(int)] = 0.0
        out[:, 2] = -100.0 - (self.age + np.arange(n))
        self.age += n
        return out


class Sink:
    def __init__(self) -> None:
        self.scores, self.segments = [], []

    def decode(self, scores: np.ndarray) -> None:
        self.scores.append(scores)

    def end_segment(self, start: int, end: int) -> None:
        lp = np.concatenate(self.scores) if self.scores else np.zeros((0, 3), np.float32)
        self.segments.append((start, end, lp))
        self.scores = []


def features(pattern: str) -> np.ndarray:
    """One output frame a character: '#' speech, '.' silence."""
    x = np.array([1.0 if c == "#" else -1.0 for c in pattern], np.float32)
    return np.repeat(x, STACK)[:, None] * np.ones((1, 2), np.float32)


def run(pattern: str, rules: EndpointRules, chunk: int = 0, calls: CallSizes = CallSizes()):
    sink, started = Sink(), []
    ep = Endpointer(rules, STACK, 2, FS, lambda: ScriptedNetwork(started), sink, calls)
    feats = features(pattern)
    step = chunk * STACK or len(feats)
    ep.most_held = 0  # the most input frames held after a chunk
    for i in range(0, len(feats), step):
        ep.accept(feats[i : i + step])
        ep.most_held = max(ep.most_held, len(ep.held))
    ep.finish()
    return sink.segments, ep


RULES = EndpointRules(min_silence=0.3, pad=0.6, max_segment=20.0)  # 10 and 20 output frames


def test_segments_end_at_pauses_and_start_in_their_middle_from_a_zero_state():
    pattern = "." * 10 + "#" * 20 + "." * 40 + "#" * 15 + "." * 30
    segs, ep = run(pattern, RULES)
    # the first: the detector itself (its first speech within `pad` of the input's start), cut 10 frames into the
    # pause, given as ending 5 in; the second from the middle of the 40-frame pause (30 + 70) // 2 = 50
    assert [(a, b, len(lp)) for a, b, lp in segs] == [(0, 35, 40), (50, 90, 45)]
    for a, _, lp in segs:  # each segment's network ran from a zero state at its start
        np.testing.assert_array_equal(-100.0 - lp[:, 2], np.arange(len(lp)))
        np.testing.assert_array_equal(np.argmax(lp[:, :2], axis=1), [pattern[a + i] == "#" for i in range(len(lp))])
    assert ep.frames_used == len(pattern) * STACK
    assert ep.network_frames > ep.frames_used  # the second segment's pause ran again


def test_a_long_pause_keeps_pad_before_the_next_speech():
    segs, _ = run("#" * 10 + "." * 100 + "#" * 10 + "." * 20, RULES)
    assert [(a, b) for a, b, _ in segs] == [(0, 15), (90, 125)]  # 110 - pad


def test_leading_silence_longer_than_pad_is_not_decoded():
    segs, _ = run("." * 50 + "#" * 10 + "." * 20, RULES)
    assert [(a, b) for a, b, _ in segs] == [(30, 65)]


def test_max_segment_cuts_long_speech_and_runs_the_rest_from_a_zero_state():
    rules = EndpointRules(min_silence=0.3, pad=0.6, max_segment=1.5)  # at most 50 frames
    segs, _ = run("#" * 120 + "." * 20, rules)
    assert [(a, b, len(lp)) for a, b, lp in segs] == [(0, 50, 50), (50, 100, 50), (100, 125, 30)]
    for _, _, lp in segs:
        np.testing.assert_array_equal(-100.0 - lp[:, 2], np.arange(len(lp)))


HELD = [OFFLINE_CALLS, CallSizes(first=0.3, segment=0.09, waiting=0.03, hold=True), CallSizes(2.0, 0.5, 5.0, True)]


@pytest.mark.parametrize("chunk", [1, 4, 7, 33, 100])
@pytest.mark.parametrize("calls", [CallSizes(), *HELD])
def test_same_segments_however_the_input_is_chunked(chunk, calls):
    """... and whatever the calls' sizes, frames held or run as they come."""
    rng = np.random.default_rng(chunk)
    pattern = "".join(c * int(rng.integers(1, 60)) for c in "#.#.#.#.#.#.#." * 4)
    whole, a = run(pattern, RULES)
    chunked, b = run(pattern, RULES, chunk, calls)
    assert len(whole) >= 10
    assert [(s, e) for s, e, _ in chunked] == [(s, e) for s, e, _ in whole]
    for (_, _, x), (_, _, y) in zip(chunked, whole):
        np.testing.assert_array_equal(x, y)
    # what runs again is at most `pad` and one call's frames per segment, however large the chunks
    call = max(round(x / FS) for x in (calls.first, calls.segment, calls.waiting)) * STACK
    for ep, most in ((a, round(1.0 / FS) * STACK), (b, call)):
        assert ep.frames_used < ep.network_frames <= ep.frames_used + len(whole) * (20 * STACK + most + STACK)
    # the frames kept to start a segment from: `pad` and one call's (and, held, those short of a call)
    assert len(b.recent) <= (round(RULES.pad / FS) + 1) * STACK + max(chunk * STACK, call)
    assert len(b.held) == 0 and b.frames_used == len(pattern) * STACK
    assert b.most_held < (call if calls.hold else 1)


def test_same_segments_whatever_a_subclass_plans_for_its_calls():
    """A subclass may end each held call where it likes (``_call_end``; bench/long_form.py's oracle plan): the
    segments and their scores are the same, and it calls the network where it said."""
    rng = np.random.default_rng(5)
    pattern = "".join(c * int(rng.integers(1, 60)) for c in "#.#.#.#.#.#.#." * 3)
    whole, _ = run(pattern, RULES)
    ends = []

    class Planned(Endpointer):
        def _call_end(self, start: int) -> int:
            ends.append(start + int(rng.integers(1, 50)) * STACK)
            return ends[-1]

    sink, calls = Sink(), []

    class Counting(ScriptedNetwork):
        def accept(self, feats):
            calls.append(len(feats))
            return super().accept(feats)

    ep = Planned(RULES, STACK, 2, FS, lambda: Counting([]), sink, OFFLINE_CALLS)
    feats = features(pattern)
    for i in range(0, len(feats), 30 * STACK):
        ep.accept(feats[i : i + 30 * STACK])
    ep.finish()
    assert [(s, e) for s, e, _ in sink.segments] == [(s, e) for s, e, _ in whole]
    for (_, _, x), (_, _, y) in zip(sink.segments, whole):
        np.testing.assert_array_equal(x, y)
    assert len(ends) >= len(whole) and len(set(calls)) > 10  # the plan's sizes, not the call sizes'


def test_a_short_input_runs_in_one_call():
    """Until the first segment ends the network gets up to ENDPOINT_FIRST_RUN_SECONDS a call (an utterance runs as
    one stream would), then ENDPOINT_RUN_SECONDS."""
    sizes = []

    class Counting(ScriptedNetwork):
        def accept(self, feats):
            sizes.append(len(feats) // STACK)
            return super().accept(feats)

    sink = Sink()
    ep = Endpointer(RULES, STACK, 2, FS, lambda: Counting([]), sink)
    ep.accept(features("." * 10 + "#" * 80 + "." * 9))
    ep.finish()
    assert sizes == [99] and [(a, b) for a, b, _ in sink.segments] == [(0, 99)]
    sizes.clear()
    ep = Endpointer(RULES, STACK, 2, FS, lambda: Counting([]), Sink())
    ep.accept(features("#" * 20 + "." * 400))  # 12.6 s: 4 s, then 1 s calls once the segment has ended
    assert sizes[0] == 133 and max(sizes[1:]) <= 33 and len(sizes) >= 9


def test_held_frames_run_in_calls_of_their_mode():
    """Held (an offline input): nothing runs until a call's worth is there (a short input: one call at its end);
    the first call is ``first``, a segment's ``segment`` (its first one, from the pause's middle, made up to that
    from the frames held), the wait between segments ``waiting``."""
    sizes = []

    class Counting(ScriptedNetwork):
        def accept(self, feats):
            sizes.append(len(feats) // STACK)
            return super().accept(feats)

    calls = CallSizes(first=1.2, segment=0.9, waiting=0.3, hold=True)  # 40, 30 and 10 output frames
    ep = Endpointer(RULES, STACK, 2, FS, lambda: Counting([]), Sink(), calls)
    ep.accept(features("#" * 30))
    assert sizes == []
    ep.finish()
    assert sizes == [30]
    sizes.clear()
    sink = Sink()
    ep = Endpointer(RULES, STACK, 2, FS, lambda: Counting([]), sink, calls)
    # speech 0-29, its pause fires at 40 (first call 0-39: the pause's first 10 frames, then the detector on the
    # rest); the wait: 40-49, 50-59, 60-69 (speech at 65); the next segment from (30 + 65) // 2 = 47: 47-69 again,
    # made up to 30 frames from the held ones (47-76), then 77-106, ...
    ep.accept(features("#" * 30 + "." * 35 + "#" * 30 + "." * 40))
    ep.finish()
    assert sizes[:6] == [40, 10, 10, 10, 30, 30], sizes
    assert [(a, b) for a, b, _ in sink.segments] == [(0, 35), (47, 100)]


def test_bad_rules_and_partial_stacks_are_errors():
    with pytest.raises(AsrError, match="min_silence"):
        EndpointRules(min_silence=0.0)
    with pytest.raises(AsrError, match="pad"):
        EndpointRules(min_silence=1.0, pad=0.2)
    ep = Endpointer(RULES, STACK, 2, FS, lambda: ScriptedNetwork([]), Sink())
    with pytest.raises(AsrError, match="whole stacks"):
        ep.accept(np.zeros((STACK + 1, 2), np.float32))


def test_rules_of_decode_settings():
    rules = EndpointRules.of_decode({"segment": "blank", "segment_min_silence": 0.5, "segment_max_seconds": 15})
    assert rules == EndpointRules(0.5, 2.0, 15.0)
    assert EndpointRules.of_decode({"segment": "none"}) is None
    assert EndpointRules.of_decode({"segment": "none"}, even_if_off=True, segment_pad=0.1) == EndpointRules(
        0.6, 0.3, 20.0
    )


class LaggingNetwork(ScriptedNetwork):
    """The scripted network holding back its last ``lag`` output frames until more input or ``finish`` (as an
    LC-BLSTM's right context does)."""

    lag = 2

    def __init__(self, started: list) -> None:
        super().__init__(started)
        self.held = np.zeros((0, 3), np.float32)

    def accept(self, feats: np.ndarray) -> np.ndarray:
        out = np.concatenate([self.held, super().accept(feats)])
        cut = max(0, len(out) - self.lag)
        self.held = out[cut:]
        return out[:cut]

    def finish(self) -> np.ndarray:
        out, self.held = self.held, np.zeros((0, 3), np.float32)
        return out


@pytest.mark.parametrize(
    "pattern",
    [
        "." * 10 + "#" * 20 + "." * 40 + "#" * 15 + "." * 30,
        "." * 37 + "#" * 9,
        "#" * 5 + "." * 45 + "#" * 13 + "." * 10,  # the last pause is complete only in the frames held back
        "." * 10 + "#" * 20 + "." * 41 + "#" * 17 + "." * 10,
    ],
)
def test_a_lagging_network_gives_the_segments_of_one_that_does_not(pattern):
    """The frames a network holds back come out where they belong: the same segments, to the frame and score, as
    from the same network without lag, a pause that ends in the last segment's held frames (given by ``finish``)
    included."""
    want, _ = run(pattern, RULES)
    sink, started = Sink(), []
    ep = Endpointer(RULES, STACK, 2, FS, lambda: LaggingNetwork(started), sink)
    feats = features(pattern)
    for i in range(0, len(feats), 4 * STACK):
        ep.accept(feats[i : i + 4 * STACK])
    ep.finish()
    got = sink.segments
    assert [(a, b) for a, b, _ in got] == [(a, b) for a, b, _ in want]
    for (_, _, g), (_, _, w) in zip(got, want):
        np.testing.assert_array_equal(g, w)
