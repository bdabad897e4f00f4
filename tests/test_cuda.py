"""train.device / train.precision on a real CUDA device (issue 25): skipped where torch sees none, as on CI.

tests/test_device.py checks placement on a stand-in device without a GPU; this module runs the same code paths on the
GPU itself: cuDNN's LSTM and the inductor-compiled peephole cell against the CPU, a training run in bf16 and fp16 whose
checkpoint resumes on the CPU, inference, and one NCCL learner through DDP (sync, powersgd) and DiLoCo.
``ASR_TEST_CUDA_DEVICE=cpu`` runs them on the CPU instead: a dry run of this module, not a GPU check.

    pytest tests/test_cuda.py          # on a GPU machine (bench/gpu_smoke.sh installs what the project needs)
"""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from asrlib.cli import env_with_root
from asrlib.config import ModelConfig
from asrlib.models.device import to_device
from asrlib.models.lstm import build_model
from asrlib.train.checkpoint import load_checkpoint
from helpers import toy_trainer as _trainer, make_toy_ctc_setup, toy_config_yaml, toy_dirs

ROOT = Path(__file__).resolve().parents[1]

DEVICE = os.environ.get("ASR_TEST_CUDA_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(
    DEVICE.startswith("cuda") and not torch.cuda.is_available(),
    reason="needs a CUDA device (torch sees none); tests/test_device.py checks placement without one",
)


@pytest.fixture(autouse=True)
def _fresh_compiler():
    """Each test compiles the peephole cell afresh (its variants would otherwise pile up across tests)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _dev() -> torch.device:
    return torch.device(DEVICE)


def _model(**kw) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = ModelConfig(num_layers=2, hidden_size=32, proj_size=16, stack=3, dropout=0.0, **kw)
    return build_model(20, 5, cfg)


@pytest.mark.parametrize(
    "layers", [{}, {"bidirectional": True}, {"peephole": True}, {"peephole": True, "bidirectional": True}]
)
def test_the_network_on_the_device_computes_what_it_computes_on_the_cpu(layers):
    """fp32 forward and gradients, cuDNN's LSTMP and the compiled peephole cell (auto: compiled on CUDA), two batch
    shapes (the compiled cell takes dynamic shapes)."""
    cpu, dev = _model(**layers), _model(**layers).to(_dev())
    for n, t in [(3, 30), (5, 17)]:
        x = torch.randn(n, t, 20)
        lens = torch.tensor([t] + [t - 1 - i for i in range(n - 1)])
        a, _ = cpu(x, lens)
        b, _ = dev(x.to(_dev()), lens.to(_dev()))
        assert (a - b.cpu()).abs().max() < 1e-4
        a.sum().backward()
        b.sum().backward()
    for (name, p), q in zip(cpu.named_parameters(), dev.parameters()):
        scale = p.grad.abs().max().clamp_min(1.0)
        assert ((p.grad - q.grad.cpu()).abs().max() / scale) < 1e-3, name


@pytest.mark.parametrize("precision,layers", [("bf16", "lstm"), ("fp16", "lstm"), ("bf16", "peephole")])
def test_training_on_the_device_resumes_on_the_cpu(tmp_path, precision, layers):
    setup = make_toy_ctc_setup(tmp_path / "toy", num_utts={"train": 16, "dev": 4})
    extra = {"noise_prob": 0.5, "freq_warp": 0.1, "checkpoint_every": 100, "precision": precision}
    cfg = toy_config_yaml(tmp_path / "c.yaml", epochs=2, **extra)
    model_ov = ["model.peephole=true"] if layers == "peephole" else []
    t = _trainer(setup, cfg, tmp_path / "exp", _dev(), model_ov)
    assert all(p.device.type == _dev().type for p in t.model.parameters())
    t.tcfg = dataclasses.replace(t.tcfg, epochs=1)  # stop after epoch 1 ...
    summary = t.fit()
    assert summary["steps"] > 0 and np.isfinite(summary["final_dev_loss"])
    ck = load_checkpoint(tmp_path / "exp" / "checkpoints" / "latest.pt")
    assert all(v.device.type == "cpu" for v in ck["model"].values())
    assert (ck["scaler"] is not None) == (precision == "fp16")
    if _dev().type == "cuda":
        assert "cuda" in ck["rng"]
        dev_metrics = [m for m in ck["metrics"] if m["kind"] == "dev"]
        assert dev_metrics[-1]["peak_device_mb"] > 0
    # ... and the checkpoint written on the device resumes on the CPU, in fp32, for epoch 2
    cpu = _trainer(setup, cfg, tmp_path / "exp", torch.device("cpu"), [*model_ov, "train.precision=fp32"])
    assert cpu.fit()["epochs"] == 2 and cpu.step > summary["steps"]


def test_a_fp32_run_on_the_device_ends_where_the_cpu_run_ends(tmp_path):
    """Weights cannot match bit for bit (cuDNN, CUDA's CTC and Adam's normalised steps round differently), so the
    comparison is of the first step's loss and gradients and of the dev loss after an epoch (TF32 off)."""
    setup = make_toy_ctc_setup(tmp_path / "toy", num_utts={"train": 16, "dev": 4})
    cfg = toy_config_yaml(tmp_path / "c.yaml", epochs=1, freq_warp=0.0, spec_augment=False, precision="fp32")
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        runs = [_trainer(setup, cfg, tmp_path / d.type, d) for d in (torch.device("cpu"), _dev())]
        grads = []
        for t in runs:
            batch = next(t.train_ds.batches(t.epoch_cuts(0, 0)))
            t.model.eval()  # no dropout draws
            loss, _, _ = t.criterion.loss(t.model, to_device(batch, t.device))
            loss.backward()
            grads.append((loss.item(), [p.grad.detach().cpu().clone() for p in t.model.parameters()]))
            t.model.zero_grad(set_to_none=True)
            t.model.train()
        (la, ga), (lb, gb) = grads
        assert abs(la - lb) <= 1e-4 * abs(la), (la, lb)
        for a, b in zip(ga, gb):
            assert (a - b).abs().max() <= 1e-3 * a.abs().max().clamp_min(1e-3)
        dev_losses = [t.fit()["final_dev_loss"] for t in runs]
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    assert abs(dev_losses[0] - dev_losses[1]) <= 0.02 * dev_losses[0], dev_losses


def test_inference_on_the_device():
    from asrlib.models.saved import SavedModel

    feats = np.random.default_rng(0).normal(size=(60, 20)).astype(np.float32)
    saved = SavedModel(_model(peephole=True, bidirectional=True), np.zeros(20), np.ones(20))
    ref = saved.log_probs(feats)
    saved.to(_dev())
    assert saved.device.type == _dev().type
    assert np.abs(saved.log_probs(feats) - ref).max() < 1e-4


@pytest.mark.parametrize("algo", ["sync", "powersgd", "diloco"])
def test_one_learner_through_nccl(tmp_path, algo):
    """steps.train_dist with one learner on the device: NCCL for a CUDA learner (Gloo in the CPU dry run), DDP's
    buckets for sync and powersgd, DiLoCo's outer step."""
    setup = make_toy_ctc_setup(tmp_path / "toy", num_utts={"train": 12, "dev": 4})
    cfg = toy_config_yaml(tmp_path / "c.yaml", epochs=1, checkpoint_every=2)
    extra = ["train.dist.period=2", "train.dist.warmup_steps=2"] if algo == "diloco" else []
    sets = [x for o in [f"train.dist.algo={algo}", f"train.device={DEVICE}", *extra] for x in ("--set", o)]
    # --max-restarts 1: through torchrun (one learner and no restarts would run steps.train in-process, on Gloo)
    launch = [sys.executable, "-m", "steps.train_dist", "--num-learners", "1", "--max-restarts", "1"]
    launch += ["--threads-per-learner", "1", "--"]
    cmd = [*launch, "--config", str(cfg), *sets, *toy_dirs(setup), "--exp-dir", str(tmp_path / "exp")]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env_with_root(ROOT))
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads((tmp_path / "exp" / "log" / "dist.rank0.json").read_text())
    assert s["algo"] == algo and s["backend"] == ("nccl" if DEVICE.startswith("cuda") else "gloo")
    assert (tmp_path / "exp" / "final.pt").is_file()
