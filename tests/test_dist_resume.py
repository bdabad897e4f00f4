"""Resume of distributed training (2 Gloo learners): a run stopped mid-block and mid-epoch right after a checkpoint
and resumed ends bit-identical to an uninterrupted run for sync, ma, bmuf (global model + block momentum; also with
the block exchange overlapped, which a checkpoint completes), ring (the travelling model), powersgd (each
learner's error feedback, warm-start P/Q and the hook's generator) and diloco (global model, outer Nesterov
momentum, every learner's model; with outer_bits 4 also every learner's quantisation error feedback) and topk (every
learner's residual and the density ramp's position), with dropout and
SpecAugment on (every learner's RNG is checkpointed) and Adam."""

import torch

from asrlib.parallel.harness import run_learners, run_toy_scenarios
from asrlib.train.checkpoint import read_rank_parts
from helpers import make_toy_ctc_setup, toy_config_yaml

ALGOS = {
    "sync": [],
    "ma": ["train.dist.period=3"],
    "bmuf": ["train.dist.period=3"],
    "ring": [],
    "bmuf_overlap": ["train.dist.period=3", "train.dist.overlap=true"],
    "powersgd": ["train.dist.warmup_steps=2", "train.dist.powersgd_rank=2"],  # compressed from step 3
    "diloco": ["train.dist.period=3"],
    # 4-bit pseudo-gradient: every learner's error feedback (its own and its chunk's mean's) in the checkpoint
    "diloco_q4": ["train.dist.period=3", "train.dist.outer_bits=4", "train.dist.outer_block=16"],
    # sparsified from step 3, the density ramping down over 3 steps: every learner's residual in the checkpoint
    "topk": ["train.dist.warmup_steps=2", "train.dist.topk_density=0.05", "train.dist.topk_ramp_steps=3"],
    # each learner's unsent rest, in its model and as its residual (positions sent as 16-bit offsets), the rests
    # also averaged whole after outer steps 3, 6 and 9 (what bfloat16 rounded off kept in each residual)
    "diloco_topk": [
        "train.dist.period=1",
        "train.dist.outer_momentum=0",
        "train.dist.outer_topk=0.05",
        "train.dist.topk_index_bits=16",
        "train.dist.outer_topk_dense_every=3",
        "train.dist.outer_topk_dense_steps=9",
    ],
}


def test_resume_is_exact(tmp_path):
    setup = make_toy_ctc_setup(tmp_path / "toy")
    cfg = toy_config_yaml(tmp_path / "c.yaml", checkpoint_every=4, epochs=2)  # 6 steps per learner per epoch
    scenarios = []
    for algo, ov in ALGOS.items():
        common = dict(setup=str(setup), config=str(cfg), overrides=[f"train.dist.algo={algo.split('_')[0]}", *ov])
        scenarios += [
            dict(common, exp_dir=str(tmp_path / f"{algo}_ref")),
            dict(common, exp_dir=str(tmp_path / f"{algo}_res"), stop_after=4),  # mid-block, mid-epoch
            dict(common, exp_dir=str(tmp_path / f"{algo}_res")),
        ]
    res = run_learners(run_toy_scenarios, 2, args=(scenarios,), timeout=240)
    for rank in range(2):
        for i, algo in enumerate(ALGOS):
            ref, stopped, resumed = res[rank][3 * i : 3 * i + 3]
            assert stopped == {"stopped_at": 4}
            assert resumed["summary"]["steps"] == ref["summary"]["steps"] == 12
            for k in ref["params"]:
                assert torch.equal(ref["params"][k], resumed["params"][k]), (algo, rank, k)

            def dev(r):
                return [m["loss"] for m in r["metrics"] if m["kind"] == "dev"]

            assert dev(ref) == dev(resumed), algo
    latest = tmp_path / "bmuf_res" / "checkpoints" / "latest.pt"
    ck = torch.load(latest, weights_only=True)["algo"]
    assert ck["world_size"] == 2 and "per_rank" not in ck  # rank 0 holds no other learner's state
    parts = read_rank_parts(latest)  # each learner's part in a file of its own, its own model in it
    assert [sorted(p) for p in parts] == [["model", "optimizer", "rng"]] * 2
    # parts are kept for the checkpoints a file names (latest.pt, epoch-1.pt, epoch-2.pt), the rest removed
    kept = sorted(p.name for p in (latest.parent / "ranks").iterdir())
    assert kept == [f"step{s}.rank{r}.pt" for s in (12, 6) for r in (0, 1)], kept
    assert {"W", "Wg", "delta"} <= set(ck["shared"]) and float(ck["shared"]["delta"].abs().sum()) > 0
    errors = [r["error"] for r in read_rank_parts(tmp_path / "powersgd_res" / "checkpoints" / "latest.pt")]
    # per learner, and not the same on both
    assert all(float(e[0].abs().sum()) > 0 for e in errors) and not torch.equal(errors[0][0], errors[1][0])
    ck = torch.load(tmp_path / "diloco_res" / "checkpoints" / "latest.pt", weights_only=True)["algo"]
    momentum = ck["shared"]["outer"]["state"][0]["momentum_buffer"]
    assert float(momentum.abs().sum()) > 0 and ck["shared"]["syncs"] >= 1
    quant = [r["quant"] for r in read_rank_parts(tmp_path / "diloco_q4_res" / "checkpoints" / "latest.pt")]
    # per learner, and not the same on both
    for key in ("error", "server_error"):
        assert all(float(q[key].abs().sum()) > 0 for q in quant) and not torch.equal(quant[0][key], quant[1][key])
