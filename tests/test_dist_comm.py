"""Communication-efficient training (issue 30), 2 Gloo learners on CPU: the byte meter counts what is handed to
torch.distributed (collectives, point-to-point, other threads; checkpoint and metric traffic apart); powersgd
(torch's PowerSGD hook through DDP) keeps the learners identical and sends fewer bytes than sync once compression
starts, more so at a lower rank; diloco sends one model per H steps; both train; the bytes go to the log,
dist.rank<R>.json summary and TensorBoard. (Their resume: tests/test_dist_resume.py; uneven shard ends:
tests/test_dist_algorithms.py, which runs every algorithm of ALGOS.)"""

import threading

import torch
import torch.distributed as dist

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
        assert dev[name][-1] < min(1.0, 1.5 * dev["sync"][-1]), (name, dev)
    steps = by["sync"][0]["summary"]["steps"]
    model = _param_bytes(by["sync"][0])
    sent = {name: [e["measured_sent_bytes"] for e in a["algo"]["epochs"]] for name, (a, _) in by.items()}
    # sync: every step one all-reduce of the gradients plus the data weight (4 bytes), nothing else counted
    assert sum(sent["sync"]) == steps * (model + 4)
    # powersgd: epochs 2 and 3 are compressed throughout; a lower rank sends less
    assert sent["psgd1"][2] < sent["psgd4"][2] < sent["sync"][2] / 2
    assert by["psgd1"][0]["algo"]["hook_compression_rate"] > by["psgd4"][0]["algo"]["hook_compression_rate"] > 1
    # diloco: one model-sized all-reduce per outer step (every H = 4 steps and a last one at the end)
    outer = by["diloco"][0]["algo"]["outer_steps"]
    assert outer == -(-steps // 4) and sum(sent["diloco"]) == (outer - 1) * model  # the last after the last epoch
    for name, (a, _) in by.items():  # the run's total includes what was sent after the last epoch end
        assert a["algo"]["measured_sent_bytes"] == sum(sent[name]) + (model if name == "diloco" else 0), name
    for name, (a, b) in by.items():  # both learners report the mean over learners
        e = a["algo"]["epochs"][-1]
        assert e["measured_sent_bytes_mean"] == b["algo"]["epochs"][-1]["measured_sent_bytes_mean"]
        assert e["measured_sent_bytes_max"] >= e["measured_sent_bytes_mean"] > 0, name
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "diloco" / "tensorboard"))
    acc.Reload()
    mb = [s.value for s in acc.Scalars("comm/sent_MB_per_learner")]
    assert len(mb) == 3 and abs(sum(mb) - (outer - 1) * model / 1e6) < 1e-6
