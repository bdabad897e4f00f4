"""asrlib.parallel.stats.CommStats, the accounting every algorithm's bytes and messages figures come from: each
kind of exchange by its ring estimate, one message each, on a clock the test sets for the time fields."""

import pytest

from asrlib.parallel import stats
from asrlib.parallel.stats import CommStats


def test_each_exchange_counts_its_bytes_and_one_message():
    s = CommStats()
    s.all_reduce(1000, 4)  # ring: 2 (n-1)/n of the payload each way
    assert (s.sent_bytes, s.recv_bytes, s.payload_bytes, s.messages) == (1500.0, 1500.0, 1000, 1)
    s.all_gather(100, 4)  # each learner's block passed on n - 1 times
    assert (s.sent_bytes, s.recv_bytes, s.payload_bytes, s.messages) == (1800.0, 1800.0, 1100, 2)
    s.broadcast(10, 4, root=True)
    s.broadcast(10, 4, root=False)
    assert (s.sent_bytes, s.recv_bytes, s.messages) == (1830.0, 1810.0, 4)
    s.send(7)
    s.recv(5)
    assert (s.sent_bytes, s.recv_bytes, s.payload_bytes, s.messages) == (1837.0, 1815.0, 1132, 6)
    one = CommStats()
    one.all_reduce(1000, 1)  # alone: nothing on the wire, still a call
    assert (one.sent_bytes, one.recv_bytes, one.messages) == (0.0, 0.0, 1)
    assert (s - one).messages == 5 and (s + one).payload_bytes == 2132


def test_timed_adds_the_blocks_seconds_to_its_field(monkeypatch):
    ticks = iter([10.0, 10.5, 20.0, 20.25])
    monkeypatch.setattr(stats.time, "perf_counter", lambda: next(ticks))
    s = CommStats()
    with s.timed():
        pass
    with s.timed("wait_s"):
        pass
    assert s.comm_s == pytest.approx(0.5) and s.wait_s == pytest.approx(0.25)
