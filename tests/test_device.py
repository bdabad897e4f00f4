"""train.device / train.precision (issue 25), checked without a GPU.

The placement tests run the real code on a stand-in accelerator (tests/device_guard.py): tensors on it compute on
CPU data, and any operation that mixes them with host tensors fails, as it would on CUDA. So a batch, target, length,
index or buffer left on the host shows up here: in the trainer (augmentation, forward, loss, backward, optimizer, dev
loss, checkpoint), in CE training, in inference and speaker adaptation, and in every distributed algorithm: with a
stand-in NCCL (collectives take device tensors only, DDP included) and with Gloo (messages staged through the CPU).
"""

import contextlib
import dataclasses
import shutil

import numpy as np
import pytest
import torch

from asrlib.config import ModelConfig, load_config
from asrlib.errors import AsrError
from asrlib.models.device import autocast, grad_scaler, resolve_device, resolve_precision, to_device
from asrlib.models import lstm
from asrlib.models.lstm import build_model
from asrlib.parallel.env import choose_backend
from asrlib.parallel.harness import run_learners, train_toy
from asrlib.train.ce import CeCriterion
from asrlib.train.checkpoint import load_checkpoint, set_rng_state, rng_state
from device_guard import MixedDevices, Placed, stand_in_device
from helpers import toy_trainer as _trainer, make_toy_ctc_setup, toy_config_yaml

LAYERS = {
    "lstm": {},
    "lstmp_bidirectional": {"bidirectional": True},
    "peephole": {"peephole": True},
    "peephole_bidirectional": {"peephole": True, "bidirectional": True},
}


def _model(**kw) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = ModelConfig(num_layers=2, hidden_size=16, proj_size=8, stack=3, dropout=0.0, **kw)
    return build_model(20, 5, cfg)


# ------------------------------------------------------------------------------------------------ the settings
def test_device_and_precision_settings():
    assert resolve_device("auto") == torch.device("cpu")  # this machine has no CUDA
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(AsrError, match="train.device=cuda.*no CUDA device"):
        resolve_device("cuda")
    for bad in ("gpu", "cuda:x", "cpu:1"):
        with pytest.raises(AsrError, match="must be auto, cpu, cuda or cuda:N"):
            resolve_device(bad)
    assert resolve_precision("auto", torch.device("cpu")) is None  # fp32 on the CPU
    assert resolve_precision("auto", torch.device("cuda", 0)) is torch.bfloat16  # bf16 on CUDA
    assert resolve_precision("fp16", torch.device("cpu")) is torch.float16
    assert (
        grad_scaler(torch.device("cpu"), torch.float16) is not None and grad_scaler(torch.device("cpu"), None) is None
    )
    with pytest.raises(AsrError, match="train.precision"):
        resolve_precision("int8", torch.device("cpu"))
    # the backend follows the learners' device
    assert choose_backend("auto", torch.device("cpu")) == "gloo"
    assert choose_backend("auto", torch.device("cuda", 0)) == "nccl"
    with pytest.raises(AsrError, match="needs the learners on CUDA"):
        choose_backend("nccl", torch.device("cpu"))


def test_config_rejects_a_bad_device(tmp_path):
    cfg = toy_config_yaml(tmp_path / "c.yaml")
    assert load_config(cfg, ["train.device=cuda:1", "train.precision=bf16"]).train.device == "cuda:1"
    with pytest.raises(AsrError, match="train.device"):
        load_config(cfg, ["train.device=tpu"])
    with pytest.raises(AsrError, match="train.precision"):
        load_config(cfg, ["train.precision=fp8"])


def test_the_device_is_resolved_once_where_a_step_starts(tmp_path, monkeypatch):
    """steps.train resolves train.device once and hands the torch.device to the algorithm and the Trainer; a
    Trainer given a device uses it as it is (the stand-in device: nothing else would pass for it) without resolving
    anything; the backend's "CUDA when there is one" is resolve_device's auto."""
    import asrlib.parallel.env as env
    import asrlib.train.trainer as trainer_module
    import steps.train as train_step

    def resolved_again(*args, **kwargs):
        raise AssertionError("train.device resolved a second time")

    monkeypatch.setattr(trainer_module, "resolve_device", resolved_again)
    setup = make_toy_ctc_setup(tmp_path / "toy", num_utts={"train": 8, "dev": 4})
    cfg = toy_config_yaml(tmp_path / "c.yaml", epochs=1)
    with stand_in_device() as dev:
        assert _trainer(setup, cfg, tmp_path / "given", dev).device is dev
    calls, algo_devices = [], []

    def counted(name="auto", where="train.device"):
        calls.append(name)
        return resolve_device(name, where)

    def make_algo(dist, device=None):
        algo_devices.append(device)
        return trainer_module.LocalAlgo()

    monkeypatch.setattr(train_step, "resolve_device", counted)
    monkeypatch.setattr(train_step, "make_algo", make_algo)
    monkeypatch.setattr(train_step, "setup_logging", lambda *a, **k: None)  # leave pytest's log capture alone
    dirs = {"--data-dir": "data", "--feats-dir": "fbank", "--lang-dir": "lang"}
    argv = ["--config", str(cfg), "--exp-dir", str(tmp_path / "exp")]
    assert train_step.main(argv + [x for k, d in dirs.items() for x in (k, str(setup / d))]) == 0
    assert calls == ["auto"] and algo_devices == [torch.device("cpu")]
    monkeypatch.setattr(env, "resolve_device", lambda name="auto", where="": torch.device("cuda", 0))
    assert choose_backend("auto") == "nccl"  # no device given: the one resolve_device("auto") picks


def test_cuda_rng_state_of_a_gpu_checkpoint_is_skipped_on_the_cpu():
    st = rng_state()
    assert "cuda" not in st  # no CUDA here
    torch.rand(3)
    set_rng_state({**st, "cuda": [torch.zeros(16, dtype=torch.uint8)]})  # as a GPU run writes it
    after = torch.rand(3)
    set_rng_state(st)
    assert torch.equal(after, torch.rand(3))  # the CPU generator was restored all the same


# ------------------------------------------------------------------------------------------------ the guard itself
def test_the_stand_in_device_catches_a_host_tensor():
    with stand_in_device() as dev:
        x = torch.randn(4, 3).to(dev)
        assert isinstance(x, Placed) and x.device == dev
        assert isinstance(x * 2 + torch.ones(3, device=dev), Placed)
        with pytest.raises(MixedDevices, match="mixed with tensors on the device"):
            x + torch.arange(3)  # built on the host: the mistake this guard is for
        assert type(x.cpu()) is torch.Tensor and float(x.sum()) == pytest.approx(float(x.cpu().sum()))


# ------------------------------------------------------------------------------------------------ model
@pytest.mark.parametrize("layers", sorted(LAYERS))
def test_forward_backward_on_the_device_equals_the_cpu(layers):
    ref = _model(**LAYERS[layers])
    x, lens = torch.randn(3, 30, 20), torch.tensor([30, 21, 12])
    logp, out_lens = ref(x, lens)
    logp.sum().backward()
    with stand_in_device() as dev:
        m = _model(**LAYERS[layers]).to(dev)
        lp, ol = m(x.to(dev), lens.to(dev))
        lp.sum().backward()
        assert isinstance(lp, Placed) and torch.equal(ol.cpu(), out_lens)
        assert torch.allclose(lp.cpu(), logp, atol=1e-5)
        for (name, p), q in zip(m.named_parameters(), ref.parameters()):
            assert isinstance(p.grad, Placed) and torch.allclose(p.grad.cpu(), q.grad, atol=1e-4), name


@contextlib.contextmanager
def _cell_backend(backend):
    """The peephole cell compiled by ``backend`` inside the block, with dynamo's cache cleared before and after."""
    torch._dynamo.reset()
    lstm.CELL_COMPILE_BACKEND, before = backend, lstm.CELL_COMPILE_BACKEND
    try:
        yield
    finally:
        lstm.CELL_COMPILE_BACKEND = before
        torch._dynamo.reset()


def _compiled_cell_agrees(backend: str, shapes) -> None:
    """A peephole model with its cell compiled by ``backend`` against the eager one: outputs and gradients within
    1e-5 over batches of ``shapes`` (N, T)."""
    with _cell_backend(backend):
        eager, comp = _model(peephole=True), _model(peephole=True)
        for layer in comp.layers:
            layer.fwd.cell_impl = "compiled"
        for n, t in shapes:
            x, lens = torch.randn(n, t, 20), torch.full((n,), t)
            (a, _), (b, _) = eager(x, lens), comp(x, lens)
            a.sum().backward()
            b.sum().backward()
            assert (a - b).abs().max() < 1e-5
        for p, q in zip(eager.parameters(), comp.parameters()):
            assert (p.grad - q.grad).abs().max() < 1e-5


def test_compiled_peephole_cell_agrees_with_the_eager_one():
    """The per-frame cell torch.compile runs on CUDA, traced (aot_eager: dynamo and AOT autograd, no code generated,
    so this stays fast); two batch shapes (dynamic shapes)."""
    _compiled_cell_agrees("aot_eager", [(3, 30), (2, 24)])


@pytest.mark.slow
def test_inductor_compiled_peephole_cell_agrees_with_the_eager_one():
    """The cell as CUDA runs it, compiled by inductor (here for the CPU: over a minute to compile)."""
    _compiled_cell_agrees("inductor", [(3, 30)])


# ------------------------------------------------------------------------------------------------ training
def test_a_training_run_specialises_the_compiled_cell_a_few_times_only(tmp_path):
    """A bf16 run (train steps, dev loss) compiles the cell for a handful of variants (grad mode, batch size 1), well
    under torch._dynamo's recompile limit of 8 (on an H200, before the first frame ran eagerly, one run passed it)."""
    compiles = []

    def counting(gm, example_inputs):
        compiles.append(len(example_inputs))
        return gm.forward

    with _cell_backend(counting):
        setup = make_toy_ctc_setup(tmp_path / "toy", num_utts={"train": 16, "dev": 5})
        cfg = toy_config_yaml(tmp_path / "c.yaml", epochs=1, precision="bf16")
        t = _trainer(setup, cfg, tmp_path / "exp", torch.device("cpu"), ["model.peephole=true"])
        for m in t.model.modules():
            if isinstance(m, lstm.LstmpLayer):
                m.cell_impl = "compiled"
        assert t.fit()["steps"] > 0
    assert 1 <= len(compiles) <= 5, compiles


@pytest.mark.parametrize("layers", ["lstm", "peephole_bidirectional"])
def test_training_on_the_device_keeps_every_tensor_there_and_resumes_on_the_cpu(tmp_path, layers):
    setup = make_toy_ctc_setup(tmp_path / "toy", num_utts={"train": 16, "dev": 4})
    extra = {"noise_prob": 0.5, "freq_warp": 0.1, "checkpoint_every": 100}
    cfg = toy_config_yaml(tmp_path / "c.yaml", epochs=2, **extra)
    model_ov = [f"model.{k}={str(v).lower()}" for k, v in LAYERS[layers].items()]
    with stand_in_device() as dev:  # augmentation, forward, loss, backward, Adam, dev loss, checkpoint
        t = _trainer(setup, cfg, tmp_path / "exp", dev, model_ov)
        assert all(isinstance(p, Placed) for p in t.model.parameters())
        t.tcfg = dataclasses.replace(t.tcfg, epochs=1)  # stop after epoch 1 ...
        summary = t.fit()
    assert summary["steps"] > 0 and np.isfinite(summary["final_dev_loss"])
    ck = load_checkpoint(tmp_path / "exp" / "checkpoints" / "latest.pt")  # plain CPU tensors
    assert all(type(v) is torch.Tensor and v.device.type == "cpu" for v in ck["model"].values())
    # ... and the checkpoint written on the device resumes on the CPU for epoch 2
    cpu = _trainer(setup, cfg, tmp_path / "exp", torch.device("cpu"), model_ov)
    assert cpu.fit()["epochs"] == 2 and cpu.step > summary["steps"]
    # to the weights of one uninterrupted run (the device computes what the CPU does, up to float rounding:
    # measured 1e-7 to 3e-7 apart, against epoch 2 moving them by 2e-2): optimizer, RNG and data order carried over
    ref = _trainer(setup, cfg, tmp_path / "ref", torch.device("cpu"), model_ov)
    ref.fit()
    resumed = cpu.model.state_dict()
    for k, v in ref.model.state_dict().items():
        assert torch.allclose(resumed[k], v, rtol=0, atol=1e-5), (k, float((resumed[k] - v).abs().max()))


def test_device_run_computes_what_the_cpu_run_computes(tmp_path):
    setup = make_toy_ctc_setup(tmp_path / "toy", num_utts={"train": 16, "dev": 4})
    cfg = toy_config_yaml(tmp_path / "c.yaml", epochs=1, freq_warp=0.1)
    ref = _trainer(setup, cfg, tmp_path / "cpu", torch.device("cpu"))
    ref.fit()
    with stand_in_device() as dev:
        t = _trainer(setup, cfg, tmp_path / "dev", dev)
        t.fit()
        params = {k: v.cpu() for k, v in t.model.state_dict().items()}
    for k, v in ref.model.state_dict().items():
        assert torch.allclose(v, params[k], atol=1e-4), k


def test_ce_criterion_on_the_device():
    crit = CeCriterion(stack=3)
    x, lens = torch.randn(2, 30, 20), torch.tensor([30, 24])
    tgt = torch.randint(0, 5, (2, 10))
    tgt[1, 8:] = -100
    with stand_in_device() as dev:
        m = _model().to(dev)
        batch = to_device({"feats": x, "feat_lens": lens, "frame_targets": tgt, "ids": ["a", "b"]}, dev)
        loss, total, count = crit.loss(m, batch)
        loss.backward()
        assert isinstance(loss, Placed) and count == 18 and np.isfinite(total)
        assert set(crit.evaluate(m, batch)) == {"loss", "count", "frame_acc"}


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_on_the_cpu_trains_and_resumes_exactly(tmp_path, precision):
    """autocast for the network, the loss in fp32; fp16's GradScaler state in the checkpoint (resume exact)."""
    setup = make_toy_ctc_setup(tmp_path / "toy", num_utts={"train": 16, "dev": 4})
    cfg = toy_config_yaml(tmp_path / "c.yaml", epochs=2, checkpoint_every=3, precision=precision)
    probe = _trainer(setup, cfg, tmp_path / "probe", torch.device("cpu"))
    with autocast(probe.device, probe.amp_dtype):
        batch = next(probe.train_ds.batches(probe.epoch_cuts(0, 0)))
        h = probe.model.output.weight.new_zeros(1, 1, probe.model.output.in_features) + 1
        assert probe.model.output(h).dtype == probe.amp_dtype  # the network does run in the low precision
        logp, _ = probe.model(batch["feats"], batch["feat_lens"])
        loss, _, _ = probe.criterion.loss(probe.model, batch)
    assert logp.dtype == torch.float32 and loss.dtype == torch.float32  # log_softmax and CTC in fp32
    assert (probe.scaler is not None) == (precision == "fp16")
    ref = _trainer(setup, cfg, tmp_path / "ref", torch.device("cpu"))
    ref.fit()
    stopped = _trainer(setup, cfg, tmp_path / "res", torch.device("cpu"))
    steps = stopped.epoch_steps
    stopped.tcfg = dataclasses.replace(stopped.tcfg, epochs=1)  # stop after epoch 1 (a checkpoint) ...
    stopped.fit()
    ck = load_checkpoint(tmp_path / "res" / "checkpoints" / "latest.pt")
    assert (ck["scaler"] is not None) == (precision == "fp16") and ck["step"] == steps
    if precision == "fp16":
        assert ck["scaler"]["scale"] > 0
    resumed = _trainer(setup, cfg, tmp_path / "res", torch.device("cpu"))  # ... and resume for epoch 2
    resumed.fit()
    for k, v in ref.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k


# ------------------------------------------------------------------------------------------------ inference
def test_inference_and_speaker_adaptation_on_the_device():
    from asrlib.config import AdaptConfig
    from asrlib.models.saved import SavedModel
    from asrlib.train.speaker_adapt import adapt_speaker

    feats = np.random.default_rng(0).normal(size=(60, 20)).astype(np.float32)
    saved = SavedModel(_model(peephole=True, bidirectional=True), np.zeros(20), np.ones(20))
    ref = saved.log_probs(feats)
    with stand_in_device() as dev:
        saved.to(dev)
        assert saved.device == dev
        assert np.allclose(saved.log_probs(feats), ref, atol=1e-5)
        res = adapt_speaker(saved, [feats, feats[:45]], [[1, 2, 3], [2, 4]], AdaptConfig(epochs=1))
        assert res.transform.shape == (20, 21) and np.isfinite(res.loss_after)


# ------------------------------------------------------------------------------------------------ distributed
STAGED = {  # algorithms whose model may live on a device while Gloo carries their messages (CPU-staged copies)
    "ma": ["train.dist.period=2"],
    "bmuf": ["train.dist.period=2"],
    "bmuf_overlap": ["train.dist.period=2", "train.dist.overlap=true"],
    "adpsgd": [],
    "hadpsgd": ["train.dist.local_world_size=1"],
    "asgd": [],
    "ring": [],
    "diloco": ["train.dist.period=2", "train.dist.warmup_steps=2"],
    "diloco_q4": ["train.dist.period=2", "train.dist.outer_bits=4", "train.dist.outer_block=16"],
}


COMM_CALLS = ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor")
COMM_CALLS += ("all_to_all_single", "gather", "scatter", "send", "isend", "recv", "irecv")


def _refuse_device_tensors() -> None:
    """Make every torch.distributed call that hands a device tensor to a Gloo group fail: Gloo wants host memory,
    and on the stand-in device it would move nothing without a word."""
    import torch.distributed as dist
    from torch.utils._pytree import tree_leaves

    from device_guard import MixedDevices, Placed

    def guarded(name, fn):
        def call(*args, **kwargs):
            gloo = dist.get_backend(kwargs.get("group")) == "gloo"
            if gloo and any(isinstance(x, Placed) for x in tree_leaves((args, kwargs))):
                raise MixedDevices(f"torch.distributed.{name} was handed a device tensor on a Gloo group")
            return fn(*args, **kwargs)

        return call

    for name in COMM_CALLS:
        if hasattr(dist, name):
            setattr(dist, name, guarded(name, getattr(dist, name)))


def _on_stand_in(rank, world, scenarios):
    from device_guard import stand_in_device

    _refuse_device_tensors()
    out = []
    for sc in scenarios:
        with stand_in_device() as dev:
            r = train_toy(rank, world, device=dev, **sc)
        out.append({"steps": r["summary"]["steps"], "params": r["params"], "loss": r["summary"]["final_dev_loss"]})
    return out


def _every_algorithm(tmp_path, algos, learner, *args):
    """Two learners (``learner(rank, world, *args, scenarios)``) train with each algorithm of ``algos`` on the
    stand-in device; each ends with steps taken, a finite loss and one model on both learners. Returns the results."""
    setup = make_toy_ctc_setup(tmp_path / "toy", num_utts={"train": 24, "dev": 4})
    cfg = toy_config_yaml(tmp_path / "c.yaml", epochs=1, checkpoint_every=2)
    scenarios = [
        dict(
            setup=str(setup),
            config=str(cfg),
            overrides=[f"train.dist.algo={name.split('_')[0]}", *ov],
            exp_dir=str(tmp_path / name),
            **({"uneven": [3, 2]} if name.endswith("_uneven") else {}),
        )
        for name, ov in algos.items()
    ]
    res = run_learners(learner, 2, args=(*args, scenarios), timeout=600)
    for rank in range(2):
        for name, r in zip(algos, res[rank]):
            assert r["steps"] > 0 and np.isfinite(r["loss"]), (name, rank)
    for name, a, b in zip(algos, res[0], res[1]):
        for k in a["params"]:
            assert torch.equal(a["params"][k], b["params"][k]), (name, k)
    return res


def test_every_algorithm_stages_its_messages_for_gloo_when_the_model_is_on_a_device(tmp_path):
    """Gloo takes host tensors only: a learner whose model is on the device must hand every collective and
    point-to-point call a CPU copy (a device tensor there fails the run), and get the device's tensors back."""
    res = _every_algorithm(tmp_path, STAGED, _on_stand_in)
    assert all(type(v) is torch.Tensor for r in res[0] + res[1] for v in r["params"].values())


NCCL_WORLD = {  # every algorithm as it runs on GPU learners: NCCL for the collectives, Gloo side groups for p2p
    "sync": [],
    "sync_uneven": [],  # a learner without data at the last steps joins DDP's all-reduce with zero buckets
    "powersgd": ["train.dist.powersgd_rank=1", "train.dist.warmup_steps=2"],
    **STAGED,
}


def _regroup_on_stand_in_nccl(rank, world, store):
    """Replace the harness's Gloo world by one whose default group plays NCCL. The store's name is rank 0's pid, so
    a run the harness starts again (a failed rendezvous) does not meet the file its killed first try left."""
    import os

    import torch.distributed as dist

    from device_guard import register_stand_in_nccl

    tag = torch.tensor([os.getpid() if rank == 0 else 0])
    dist.broadcast(tag, src=0)
    dist.destroy_process_group()
    dist.init_process_group(
        register_stand_in_nccl(), init_method=f"file://{store}.{int(tag)}", rank=rank, world_size=world
    )


def _on_stand_in_nccl(rank, world, store, scenarios):
    """A learner of a world whose default group plays NCCL (device tensors only, tests/device_guard.py), as
    ``init_process_group`` sets it up for learners on CUDA: collective buffers on the learner's device."""

    import asrlib.parallel.env as env
    from device_guard import DEVICE

    _regroup_on_stand_in_nccl(rank, world, store)
    real = env.init_process_group
    env.init_process_group = lambda cfg, device=None: dataclasses.replace(
        real(cfg, device), backend="nccl", device=DEVICE
    )
    return _on_stand_in(rank, world, scenarios)


def test_every_algorithm_keeps_its_collectives_on_the_device_under_nccl(tmp_path):
    """Learners on the device with NCCL: every collective of every algorithm (sync's and powersgd's through DDP's
    buckets and hooks, the uneven-shard join included) must hand NCCL device tensors (a host tensor fails the run);
    the asynchronous algorithms' point-to-point traffic on their Gloo side groups must be CPU-staged copies."""
    _every_algorithm(tmp_path, NCCL_WORLD, _on_stand_in_nccl, str(tmp_path / "nccl_store"))


def test_the_stand_in_nccl_refuses_host_tensors(tmp_path):
    """The check above can fail: a learner that hands NCCL a host tensor is stopped."""
    with pytest.raises(RuntimeError, match="NCCL all_reduce was handed a host tensor"):
        run_learners(_host_tensor_to_nccl, 2, args=(str(tmp_path / "nccl_store"),), timeout=120)


def _host_tensor_to_nccl(rank, world, store):
    import torch.distributed as dist

    _regroup_on_stand_in_nccl(rank, world, store)
    with stand_in_device() as dev:
        on_device = torch.ones(3, device=dev)
        dist.all_reduce(on_device)
        assert on_device.cpu().tolist() == [2.0, 2.0, 2.0]
        dist.all_reduce(torch.ones(3))  # a host tensor


# ------------------------------------------------------------------------------------------------ docs/gpus.md
def _doc_commands():
    """The ``python -m steps.train*`` commands of docs/gpus.md's code blocks, as argument lists."""
    import re
    import shlex

    from helpers import ROOT

    text = (ROOT / "docs" / "gpus.md").read_text()
    cmds = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("python -m steps.train"):
                cmds.append(shlex.split(line))
    return cmds


def test_the_gpu_docs_commands_run_here(tmp_path):
    """docs/gpus.md's training commands, on the toy set-up: with train.device=cuda they stop with a clear error on this
    machine (no CUDA); with auto they train on the CPU, the precision they ask for included (4 learners: 2 here)."""
    import subprocess
    import sys

    from helpers import ROOT

    cmds = _doc_commands()
    assert [c[2] for c in cmds] == ["steps.train", "steps.train_dist"]
    setup = make_toy_ctc_setup(tmp_path / "toy", num_utts={"train": 12, "dev": 4})
    cfg = toy_config_yaml(tmp_path / "c.yaml", epochs=1)
    paths = {
        "--config": str(cfg),
        "--data-dir": str(setup / "data"),
        "--feats-dir": str(setup / "fbank"),
        "--lang-dir": str(setup / "lang"),
        "--num-learners": "2",
    }
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    for i, cmd in enumerate(cmds):
        args = [paths.get(prev, tmp_path / f"exp{i}" if prev == "--exp-dir" else a) for prev, a in zip([""] + cmd, cmd)]
        args = [sys.executable, *map(str, args[1:])]
        if "train.device=cuda" in args:
            r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env)
            assert r.returncode != 0 and "torch sees no CUDA device" in r.stderr, r.stderr[-2000:]
            args = [a.replace("train.device=cuda", "train.device=auto") for a in args]
            shutil.rmtree(tmp_path / f"exp{i}", ignore_errors=True)
        r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        log = (tmp_path / f"exp{i}" / "log" / "train.log").read_text()
        precision = "bf16" if "train.precision=bf16" in args else "fp32"
        assert f"training on cpu, {precision}" in log
        assert (tmp_path / f"exp{i}" / "final.pt").is_file()
