"""Communication-efficient training (issue 30), 2 Gloo learners on CPU: the byte meter counts what is handed to
torch.distributed (collectives, point-to-point, other threads; checkpoint and metric traffic apart); powersgd
(torch's PowerSGD hook through DDP) keeps the learners identical and sends fewer bytes than sync once compression
starts, more so at a lower rank; diloco sends one model per H steps; both train; the bytes go to the log,
dist.rank<R>.json summary and TensorBoard; diloco with a quantised pseudo-gradient (outer_bits 8 / 4) sends what
asrlib/parallel/quant.py says it sends, measured, and its two-collective mean is the same on every learner; topk
(sparsified gradients with error feedback) keeps the learners identical and sends 6 bytes per value kept, as
diloco's sparsified update (outer_topk) does per outer step, its learners' rests averaged once at the end (and,
with outer_topk_dense_every, in bfloat16 at intervals, half a model each time). (Their
resume: tests/test_dist_resume.py; uneven shard ends: tests/test_dist_algorithms.py, which runs every algorithm of
ALGOS.)"""

import threading

import pytest
import torch
import torch.distributed as dist

from asrlib.errors import AsrError
from asrlib.parallel import meter
from asrlib.parallel.harness import run_learners, run_toy_scenarios
from helpers import make_toy_ctc_setup, toy_config_yaml


def _meter_calls(rank, world):
    m = meter.install()
    before = m.snapshot()
    dist.all_reduce(torch.zeros(100))  # 400 bytes sent by each learner
    dist.broadcast(torch.zeros(10, dtype=torch.float64), src=1)  # 80 from learner 1, received by learner 0
    if rank == 0:
        dist.send(torch.zeros(7, dtype=torch.int64), 1)  # 56
    else:
        dist.recv(torch.zeros(7, dtype=torch.int64), 0)
    t = threading.Thread(target=lambda: dist.all_gather([torch.zeros(3), torch.zeros(3)], torch.zeros(3)))
    t.start()  # another thread: 12 bytes each
    t.join()
    with m.category("bookkeeping"):
        dist.all_reduce(torch.zeros(1000))
    after = m.snapshot()
    return {
        "train": {k: after[k] - before[k] for k in after},
        "book": m.snapshot("bookkeeping"),
        "installed": getattr(dist.all_reduce, "__asrlib_meter__", False),
    }


def test_meter_counts_what_is_handed_to_torch_distributed():
    r0, r1 = run_learners(_meter_calls, 2, timeout=60)
    assert r0["installed"] and r1["installed"]
    assert r0["train"] == {"sent_bytes": 400 + 56 + 12, "recv_bytes": 80, "calls": 4}
    assert r1["train"] == {"sent_bytes": 400 + 80 + 12, "recv_bytes": 56, "calls": 4}
    assert r0["book"]["sent_bytes"] == 4000 and r0["book"]["calls"] == 1


def _param_bytes(run):
    return sum(v.numel() * v.element_size() for v in run["params"].values())


def test_powersgd_and_diloco_bytes_and_reporting(tmp_path):
    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 40, "dev": 6})
    cfg = toy_config_yaml(tmp_path / "c.yaml", epochs=3, checkpoint_every=5)
    runs = {
        "sync": ["train.dist.algo=sync"],
        "psgd1": ["train.dist.algo=powersgd", "train.dist.warmup_steps=2", "train.dist.powersgd_rank=1"],
        "psgd4": ["train.dist.algo=powersgd", "train.dist.warmup_steps=2", "train.dist.powersgd_rank=4"],
        # outer momentum 0.5: at so small an H the paper's 0.9 overshoots on the toy (measured)
        "diloco": ["train.dist.algo=diloco", "train.dist.period=4", "train.dist.outer_momentum=0.5"],
        # H 2 for the first 6 steps, then 4
        "dearly": ["train.dist.algo=diloco", "train.dist.period=4", "train.dist.outer_momentum=0.5"]
        + ["train.dist.early_period=2", "train.dist.early_steps=6"],
        **{
            f"dq{b}": ["train.dist.algo=diloco", "train.dist.period=4", "train.dist.outer_momentum=0.5"]
            + [f"train.dist.outer_bits={b}", "train.dist.outer_block=16"]
            for b in (8, 4)
        },
        # sparsified from step 3: 5 % of each parameter's values, positions and bfloat16 values
        "topk": ["train.dist.algo=topk", "train.dist.warmup_steps=2", "train.dist.topk_density=0.05"],
        # diloco H 1, plain averaging of 5 % of each learner's update (+ what it did not send before), after 2 steps
        # of synchronous SGD
        "dtopk": ["train.dist.algo=diloco", "train.dist.period=1", "train.dist.outer_lr=1.0"]
        + ["train.dist.outer_momentum=0", "train.dist.warmup_steps=2", "train.dist.outer_topk=0.05"],
        # the same, the learners' rests also averaged whole (bfloat16) after every 2nd outer step up to step 6
        "dtopk_dense": ["train.dist.algo=diloco", "train.dist.period=1", "train.dist.outer_lr=1.0"]
        + ["train.dist.outer_momentum=0", "train.dist.warmup_steps=2", "train.dist.outer_topk=0.05"]
        + ["train.dist.outer_topk_dense_every=2", "train.dist.outer_topk_dense_steps=6"],
    }
    scenarios = [
        dict(setup=str(setup), config=str(cfg), overrides=ov, exp_dir=str(tmp_path / name), watch=True)
        for name, ov in runs.items()
    ]
    res = run_learners(run_toy_scenarios, 2, args=(scenarios,), timeout=240)
    by = {name: (res[0][i], res[1][i]) for i, name in enumerate(runs)}
    for name, (a, b) in by.items():
        for k in a["params"]:  # every learner ends with the same model
            assert torch.equal(a["params"][k], b["params"][k]), (name, k)
        assert a["identity"]["max_diff"] == 0.0 and a["identity"]["checks"] > 0, name
    dev = {name: [m["loss"] for m in a["metrics"] if m["kind"] == "dev"] for name, (a, _) in by.items()}
    for name in runs:  # they train: the dev loss falls below the untrained log(5) = 1.61 and near sync's
        # (topk's sparse gradients slow Adam down: 0.51 against sync's 0.30 here, measured; docs/distributed.md)
        assert dev[name][-1] < min(1.0, (2.0 if name == "topk" else 1.5) * dev["sync"][-1]), (name, dev)
    steps = by["sync"][0]["summary"]["steps"]
    model = _param_bytes(by["sync"][0])
    sent = {name: [e["measured_sent_bytes"] for e in a["algo"]["epochs"]] for name, (a, _) in by.items()}
    # sync (DDP, torch's all-reduce hook): every step the gradients, in buckets, nothing else counted
    assert sum(sent["sync"]) == steps * model
    # powersgd: epochs 2 and 3 are compressed throughout; a lower rank sends less
    assert sent["psgd1"][2] < sent["psgd4"][2] < sent["sync"][2] / 2
    assert by["psgd1"][0]["algo"]["hook_compression_rate"] > by["psgd4"][0]["algo"]["hook_compression_rate"] > 1
    # diloco: one model-sized all-reduce per outer step (every H = 4 steps and a last one at the end)
    outer = by["diloco"][0]["algo"]["outer_steps"]
    assert outer == -(-steps // 4) and sum(sent["diloco"]) == (outer - 1) * model  # the last after the last epoch
    early = by["dearly"][0]["algo"]
    assert early["outer_steps"] == 3 + -(-(steps - 6) // 4) and early["early_H"] == 2 and early["early_steps"] == 6
    assert early["measured_sent_bytes"] == early["outer_steps"] * model  # the whole run, one model per outer step
    # quantised: per outer step one message of codes + float32 scales (block 16) per learner, half of it in the
    # all-to-all (the other half stays home) and the learner's averaged half in the all-gather
    n = model // 4
    chunk = -(-n // 32) * 16
    payload = {b: 2 * (chunk * b // 8 + chunk // 16 * 4) for b in (8, 4)}
    # dearly's last outer step falls inside the last epoch when its blocks after the early ones fill it exactly
    last = {"diloco": model, "dearly": model if (steps - 6) % 4 else 0, "dq8": payload[8], "dq4": payload[4]}
    for b in (8, 4):
        assert by[f"dq{b}"][0]["algo"]["outer_steps"] == outer and sum(sent[f"dq{b}"]) == (outer - 1) * payload[b]
        # per outer step 32 / (bits + 32 / block) times fewer bytes than a float32 model (less the padding)
        assert abs(model / payload[b] / (32 / (b + 2)) - 1) < 0.05, b
        # whole run, measured: sync's bytes over diloco's = (steps / outer steps) x that
        whole = sum(sent["sync"]) / by[f"dq{b}"][0]["algo"]["measured_sent_bytes"]
        assert whole == pytest.approx(steps / outer * model / payload[b]) and whole > 3.5 * 32 / (b + 2)
    # topk: two whole-gradient all-reduces, then per step 4 + 2 bytes for each value kept (ceil(5 %) a parameter)
    kept = sum(max(1, -(-v.numel() * 5 // 100)) for v in by["sync"][0]["params"].values())
    assert sum(sent["topk"]) == 2 * model + (steps - 2) * 6 * kept
    assert by["topk"][0]["algo"]["topk_sent_values"] == (steps - 2) * kept
    # diloco outer_topk: the same per outer step (one a step), then the learners' unsent rest averaged once at the end
    # (its warm-up all-reduces carry the learner's weight: 4 bytes more)
    assert sum(sent["dtopk"]) == 2 * (model + 4) + (steps - 2) * 6 * kept
    assert by["dtopk"][0]["algo"]["outer_topk_sent_values"] == (steps - 2) * kept
    last["dtopk"] = last["dtopk_dense"] = model
    # dense: outer steps 2 and 4 (trainer steps 4 and 6) also all-reduce the rests in bfloat16 (half a model each)
    assert sum(sent["dtopk_dense"]) == sum(sent["dtopk"]) + 2 * model // 2
    assert by["dtopk_dense"][0]["algo"]["outer_topk_dense_averages"] == 2 + 1  # and the float32 one at the end
    for name, (a, _) in by.items():  # the run's total includes what was sent after the last epoch end
        assert a["algo"]["measured_sent_bytes"] == sum(sent[name]) + last.get(name, 0), name
    for name, (a, b) in by.items():  # both learners report the mean over learners
        e = a["algo"]["epochs"][-1]
        assert e["measured_sent_bytes_mean"] == b["algo"]["epochs"][-1]["measured_sent_bytes_mean"]
        assert e["measured_sent_bytes_max"] >= e["measured_sent_bytes_mean"] > 0, name
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "diloco" / "tensorboard"))
    acc.Reload()
    mb = [s.value for s in acc.Scalars("comm/sent_MB_per_learner")]
    assert len(mb) == 3 and abs(sum(mb) - (outer - 1) * model / 1e6) < 1e-6


def test_quantise_roundtrip_and_packing():
    from asrlib.parallel import quant

    torch.manual_seed(0)
    x = torch.randn(4096)
    x[:64] = 0.0  # an all-zero block: scale 0, decoded exactly
    for bits, bound in ((8, 127), (4, 7)):
        codes, scale = quant.quantise(x, bits, 64)
        assert codes.dtype == torch.uint8 and codes.numel() == 4096 * bits // 8 and scale.numel() == 64
        y = quant.dequantise(codes, scale, bits, 64)
        assert torch.equal(y[:64], torch.zeros(64))
        # round to nearest: within half a step of the block's scale; the block maximum is hit exactly
        step = scale.repeat_interleave(64)
        assert bool(((x - y).abs() <= step / 2 + 1e-7).all())
        assert torch.allclose(y.reshape(64, 64).abs().amax(1), x.reshape(64, 64).abs().amax(1))
        assert torch.equal(quant.unpack(quant.pack(codes, scale), 4096, bits, 64), y)
        assert int(torch.round(y[64:128] / scale[1]).abs().max()) == bound
    with pytest.raises(AsrError, match="train.dist.outer_bits"):
        quant.check(3, 64)
    with pytest.raises(AsrError, match="train.dist.outer_block"):
        quant.check(4, 7)


def _quantised_means(rank, world):
    from asrlib.parallel.quant import QuantisedMean

    m = meter.install()
    before = m.snapshot()
    q = QuantisedMean(1000, 4, 32, rank, world)
    g = torch.Generator().manual_seed(rank)
    vs = [torch.randn(1000, generator=g) for _ in range(20)]
    means = [q.mean(v) for v in vs]
    return {
        "means": means,
        "vs": vs,
        "sent": m.snapshot()["sent_bytes"] - before["sent_bytes"],
        "payload": q.payload_bytes(),
        "state": q.state_dict(),
    }


def test_quantised_mean_is_shared_and_error_feedback_keeps_the_sum():
    """Every learner gets the same mean; with error feedback the sum of 20 means stays within one rounding step of
    the true sum (the remainders carried forward), while each single mean is off by up to a 4-bit step."""
    r0, r1 = run_learners(_quantised_means, 2, timeout=60)
    for a, b in zip(r0["means"], r1["means"]):
        assert torch.equal(a, b)
    true = [(a + b) / 2 for a, b in zip(r0["vs"], r1["vs"])]
    one = max(float((m - t).abs().max()) for m, t in zip(r0["means"], true))
    drift = float((sum(r0["means"]) - sum(true)).abs().max())
    assert one > 0.05 and drift < one
    # measured: 20 calls, each 2 messages (all-to-all, all-gather) of a 512-value chunk: 256 code bytes + 16 scales
    assert r0["sent"] == r1["sent"] == 20 * r0["payload"] == 20 * 2 * (1024 // 2 // 2 + 16 * 4)
    assert r0["state"]["error"].shape == (1024,) and r0["state"]["server_error"].shape == (512,)


def _sparse_means(rank, world):
    from asrlib.parallel.sparse import SparseMean

    m = meter.install()
    before = m.snapshot()
    sizes = [600, 300, 100]  # three "parameters": 3, 2 and 1 values kept of each at 0.005
    sp = SparseMean(sizes, 16, world)
    g = torch.Generator().manual_seed(rank)
    vs = [torch.randn(1000, generator=g) for _ in range(30)]
    means = [sp.mean(v, 0.005) for v in vs]
    return {"means": means, "vs": vs, "sent": m.snapshot()["sent_bytes"] - before["sent_bytes"], "sp": sp.state_dict()}


def test_sparse_mean_is_shared_keeps_per_parameter_tops_and_loses_nothing():
    """Every learner gets the same mean, 6 values a call from each (the largest of gradient plus residual in each
    parameter's segment, at least one each), 6 bytes a value; the sum of the means plus the residuals' mean is the
    sum of the vectors (error feedback delays, never drops: bfloat16 rounding included)."""
    from asrlib.parallel import sparse

    r0, r1 = run_learners(_sparse_means, 2, timeout=60)
    for a, b in zip(r0["means"], r1["means"]):
        assert torch.equal(a, b)
        assert int((a != 0).sum()) <= 12
        assert [int((a[s] != 0).sum()) > 0 for s in (slice(0, 600), slice(600, 900), slice(900, 1000))] == [True] * 3
    first = (r0["vs"][0] + r1["vs"][0]) / 2  # the first call: each learner's own 3 / 2 / 1 largest, bf16-rounded
    top = torch.zeros(1000)
    for v in (r0["vs"][0], r1["vs"][0]):
        for (lo, hi), k in zip(((0, 600), (600, 900), (900, 1000)), (3, 2, 1)):
            i = v[lo:hi].abs().topk(k).indices + lo
            top[i] += v[i].to(torch.bfloat16).float() / 2
    assert torch.equal(r0["means"][0], top) and not torch.equal(top, first)
    total = sum(r0["means"]) + (r0["sp"]["residual"] + r1["sp"]["residual"]) / 2
    assert torch.allclose(total, sum((a + b) / 2 for a, b in zip(r0["vs"], r1["vs"])), atol=1e-4)
    assert r0["sent"] == r1["sent"] == 30 * 6 * 6 and r0["sp"]["sent_values"] == 30 * 6
    assert sparse.kept([600, 300, 100], 0.005) == [3, 2, 1] and sparse.kept([10], 1e-9) == [1]
    with pytest.raises(AsrError, match="outer_topk"):
        sparse.check(0.0, 16, "train.dist.outer_topk")
    with pytest.raises(AsrError, match="topk_value_bits"):
        sparse.check(0.1, 8, "train.dist.topk_density")
    with pytest.raises(AsrError, match="topk_index_bits"):
        sparse.check(0.1, 16, "train.dist.topk_density", 8)


def _dense_rest_average(rank, world, bits):
    from asrlib.config import DistConfig
    from asrlib.parallel.diloco import Diloco

    cfg = DistConfig(algo="diloco", period=1, outer_lr=1.0, outer_momentum=0, outer_topk=0.01)
    d = Diloco(cfg)
    d.model = torch.nn.Linear(30, 10)  # 310 values
    g = torch.Generator().manual_seed(100 + rank)
    theta = torch.randn(310, generator=torch.Generator().manual_seed(5))  # the same on every learner
    rest = torch.randn(310, generator=g) * 1e-3  # this learner's unsent rest
    d.theta = torch.nn.Parameter(theta.clone())
    d.sparse = d._sparsifier()
    d.sparse.residual = rest.clone()
    d.set_flat_params(theta - rest)  # the learner's model: theta less its rest
    m = meter.install()
    before = m.snapshot()["sent_bytes"]
    d.average_rests(bits)
    return {
        "rest": rest,
        "theta": d.theta.detach().clone(),
        "kept": d.sparse.residual.clone(),
        "model": d.flat_params(),
        "sent": m.snapshot()["sent_bytes"] - before,
        "count": d.dense_averages,
    }


@pytest.mark.parametrize("bits", [16, 32])
def test_diloco_dense_rest_average_meets_the_models_and_keeps_the_rounding(bits):
    """outer_topk_dense_every's step: every learner's theta takes off the mean of the learners' rests (sent at
    ``bits``), each learner keeps what bfloat16 rounded off its own rest, so its model is theta less that; the bytes
    sent are the model's size at ``bits``."""
    r0, r1 = run_learners(_dense_rest_average, 2, args=(bits,), timeout=60)
    assert torch.equal(r0["theta"], r1["theta"])  # the same shared model on both
    theta0 = torch.randn(310, generator=torch.Generator().manual_seed(5))
    if bits == 32:
        want = theta0 - (r0["rest"] + r1["rest"]) / 2
        assert torch.allclose(r0["theta"], want, atol=1e-7)
        for r in (r0, r1):  # nothing left: every model is theta exactly
            assert not r["kept"].any() and torch.equal(r["model"], r["theta"])
    else:
        for r in (r0, r1):  # what bfloat16 dropped stays with its learner: rest = sent + kept exactly
            sent = r["rest"].to(torch.bfloat16).float()
            assert torch.equal(r["kept"], r["rest"] - sent) and r["kept"].abs().max() > 0
            assert torch.allclose(r["model"], r["theta"] - r["kept"], atol=1e-7)
        # the mean of what was sent, rounded once more as a bfloat16 sum: within a bfloat16 step of it
        sent_mean = (r0["rest"].to(torch.bfloat16).float() + r1["rest"].to(torch.bfloat16).float()) / 2
        err = (theta0 - sent_mean - r0["theta"]).abs()
        assert err.max() <= 2**-8 * sent_mean.abs().max() * 2 + 1e-7
        # the learners' models differ by their kept rounding only: far less than their rests did
        diff = (r0["model"] - r1["model"]).abs().max()
        assert diff < 0.01 * (r0["rest"] - r1["rest"]).abs().max()
    assert r0["sent"] == r1["sent"] == 310 * bits // 8 and r0["count"] == 1


def _sparse_means_16bit_positions(rank, world):
    from asrlib.parallel.sparse import SparseMean

    m = meter.install()
    before = m.snapshot()
    sp = SparseMean([70000, 300], 16, world, index_bits=16)  # blocks of 65 536 and 4 464 values, then 300
    g = torch.Generator().manual_seed(rank)
    vs = [torch.randn(70300, generator=g) for _ in range(5)]
    means = [sp.mean(v, 0.001) for v in vs]
    return {"means": means, "vs": vs, "sent": m.snapshot()["sent_bytes"] - before["sent_bytes"], "sp": sp.state_dict()}


def test_sparse_mean_with_16bit_positions_selects_per_block_and_decodes_offsets():
    """16-bit positions: a parameter longer than 65 536 values is selected in blocks (66 + 5 + 1 values kept at 0.1 %),
    the offsets (those past 32 767 too, which wrap in int16) decode to the same positions on both learners, 4 bytes a
    value; nothing is lost."""
    from asrlib.parallel import sparse

    assert sparse.blocks([70000, 300], 16) == [65536, 4464, 300] and sparse.blocks([70000, 300], 32) == [70000, 300]
    r0, r1 = run_learners(_sparse_means_16bit_positions, 2, timeout=60)
    for a, b in zip(r0["means"], r1["means"]):
        assert torch.equal(a, b)
    top = torch.zeros(70300)
    for v in (r0["vs"][0], r1["vs"][0]):
        for (lo, hi), k in zip(((0, 65536), (65536, 70000), (70000, 70300)), (66, 5, 1)):
            i = v[lo:hi].abs().topk(k).indices + lo
            top[i] += v[i].to(torch.bfloat16).float() / 2
    assert torch.equal(r0["means"][0], top)
    nz = r0["means"][0].nonzero().flatten()
    assert bool(((nz >= 32768) & (nz < 65536)).any()) and bool(((nz >= 65536) & (nz < 70000)).any())
    total = sum(r0["means"]) + (r0["sp"]["residual"] + r1["sp"]["residual"]) / 2
    assert torch.allclose(total, sum((a + b) / 2 for a, b in zip(r0["vs"], r1["vs"])), atol=1e-4)
    assert r0["sent"] == r1["sent"] == 5 * 72 * 4 and r0["sp"]["sent_values"] == 5 * 72


@pytest.mark.parametrize("bits,index_bits", [(16, 32), (32, 32), (16, 16), (32, 16)])
def test_sparse_message_round_trips_with_an_odd_count(bits, index_bits):
    """Positions and values come back from a message of 3 values whatever the widths (the wider part first, so each
    part's bytes can be viewed as its type); 32-bit values exactly, 16-bit ones bfloat16-rounded."""
    from asrlib.parallel import sparse

    idx, base = torch.tensor([5, 40000, 65537]), torch.tensor([0, 0, 65536])
    vals = torch.tensor([0.1, -2.5, 3.0])
    msg = sparse.pack(idx, base, vals, bits, index_bits)
    assert msg.numel() == 3 * (bits + index_bits) // 8
    got_idx, got_vals = sparse.unpack(msg, base, bits, index_bits)
    assert torch.equal(got_idx, idx)
    assert torch.equal(got_vals, vals if bits == 32 else vals.to(torch.bfloat16).float())
