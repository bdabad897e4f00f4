"""ONNX export of a latency-controlled BLSTM (:mod:`asrlib.models.lc_blstm`) as a fixed-size chunk model.

One call runs one chunk: inputs ``x`` (1, (N + M) S, F) raw fbank of the chunk's window (zeros past the input's end),
``valid`` (1,) int64 the window's stacked frames that are real (N + M except at the end of the input), ``h`` and
``c`` (L, 1, H) each layer's forward state after the previous chunk (zeros at the start); outputs ``log_probs``
(1, N, V) for the chunk's frames (the first min(N, valid) are real), ``h_out``, ``c_out``. The global CMVN is folded
in; ``proj_size`` must be 0. Every shape is fixed, so the graph has no time loop to specialise: the LSTMs become
ONNX ``LSTM`` ops. The backward direction reverses the valid frames only (the padding after them is never read by a
valid output), so the last, short window is exact too. Streaming it chunk by chunk equals
:class:`asrlib.models.lc_blstm.LcStream` (tests/test_lc_blstm.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from asrlib.errors import PathLike


class LcChunkModule(nn.Module):
    def __init__(self, model: nn.Module, cmvn_mean: np.ndarray, cmvn_inv_std: np.ndarray):
        super().__init__()
        if model.cfg.chunk_frames <= 0:
            raise ValueError("an LC-BLSTM (model.chunk_frames > 0) is needed")
        self.model = model.eval()
        self.n, self.m, self.s = model.cfg.chunk_frames, model.cfg.right_context, model.stack
        self.register_buffer("mean", torch.as_tensor(np.asarray(cmvn_mean, np.float32)))
        self.register_buffer("inv_std", torch.as_tensor(np.asarray(cmvn_inv_std, np.float32)))

    def forward(self, x: torch.Tensor, valid: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
        w = self.n + self.m
        z = ((x - self.mean) * self.inv_std).reshape(1, w, -1)
        idx = torch.arange(w).unsqueeze(0)
        vl = valid.reshape(1, 1)
        rev = torch.where(idx < vl, vl - 1 - idx, idx)  # the valid frames reversed, the padding left in place
        hs, cs = [], []
        for i, layer in enumerate(self.model.layers):
            st = (h[i : i + 1], c[i : i + 1])
            y_chunk, st = layer.fwd(z[:, : self.n], st)
            hs.append(st[0])
            cs.append(st[1])
            y_fwd = y_chunk
            if self.m > 0:
                y_rc, _ = layer.fwd(z[:, self.n :], st)
                y_fwd = torch.cat([y_chunk, y_rc], dim=1)
            zr = z.gather(1, rev.unsqueeze(-1).expand(1, w, z.shape[-1]))
            y_b, _ = layer.bwd(zr)
            y_b = y_b.gather(1, rev.unsqueeze(-1).expand(1, w, y_b.shape[-1]))
            z = torch.cat([y_fwd, y_b], dim=-1)
        logp = self.model.output(z[:, : self.n]).log_softmax(dim=-1)
        return logp, torch.cat(hs, dim=0), torch.cat(cs, dim=0)

    def state_shape(self):
        lay = self.model.layers[0].fwd
        return (len(self.model.layers), 1, lay.proj_size or lay.hidden_size), (
            len(self.model.layers),
            1,
            lay.hidden_size,
        )


def export_lc_onnx(model: nn.Module, cmvn_mean, cmvn_inv_std, path: PathLike) -> Path:
    """Write the chunk model (see the module docstring) to ``path``."""
    if model.cfg.proj_size > 0:  # torch's ONNX export of nn.LSTM has no projection
        raise ValueError("the LC-BLSTM ONNX export needs model.proj_size: 0 (torch cannot export LSTMP layers)")
    mod = LcChunkModule(model, cmvn_mean, cmvn_inv_std).eval()  # export restores this mode on the model too
    hs, cs = mod.state_shape()
    w = (mod.n + mod.m) * mod.s
    args = (
        torch.zeros(1, w, model.feat_dim),
        torch.tensor([mod.n + mod.m], dtype=torch.int64),
        torch.zeros(hs),
        torch.zeros(cs),
    )
    path = Path(path)
    with torch.no_grad():
        torch.onnx.export(
            mod,
            args,
            str(path),
            dynamo=False,
            input_names=["x", "valid", "h", "c"],
            output_names=["log_probs", "h_out", "c_out"],
            opset_version=17,
        )
    return path


class LcOnnxStream:
    """Runs the exported chunk model on a stream of raw fbank frames (ONNX Runtime, 1 thread): ``accept`` / ``finish``
    as :class:`asrlib.models.lc_blstm.LcStream`, numpy log-probs."""

    def __init__(self, path: PathLike, n: int, m: int, s: int, feat_dim: int):
        import onnxruntime as ort

        o = ort.SessionOptions()
        o.intra_op_num_threads = o.inter_op_num_threads = 1
        self.sess = ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])
        self.n, self.m, self.s, self.f = n, m, s, feat_dim
        ins = {i.name: i.shape for i in self.sess.get_inputs()}
        self.h = np.zeros(ins["h"], np.float32)
        self.c = np.zeros(ins["c"], np.float32)
        self.buf = np.zeros((0, feat_dim), np.float32)  # raw frames from the current chunk's start
        self.empty = np.zeros((0, int(self.sess.get_outputs()[0].shape[-1])), np.float32)

    def _run(self, frames: np.ndarray, keep: int) -> np.ndarray:
        w = (self.n + self.m) * self.s
        x = np.zeros((1, w, self.f), np.float32)
        x[0, : len(frames)] = frames
        valid = np.array([len(frames) // self.s], np.int64)
        logp, self.h, self.c = self.sess.run(None, {"x": x, "valid": valid, "h": self.h, "c": self.c})
        return logp[0, :keep]

    def accept(self, frames: np.ndarray) -> np.ndarray:
        self.buf = np.concatenate([self.buf, np.asarray(frames, np.float32)])
        w, step = (self.n + self.m) * self.s, self.n * self.s
        out = []
        while len(self.buf) >= w:
            out.append(self._run(self.buf[:w], self.n))
            self.buf = self.buf[step:]
        return np.concatenate(out) if out else self.empty

    def finish(self) -> np.ndarray:
        usable = len(self.buf) // self.s * self.s
        buf, out, step = self.buf[:usable], [], self.n * self.s
        while len(buf) > 0:
            out.append(self._run(buf[: (self.n + self.m) * self.s], min(self.n, len(buf) // self.s)))
            buf = buf[step:]
        return np.concatenate(out) if out else self.empty
