"""The timing model: the slides' ring formula (linear, then saturating), link fitting, the scaling report CLI."""

import dataclasses
import json
import math

import pytest

from asrlib.parallel.timing import LINKS, Link, TimingParams, fit_link, ring_wait, save_params, speedup, step_time


def _params(**kw):
    base = dict(t_calc=0.1, t_merge=0.002, model_bytes=4e6, link=Link("test", 1e9, 1e-4), period=4)
    return TimingParams(**{**base, **kw})


def test_ring_matches_the_slides():
    p = _params()
    tt, tm, tc = p.transmit(), p.t_merge, p.t_calc
    for n in range(1, 65):
        expected = n * (tc + tm) / (tc + tm + max(n * tt + (n - 1) * tm - tc, 0.0))
        assert speedup("ring", n, p) == pytest.approx(expected)
        if n * (tt + tm) <= tc + tm:  # the lap fits in one T_calc: linear
            assert speedup("ring", n, p) == pytest.approx(n)
    # beyond that it saturates near (T_calc + T_merge) / (T_transmit + T_merge)
    assert speedup("ring", 4096, p) == pytest.approx((tc + tm) / (tt + tm), rel=0.01)
    assert ring_wait(3, 1.0, 0.1, 0.1) == 0.0 and ring_wait(10, 1.0, 0.1, 0.1) == pytest.approx(0.9)


def test_algorithm_ordering_and_limits():
    p = _params(link=LINKS["eth10"], t_calc=0.02)
    for algo in ("sync", "ma", "bmuf", "adpsgd", "hadpsgd", "asgd", "ring"):
        assert speedup(algo, 1, p) == pytest.approx(1.0)
        assert speedup(algo, 64, p) <= 64 + 1e-9
    # communicating every K steps beats every step; the parameter server saturates
    assert speedup("ma", 32, p) > speedup("sync", 32, p)
    assert speedup("asgd", 64, p) < speedup("asgd", 16, p) * 4
    # contention: 4 learners on 2 cores cannot beat 2x
    assert speedup("ma", 4, _params(cores=2)) <= 2.0 + 1e-9


def test_fit_link_recovers_latency_and_bandwidth():
    sizes = [1e3, 1e5, 1e6, 8e6]
    link = fit_link(sizes, [50e-6 + s / 2e9 for s in sizes])
    assert link.latency == pytest.approx(50e-6, rel=1e-6) and link.bandwidth == pytest.approx(2e9, rel=1e-6)


def test_scaling_report_cli(tmp_path):
    from steps.scaling_report import main

    save_params(tmp_path / "params.json", _params(cores=2))
    measured = [{"algo": "sync", "n": 1, "step_s": 0.102}, {"algo": "ring", "n": 2, "step_s": 0.11}]
    (tmp_path / "m.json").write_text(json.dumps(measured))
    assert (
        main(
            [
                "--params",
                str(tmp_path / "params.json"),
                "--measured",
                str(tmp_path / "m.json"),
                "--link",
                "eth100",
                "--max-n",
                "16",
                "--out-dir",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    out = json.loads((tmp_path / "out" / "scaling.json").read_text())
    assert [n for n, _ in out["speedup"]["sync"]] == [1, 2, 4, 8, 16]
    v = out["validation"][0]
    assert v["predicted_s"] == pytest.approx(0.102) and math.isclose(v["error_pct"], 0.0, abs_tol=1e-6)
    assert (tmp_path / "out" / "scaling.png").stat().st_size > 5000
    assert "Validation" in (tmp_path / "out" / "scaling.md").read_text()


def test_measured_contention_scales_compute_and_extrapolates(tmp_path):
    """c(n) from the machine's measurement slows T_calc and T_merge; beyond it, c grows with n; without one,
    n / cores; learners with their own device (cores None) do not contend."""
    p = _params(cores=2, contention={1: 1.0, 2: 1.1, 4: 2.3})
    assert p.slowdown(1) == 1.0 and p.slowdown(2) == pytest.approx(1.1) and p.slowdown(3) == pytest.approx(1.1 * 1.5)
    assert p.slowdown(8) == pytest.approx(4.6)
    assert step_time("ma", 2, p) == pytest.approx(1.1 * (0.1 + 0.002) + (p.allreduce(2) + 1.1 * 0.002) / 4)
    assert _params(cores=2).slowdown(4) == 2.0 and _params(cores=2).slowdown(2) == 1.0
    assert _params(contention={2: 3.0}).slowdown(2) == 1.0
    from asrlib.parallel.timing import load_params

    save_params(tmp_path / "p.json", p)  # JSON keys are strings: read back as learner counts
    assert load_params(tmp_path / "p.json").slowdown(4) == pytest.approx(2.3)


def test_timed_allreduce_replaces_the_point_to_point_figures_on_its_link(tmp_path):
    from asrlib.parallel.timing import fit_allreduce, load_params

    ar = fit_allreduce([(n, b, 2 * (n - 1) * 1e-3 + 2 * (n - 1) / n * b / 1e8) for n in (2, 4) for b in (1e5, 4e6)])
    assert ar.latency == pytest.approx(1e-3, rel=1e-6) and ar.bandwidth == pytest.approx(1e8, rel=1e-6)
    p = _params(allreduce_link=ar)
    assert p.allreduce(2) == pytest.approx(2e-3 + 4e6 / 1e8)  # the timed collective, not the link's
    assert _params().allreduce(2) == pytest.approx(2e-4 + 4e6 / 1e9)
    assert p.allreduce(2, LINKS["nvlink"]) == _params().allreduce(2, LINKS["nvlink"])  # another link: its own
    save_params(tmp_path / "p.json", p)
    assert load_params(tmp_path / "p.json").allreduce(4) == pytest.approx(p.allreduce(4))


def test_compressed_payloads_powersgd_and_diloco():
    """powersgd pays three all-reduce latencies per step for its measured payload; diloco one model all-reduce per
    H steps; a higher bandwidth helps sync far more than diloco; the payload is read from a run's measured bytes."""
    from asrlib.parallel.timing import payload_per_step, with_bandwidth

    slow = _params(link=with_bandwidth(LINKS["eth10"], 10), t_calc=0.05)
    p = dataclasses.replace(slow, powersgd_payload=4e6 / 100, diloco_period=100)
    assert step_time("powersgd", 8, p) == pytest.approx(0.052 + p.allreduce(8, nbytes=4e4, calls=3))
    assert p.allreduce(8, nbytes=4e4, calls=3) == pytest.approx(2 * 7 * 20e-6 * 3 + 2 * 7 / 8 * 4e4 / 1.25e9)
    assert step_time("diloco", 8, p) == pytest.approx(0.052 + (p.allreduce(8) + 0.004) / 100)
    for n in (8, 64, 256):
        assert speedup("diloco", n, p) > max(speedup("powersgd", n, p), speedup("sync", n, p))
    assert speedup("powersgd", 8, p) > speedup("sync", 8, p)
    # a ring all-reduce pays 2 (n-1) latencies per call: at 256 learners powersgd's three calls cost more than
    # the bandwidth it saves
    assert speedup("powersgd", 256, p) < speedup("sync", 256, p)
    fast = dataclasses.replace(p, link=with_bandwidth(LINKS["eth100"], 100))
    assert speedup("sync", 64, fast) / speedup("sync", 64, p) > speedup("diloco", 64, fast) / speedup("diloco", 64, p)
    assert with_bandwidth(LINKS["eth10"], 100).bandwidth == 100e9 / 8
    unmeasured = dataclasses.replace(p, powersgd_payload=0.0)  # no measurement: the uncompressed model
    assert step_time("powersgd", 8, unmeasured) == pytest.approx(0.052 + p.allreduce(8, calls=3))
    run = {"epochs": [{"steps": 10, "measured_sent_bytes": 10 * 4e6}, {"steps": 20, "measured_sent_bytes": 20 * 4e4}]}
    assert payload_per_step(run) == pytest.approx(4e4) and payload_per_step(run, skip_epochs=0) > 4e4


def test_topk_pays_an_all_gather_that_grows_with_the_learners():
    """topk: one ring all-gather of its measured payload per step, (n-1) latencies and n-1 messages received; so it
    beats sync where bytes dominate, and its share of sync's communication grows with the learners."""
    from asrlib.parallel.timing import with_bandwidth

    p = _params(link=with_bandwidth(LINKS["eth10"], 10), t_calc=0.05, topk_payload=4e6 / 133, t_sparsify=0.001)
    assert step_time("topk", 8, p) == pytest.approx(0.053 + 7 * (20e-6 + 4e6 / 133 / 1.25e9))
    assert step_time("topk", 1, p) == step_time("local", 1, p)
    assert speedup("topk", 8, p) > speedup("sync", 8, p)
    share = [p.allgather(n, p.topk_payload) / p.allreduce(n) for n in (2, 8, 64, 256)]
    assert share == sorted(share) and share[-1] > 2 * share[0]
    # diloco with a sparsified pseudo-gradient (outer_topk): the same all-gather, once per H steps
    d = dataclasses.replace(p, diloco_payload=p.topk_payload, diloco_period=1, diloco_gather=True)
    assert step_time("diloco", 8, d) == pytest.approx(0.052 + p.allgather(8, p.topk_payload) + 0.004)
    unmeasured = dataclasses.replace(p, topk_payload=0.0)  # no measurement: the float32 model, gathered
    assert step_time("topk", 8, unmeasured) > step_time("sync", 8, unmeasured)


def test_quantised_diloco_payload(tmp_path):
    """A quantised pseudo-gradient (diloco outer_bits 4) is one all-reduce-shaped exchange of the measured payload
    per H steps plus the quantising; at a few bits it gets closer to linear than float32 diloco at the same H, most
    where the link is slow; the payload per outer step is read from a run's measured bytes."""
    from asrlib.parallel.timing import payload_per_outer_step, with_bandwidth

    p = _params(link=with_bandwidth(LINKS["eth10"], 10), t_calc=0.01, t_merge=5e-4, model_bytes=2.5e7)
    f32 = dataclasses.replace(p, diloco_period=32)
    q4 = dataclasses.replace(f32, diloco_payload=2.5e7 / 7.5, t_quantise=0.002)
    assert step_time("diloco", 8, q4) == pytest.approx(0.0105 + (q4.allreduce(8, nbytes=2.5e7 / 7.5) + 0.003) / 32)
    assert step_time("diloco", 8, f32) == pytest.approx(0.0105 + (p.allreduce(8) + 0.001) / 32)
    for n in (8, 64, 256):
        assert speedup("sync", n, q4) < speedup("diloco", n, f32) < speedup("diloco", n, q4) <= n
    fast = {k: dataclasses.replace(v, link=with_bandwidth(LINKS["eth100"], 100)) for k, v in (("f", f32), ("q", q4))}
    gain_slow = speedup("diloco", 64, q4) / speedup("diloco", 64, f32)
    assert gain_slow > speedup("diloco", 64, fast["q"]) / speedup("diloco", 64, fast["f"]) > 1
    run = {"measured_sent_bytes": 96 * 3.3e6, "outer_steps": 96, "H": 32}
    assert payload_per_outer_step(run) == pytest.approx(3.3e6)
    from steps.scaling_report import main

    (tmp_path / "run" / "log").mkdir(parents=True)
    (tmp_path / "run" / "log" / "dist.rank0.json").write_text(json.dumps(run))
    save_params(tmp_path / "p.json", p)
    args = ["--params", str(tmp_path / "p.json"), "--diloco-run", str(tmp_path / "run"), "--algos", "sync", "diloco"]
    assert main([*args, "--link", "eth10", "--max-n", "8", "--out-dir", str(tmp_path / "out")]) == 0
    out = json.loads((tmp_path / "out" / "scaling.json").read_text())
    assert out["params"]["diloco_payload"] == pytest.approx(3.3e6) and out["params"]["diloco_period"] == 32


def test_collectives_of_one_learner_cost_nothing_and_grow_with_the_ring():
    """A ring all-gather or all-reduce among n learners takes n - 1 (2(n - 1)) link steps; one learner sends
    nothing, so its collectives take no time (a negative or non-zero time would shift every n = 1 prediction)."""
    p = _params()
    assert p.allgather(1, 1e6) == 0.0 and p.allreduce(1) == 0.0
    step = p.link.latency + 1e6 / p.link.bandwidth
    for n in (2, 3, 8):
        assert p.allgather(n, 1e6) == pytest.approx((n - 1) * step)
