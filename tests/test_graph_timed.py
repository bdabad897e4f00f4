"""asrlib.lang.graphs.timed, the graph build's cost per step (bench/graph_scale.py and the lang stage's log report
it): the wall and CPU seconds of the block and the peak RSS in MiB, on clocks the test sets (no real time)."""

from types import SimpleNamespace

from asrlib.lang import graphs


def test_timed_records_the_blocks_wall_and_cpu_seconds_and_peak_rss(monkeypatch):
    wall, cpu = iter([100.0, 101.5]), iter([20.0, 20.75])
    monkeypatch.setattr(graphs.time, "perf_counter", lambda: next(wall))
    monkeypatch.setattr(graphs.time, "process_time", lambda: next(cpu))
    monkeypatch.setattr(graphs.resource, "getrusage", lambda who: SimpleNamespace(ru_maxrss=3 * 1024 * 1024))
    record = {}
    with graphs.timed("LG", record):
        pass
    assert record == {"LG": {"wall_s": 1.5, "cpu_s": 0.75, "peak_rss_mib": 3072.0}}  # ru_maxrss is in KiB
