"""LSTMP with peepholes (asrlib's explicit cell) vs torch.nn.LSTM (fused kernel) of the same sizes, on the CPU or a
CUDA device (``--device cuda``: cuDNN for torch.nn.LSTM; times taken after ``torch.cuda.synchronize``).

    python bench/lstm_speed.py [--quick] [--threads 2] [--batch 16] [--frames 200] [--device cpu]

Times forward and forward+backward of the acoustic model's recurrent stack (``num_layers`` layers, input
``feat_dim * stack``, hidden ``hidden``, projection ``proj``) on random input, for
- ``torch_lstm``: torch.nn.LSTM without projection (a plain LSTM of the same hidden size; more parameters),
- ``torch_lstmp``: torch.nn.LSTM with proj_size (what the model uses when ``model.peephole`` is false; torch's
  oneDNN CPU kernel does not support projections, so this runs torch's slower generic path),
- ``custom_lstmp``: asrlib's LstmpLayer without peepholes (the same maths through the Python time loop),
- ``custom_lstmp_peephole``: LstmpLayer with peepholes (what ``model.peephole: true`` trains),
- ``custom_lstmp_peephole_compiled`` (with ``--compiled``): the same with its per-frame cell compiled by
  ``torch.compile`` (inductor; what the layer runs on CUDA), timed after its first call, which compiles
  (``compile_s``: that first forward and backward),
Times are medians over ``--reps`` calls. Prints a table, then one JSON line with the times and the ratios to
torch_lstmp (last line).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from asrlib.models.lstm import LstmpLayer  # noqa: E402


class _Stack(torch.nn.Module):
    def __init__(self, kind: str, in_dim: int, hidden: int, proj: int, layers: int):
        super().__init__()
        mods = []
        for i in range(layers):
            d = in_dim if i == 0 else (hidden if kind == "torch_lstm" else proj)
            if kind == "torch_lstm":
                mods.append(torch.nn.LSTM(d, hidden, batch_first=True))
            elif kind == "torch_lstmp":
                mods.append(torch.nn.LSTM(d, hidden, batch_first=True, proj_size=proj))
            else:
                mods.append(LstmpLayer(d, hidden, proj, peephole="peephole" in kind))
                mods[-1].cell_impl = "compiled" if kind.endswith("compiled") else "eager"
        self.layers = torch.nn.ModuleList(mods)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for m in self.layers:
            x = m(x)[0]
        return x


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(fn, reps: int, device: torch.device) -> float:
    """Median seconds per call (the median resists the other load of a shared machine)."""
    fn()  # warm-up
    times = []
    for _ in range(reps):
        _sync(device)
        t = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes, few repetitions (a smoke test)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--frames", type=int, default=200, help="network frames per utterance (30 ms each at stack 3)")
    p.add_argument("--feat-dim", type=int, default=80)
    p.add_argument("--stack", type=int, default=3)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--proj", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--compiled", action="store_true", help="also the peephole layer with a compiled cell")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    a = p.parse_args(argv)
    dev = torch.device(a.device)
    if a.quick:
        a.batch, a.frames, a.reps, a.hidden, a.proj = 4, 40, 2, 64, 32
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    x = torch.randn(a.batch, a.frames, a.feat_dim * a.stack, device=dev)
    res = {}
    kinds = ["torch_lstm", "torch_lstmp", "custom_lstmp", "custom_lstmp_peephole"]
    for kind in kinds + (["custom_lstmp_peephole_compiled"] if a.compiled else []):
        m = _Stack(kind, a.feat_dim * a.stack, a.hidden, a.proj, a.layers).to(dev)
        compile_s = None
        if kind.endswith("compiled"):
            t0 = time.perf_counter()
            m(x).square().mean().backward()
            _sync(dev)
            compile_s = time.perf_counter() - t0

        def fwd():
            with torch.no_grad():
                m(x)

        def fwd_bwd():
            m.zero_grad(set_to_none=True)
            m(x).square().mean().backward()

        res[kind] = {
            "params": sum(q.numel() for q in m.parameters()),
            "forward_s": _time(fwd, a.reps, dev),
            "train_step_s": _time(fwd_bwd, a.reps, dev),
            **({"compile_s": compile_s} if compile_s is not None else {}),
        }
    base = res["torch_lstmp"]
    frames = a.batch * a.frames
    print(
        f"{a.layers} layers, input {a.feat_dim}x{a.stack}, hidden {a.hidden}, projection {a.proj}; batch "
        f"{a.batch} x {a.frames} frames; {dev}; {a.threads} threads; load average {os.getloadavg()[0]:.2f}"
    )
    print(f"{'implementation':32s} {'params':>8s} {'fwd ms':>8s} {'fwd+bwd ms':>11s} {'frames/s':>9s} {'x torch':>8s}")
    for kind, r in res.items():
        r["train_ratio_vs_torch"] = r["train_step_s"] / base["train_step_s"]
        r["forward_ratio_vs_torch"] = r["forward_s"] / base["forward_s"]
        print(
            f"{kind:32s} {r['params']:8d} {1000 * r['forward_s']:8.1f} {1000 * r['train_step_s']:11.1f} "
            f"{frames / r['train_step_s']:9.0f} {r['train_ratio_vs_torch']:8.2f}"
        )
    print(json.dumps({"config": {k: v for k, v in vars(a).items()}, "load_avg_1m": os.getloadavg()[0], "results": res}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
