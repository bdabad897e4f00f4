"""ONNX export of a latency-controlled BLSTM (:mod:`asrlib.models.lc_blstm`): a chunk model and a whole-utterance one.

Both run the same *window* function, written with ONNX ``LSTM`` nodes (:func:`asrlib.export.onnx_recurrence.lstm_node`)
and exported with ``dynamo=True``: chunk k's window of N + M stacked frames through every layer, the forward direction
over the N chunk frames from the carried state (its end state carried on), then on over the M right-context frames
(their outputs feed the next layer's window only), the backward direction over the window's valid frames reversed
from a zero state; the output layer and log-softmax on the N chunk frames. The global CMVN is folded in (raw fbank in),
and, as in :mod:`asrlib.export.onnx_model`, the recipe's search (:meth:`LcExport.fold_search`: sherpa-onnx's CTC
graph search has no acoustic scale or blank penalty; the metadata says so and the runtime takes it out again).
``proj_size`` must be 0 (ONNX's LSTM node has no projection).

A unidirectional LSTM with a look-ahead convolution (``model.lookahead`` = K, :class:`asrlib.models.lstm.LookAhead`)
exports as the same chunk model with M = K and no backward direction: the window's last-layer outputs feed the
look-ahead convolution of its N chunk frames. Its forward direction over the right context starts from the chunk's
end state, as the model's own, so the chunks give the whole utterance's log-probs; N (``chunk_frames`` of
:class:`LcExport`) is a choice of the export: N = 1 streams at the model's latency, a larger N costs N - 1 frames
more and fewer calls.

* **chunk** (``model.streaming.int8.onnx`` of an LC bundle): inputs ``x`` (1, (N + M) S, F) raw fbank of the window
  (zeros past the input's end), ``valid`` (1,) int64 the window's stacked frames that are real (N + M except at the
  end of the input), ``h`` and ``c`` (L, 1, H) each layer's forward state after the previous chunk (zeros at the
  start); outputs ``log_probs`` (1, N, V) (the first min(N, valid) real), ``h_out``, ``c_out``. Every shape is fixed.
  Run by :class:`asrlib.export.runtime.LcChunkOnnxModel` (streamed by the bundle's recogniser).
* **whole** (``model.int8.onnx``: sherpa-onnx's ``zipformer2_ctc`` contract): ``x`` (B, T, F), ``x_lens`` (B,) →
  ``log_probs`` (B, T // S, V), ``log_probs_len``. The windows are cut in the graph and looped over by one ONNX ``Scan``
  that carries the forward states: the chunk model's arithmetic, call for call.
* **sherpa_online** (``model.sherpa-online.int8.onnx``): the chunk model in the contract of sherpa-onnx's streaming
  WeNet CTC model (:meth:`LcExport.sherpa_online`; the mapping: :mod:`asrlib.export.sherpa_online`).

int8 (:func:`asrlib.export.quantize.quantize_int8`): the LSTM nodes become ``DynamicQuantizeLSTM`` (inside the Scan
too), the output layer ``MatMulInteger``; activations are quantized per window, so the chunk model streamed and the
whole model give the same int8 output. ``meta`` keys beyond :mod:`asrlib.export.onnx_model`'s: ``chunk_frames``,
``right_context``, ``lc_signature`` (``chunk`` / ``whole``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from asrlib.decode.search_scores import undo_search
from asrlib.errors import AsrError, PathLike
from asrlib.export.onnx_recurrence import lstm_node
from asrlib.models.lstm import look_ahead_sum

MODEL_TYPE = "asrlib_lc_blstm_ctc"
INT16_LOG_POWER = 2.0 * float(np.log(32768.0))  # fbank of samples in int16 range minus fbank of samples in [-1, 1]


def _onnx_layout(lstm: nn.LSTM) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A one-layer unidirectional ``nn.LSTM``'s weights as an ONNX ``LSTM`` node's W, R, B (gates i, o, f, c)."""
    iofc = lambda w: torch.cat([w.chunk(4, dim=0)[j] for j in (0, 3, 1, 2)], dim=0).detach().float()  # noqa: E731
    b = torch.cat([iofc(lstm.bias_ih_l0), iofc(lstm.bias_hh_l0)])
    return iofc(lstm.weight_ih_l0)[None].contiguous(), iofc(lstm.weight_hh_l0)[None].contiguous(), b[None].contiguous()


def _rev_index(valid: torch.Tensor, w: int) -> torch.Tensor:
    """(B,) valid frames → (B, W) indices: each row's valid frames reversed, the frames after them left in place."""
    i = torch.arange(w, device=valid.device).unsqueeze(0)
    v = valid.reshape(-1, 1)
    return torch.where(i < v, v - 1 - i, i)


def _gather_time(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x (B, W, D), idx (B, W) → x[b, idx[b, t]]."""
    return torch.gather(x, 1, idx.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


class LcExport(nn.Module):
    """The exportable LC-BLSTM (module docstring): :meth:`window` is one chunk; :meth:`forward` the whole utterance."""

    def __init__(self, model: nn.Module, cmvn_mean: np.ndarray, cmvn_inv_std: np.ndarray, chunk_frames: int = 1):
        """``chunk_frames``: N for a unidirectional model with a look-ahead (an LC-BLSTM has its own)."""
        super().__init__()
        cfg = model.cfg
        self.bidirectional = cfg.chunk_frames > 0
        if not self.bidirectional and (cfg.lookahead <= 0 or cfg.bidirectional or cfg.peephole):
            raise ValueError(
                "an LC-BLSTM (model.chunk_frames > 0) or a unidirectional LSTM without peepholes with a look-ahead "
                "(model.lookahead > 0) is needed"
            )
        if cfg.proj_size > 0:
            raise ValueError("the LC-BLSTM ONNX export needs model.proj_size: 0 (ONNX's LSTM node has no projection)")
        if self.bidirectional:
            self.n, self.m = cfg.chunk_frames, cfg.right_context
        elif chunk_frames < 1:
            raise ValueError(f"chunk_frames must be at least 1, not {chunk_frames}")
        else:
            self.n, self.m = chunk_frames, cfg.lookahead
        self.s = model.stack
        self.feat_dim, self.vocab_size = model.feat_dim, model.vocab_size
        self.num_layers, self.H = len(model.layers), cfg.hidden_size
        self.register_buffer("mean", torch.as_tensor(np.asarray(cmvn_mean, np.float32)).reshape(-1))
        self.register_buffer("inv_std", torch.as_tensor(np.asarray(cmvn_inv_std, np.float32)).reshape(-1))
        for k, layer in enumerate(model.layers):
            dirs = (("f", layer.fwd), ("b", layer.bwd)) if self.bidirectional else (("f", layer.lstm),)
            for d, lstm in dirs:
                for name, t in zip("WRB", _onnx_layout(lstm)):
                    self.register_buffer(f"{name}{d}{k}", t)
        la = getattr(model, "lookahead", None)
        self.register_buffer("w_ahead", la.weight.detach().float().clone() if la is not None else None)
        self.register_buffer("w_out", model.output.weight.detach().float().clone())
        self.register_buffer("b_out", model.output.bias.detach().float().clone())
        self.search_scale, self.search_penalty = 1.0, 0.0
        self.exporting = False

    def fold_search(self, acoustic_scale: float, blank_penalty: float) -> "LcExport":
        """The output becomes ``(log_softmax - blank_penalty at the blank) * acoustic_scale`` (see
        :meth:`asrlib.export.onnx_model.ScanAcousticModel.fold_search`)."""
        if not acoustic_scale > 0:
            raise AsrError(f"the acoustic scale to fold into the model must be > 0, got {acoustic_scale}")
        self.search_scale, self.search_penalty = float(acoustic_scale), float(blank_penalty)
        return self

    def _fold(self, logp: torch.Tensor) -> torch.Tensor:
        if (self.search_scale, self.search_penalty) == (1.0, 0.0):
            return logp
        shift = torch.tensor([self.search_penalty] + [0.0] * (self.vocab_size - 1), dtype=logp.dtype)
        return (logp - shift) * self.search_scale

    def _stacked(self, x: torch.Tensor) -> torch.Tensor:
        """Raw fbank (B, T, F) → normalised stacked frames (B, T // S, S F) (a last short stack dropped)."""
        b, t, f = x.shape
        t_out = t // self.s
        return ((x[:, : t_out * self.s] - self.mean) * self.inv_std).reshape(b, t_out, f * self.s)

    def window(
        self, z: torch.Tensor, valid: torch.Tensor, hs: Sequence[torch.Tensor], cs: Sequence[torch.Tensor]
    ) -> Tuple[torch.Tensor, List[torch.Tensor], List[torch.Tensor]]:
        """One chunk: z (B, N + M, S F) normalised stacked frames, valid (B,), each layer's forward state (1, B, H)
        → log-probs (B, N, V), each layer's forward state after the chunk's N frames."""
        n, w, ex = self.n, self.n + self.m, self.exporting
        rev = _rev_index(valid, w)
        # frames past the input's end are zeros in every layer's input, as in training: int8 activation ranges
        # (per call) then depend on the real frames only, the same in the chunk model and the whole one
        mask = (torch.arange(w, device=z.device).unsqueeze(0) < valid.reshape(-1, 1)).unsqueeze(-1).to(z.dtype)
        z = z * mask
        zero = z.new_zeros(1, z.shape[0], self.H)
        new_h, new_c = [], []
        for k in range(self.num_layers):
            wf, rf, bf = (getattr(self, f"{x}f{k}") for x in "WRB")
            zt = z.transpose(0, 1)  # (W, B, D): the LSTM node's X
            y, h2, c2 = lstm_node(zt[:n], wf, rf, bf, None, hs[k], cs[k], ex)
            parts = [y[:, 0]]
            if self.m > 0:  # the right context, from the chunk's end state; its state is not carried
                yr, _, _ = lstm_node(zt[n:], wf, rf, bf, None, h2, c2, ex)
                parts.append(yr[:, 0])
            y_fwd = torch.cat(parts, dim=0).transpose(0, 1)  # (B, W, H)
            if self.bidirectional:
                wb, rb, bb = (getattr(self, f"{x}b{k}") for x in "WRB")
                yb, _, _ = lstm_node(_gather_time(z, rev).transpose(0, 1), wb, rb, bb, None, zero, zero, ex)
                y_fwd = torch.cat([y_fwd, _gather_time(yb[:, 0].transpose(0, 1), rev)], dim=-1)
            z = y_fwd * mask
            new_h.append(h2)
            new_c.append(c2)
        if self.w_ahead is not None:  # the look-ahead convolution: chunk frame t hears window frames t..t+M
            z = look_ahead_sum(z, self.w_ahead, n)
        return F.linear(z[:, :n], self.w_out, self.b_out).log_softmax(dim=-1), new_h, new_c

    def chunk(self, x: torch.Tensor, valid: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
        """The chunk signature (module docstring)."""
        out, hs, cs = self.window(self._stacked(x), valid, list(h.split(1, 0)), list(c.split(1, 0)))
        return self._fold(out), torch.cat(hs, 0), torch.cat(cs, 0)

    def forward(self, x: torch.Tensor, x_lens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The whole-utterance signature (module docstring): the windows looped over by ``scan``."""
        from torch._higher_order_ops.scan import scan

        n, w = self.n, self.n + self.m
        z = self._stacked(x)
        b, t_out, d = z.shape
        k = (t_out + n - 1) // n
        z = F.pad(z, (0, 0, 0, k * n + self.m - t_out))
        starts = torch.arange(k, device=z.device) * n
        wins = z[:, starts.unsqueeze(1) + torch.arange(w, device=z.device).unsqueeze(0)]  # (B, K, W, D)
        lens = torch.div(x_lens, self.s, rounding_mode="floor")
        valid = (lens.unsqueeze(0) - starts.unsqueeze(1)).clamp(min=0, max=w)  # (K, B)
        h0 = [z.new_zeros(1, b, self.H) for _ in range(self.num_layers)]
        c0 = [z.new_zeros(1, b, self.H) for _ in range(self.num_layers)]

        def step(carry, xs):
            out, hs, cs = self.window(xs[0], xs[1], carry[0], carry[1])
            return (hs, cs), out

        _, ys = scan(step, (h0, c0), (wins.transpose(0, 1), valid))  # ys (K, B, N, V)
        out = ys.transpose(0, 1).reshape(b, k * n, self.vocab_size)[:, :t_out]
        return self._fold(out), lens

    def sherpa_online(self, x, offset, required_cache_size, attn_cache, conv_cache, attn_mask):
        """The chunk model in sherpa-onnx's streaming WeNet CTC contract (module docstring): fbank of int16-range
        samples (``2 ln 32768`` above ours), every window taken as real, the forward state (h, c) carried in the
        convolution cache; offset, cache size, attention cache and mask are not used (the cache has length 0)."""
        w = self.n + self.m
        z = self._stacked(x - INT16_LOG_POWER)
        valid = (
            torch.full((1,), w, dtype=torch.int64) + 0 * offset.reshape(-1)[:1] * required_cache_size.reshape(-1)[:1]
        )
        hs = list(conv_cache[..., 0].split(1, 0))
        cs = list(conv_cache[..., 1].split(1, 0))
        out, hs, cs = self.window(z, valid, hs, cs)
        out = out + 0.0 * attn_mask.to(out.dtype).sum()
        return self._fold(out), attn_cache + 0.0, torch.stack([torch.cat(hs, 0), torch.cat(cs, 0)], dim=-1)

    def metadata(self, signature: str, sample_rate: int) -> Dict[str, str]:
        meta = {
            "model_type": MODEL_TYPE,
            "version": "1",
            "feat_dim": str(self.feat_dim),
            "sample_rate": str(sample_rate),
            "frame_shift_ms": "10",
            "subsampling": str(self.s),
            "vocab_size": str(self.vocab_size),
            "num_layers": str(self.num_layers),
            "hidden_size": str(self.H),
            "chunk_frames": str(self.n),
            "right_context": str(self.m),
            "lc_signature": signature,
            "streaming": str(int(signature == "chunk")),
            "cmvn": "folded",
        }
        if signature == "sherpa_online":  # what sherpa-onnx's OnlineWenetCtcModel reads (module docstring)
            meta.update(
                head="1",
                num_blocks=str(self.num_layers),
                output_size=str(self.H),
                cnn_module_kernel="3",
                right_context=str((self.m + 1) * self.s - 1),
                subsampling_factor=str(self.s),
            )
        if (self.search_scale, self.search_penalty) != (1.0, 0.0):
            meta["search_acoustic_scale"] = repr(self.search_scale)
            meta["search_blank_penalty"] = repr(self.search_penalty)
        return meta


def _unique_node_names(proto) -> None:
    """Number the LSTM nodes named after a shared W (the forward direction's chunk and right-context nodes)."""
    from asrlib.export.quantize import _graphs

    seen: Dict[str, int] = {}
    for g in _graphs(proto.graph):
        for node in g.node:
            if node.name:
                k = seen.get(node.name, 0)
                seen[node.name] = k + 1
                if k:
                    node.name = f"{node.name}_{k}"


class _SherpaOnline(nn.Module):
    def __init__(self, core: LcExport):
        super().__init__()
        self.core = core

    def forward(self, x, offset, required_cache_size, attn_cache, conv_cache, attn_mask):
        return self.core.sherpa_online(x, offset, required_cache_size, attn_cache, conv_cache, attn_mask)


class _Chunk(nn.Module):
    def __init__(self, core: LcExport):
        super().__init__()
        self.core = core

    def forward(self, x, valid, h, c):
        return self.core.chunk(x, valid, h, c)


def export_lc(core: LcExport, path: PathLike, signature: str = "chunk", sample_rate: int = 16000) -> Path:
    """Write ``core``'s ``chunk`` or ``whole`` signature (module docstring) to ``path``: one self-contained file."""
    import onnx

    from asrlib.export.onnx_model import dynamo_onnx, save_onnx
    from torch.onnx import ops  # noqa: F401 - registers torch.ops.onnx_symbolic before tracing

    core = core.eval()
    w = (core.n + core.m) * core.s
    if signature == "chunk":
        h, c = (torch.zeros(core.num_layers, 1, core.H) for _ in "hc")  # two tensors: one would be one input
        module, dyn = _Chunk(core), None
        args = (torch.randn(1, w, core.feat_dim), torch.tensor([core.n + core.m]), h, c)
        names_in, names_out = ["x", "valid", "h", "c"], ["log_probs", "h_out", "c_out"]
    elif signature == "sherpa_online":
        module, dyn = _SherpaOnline(core), None
        args = (
            torch.randn(1, w, core.feat_dim),
            torch.tensor([0]),
            torch.tensor([0]),
            torch.zeros(core.num_layers, 1, 0, 2 * core.H),  # (blocks, head, cache 0, 2 × output_size / head)
            torch.zeros(core.num_layers, 1, core.H, 2),
            torch.ones(1, 1, core.n, dtype=torch.bool),
        )
        names_in = ["chunk", "offset", "required_cache_size", "att_cache", "cnn_cache", "att_mask"]
        names_out = ["output", "r_att_cache", "r_cnn_cache"]
    elif signature == "whole":
        t = 17 * core.s  # not a multiple of the chunk: nothing specialised to it
        module = core
        args = (torch.randn(2, t, core.feat_dim), torch.tensor([t, t - 5]))
        batch, time_ = torch.export.Dim("N", min=1, max=1024), torch.export.Dim("T", min=1, max=10_000_000)
        dyn = {"x": {0: batch, 1: time_}, "x_lens": {0: batch}}
        names_in, names_out = ["x", "x_lens"], ["log_probs", "log_probs_len"]
    else:
        raise ValueError(f"signature must be chunk, whole or sherpa_online, not {signature!r}")
    core.exporting = True
    try:
        proto = dynamo_onnx(module, args, names_in, names_out, dyn)
    finally:
        core.exporting = False
    _unique_node_names(proto)
    onnx.helper.set_model_props(proto, core.metadata(signature, sample_rate))
    return save_onnx(proto, path)


def export_lc_onnx(model: nn.Module, cmvn_mean, cmvn_inv_std, path: PathLike) -> Path:
    """The fp32 chunk model of ``model`` (plain log-probs) at ``path``."""
    return export_lc(LcExport(model, cmvn_mean, cmvn_inv_std), path, "chunk")


class LcOnnxStream:
    """The chunk model on a stream of raw fbank frames (ONNX Runtime, 1 thread): ``accept`` / ``finish`` as
    :class:`asrlib.models.lc_blstm.LcStream`, numpy log-probs (:class:`asrlib.export.runtime.LcChunkOnnxModel`)."""

    def __init__(self, path: PathLike, n: int = 0, m: int = 0, s: int = 0, feat_dim: int = 0):
        from asrlib.export.runtime import LcChunkOnnxModel

        self.net = LcChunkOnnxModel(path).stream()  # n, m, s, feat_dim: read from the model

    def accept(self, frames: np.ndarray) -> np.ndarray:
        return self.net.accept(frames)

    def finish(self) -> np.ndarray:
        return self.net.finish()


def verify_lc(
    chunk: PathLike,
    whole: PathLike,
    model: nn.Module,
    cmvn_mean: np.ndarray,
    cmvn_inv_std: np.ndarray,
    lengths: Sequence[int] = (61, 250),
    tol: float = 1e-4,
    seed: int = 0,
) -> float:
    """Max |ONNX − PyTorch| of the log-probs, the chunk model streamed (raw frames 7 at a time) and the whole model
    on a batch of 2, against the trained model's whole-utterance pass, at each of ``lengths`` (≥ 2: a graph
    specialised to one length fails here); AsrError above ``tol``."""
    from asrlib.export.runtime import LcChunkOnnxModel, OnnxAcousticModel

    if len(set(lengths)) < 2:
        raise ValueError("verify on at least two different lengths")
    rng = np.random.default_rng(seed)
    mean, inv_std = np.asarray(cmvn_mean, np.float32), np.asarray(cmvn_inv_std, np.float32)
    cm, wm = LcChunkOnnxModel(chunk), OnnxAcousticModel(whole)
    worst = 0.0
    for t in lengths:
        x = (mean + rng.normal(0, 1, (2, t, len(mean))) / inv_std).astype(np.float32)
        lens = [t, max(model.stack, t - 2 * model.stack - 1)]
        got_whole = wm.session.run(None, {"x": x, "x_lens": np.array(lens, np.int64)})[0]
        for b, n in enumerate(lens):
            with torch.no_grad():
                ref, _ = model.eval()(torch.from_numpy((x[b : b + 1, :n] - mean) * inv_std), torch.tensor([n]))
            ref = ref[0].numpy()
            s = cm.stream()
            got = np.concatenate([s.accept(x[b, i : min(n, i + 7)]) for i in range(0, n, 7)] + [s.finish()])
            gw = undo_search(got_whole[b, : len(ref)], *wm.search)
            if got.shape != ref.shape:
                raise AsrError(f"{chunk}: {got.shape[0]} output frames for {n} input frames, PyTorch gives {len(ref)}")
            worst = max(worst, float(np.abs(got - ref).max()), float(np.abs(gw - ref).max()))
    if worst > tol:
        raise AsrError(f"{chunk}, {whole}: ONNX output differs from PyTorch by {worst:.2e} (> {tol:.0e})")
    return worst


def verify_sherpa_online(online: PathLike, chunk: PathLike, tol: float = 1e-4, seed: int = 0) -> float:
    """Max |difference| between the ``sherpa_online`` model (fbank shifted to int16 range, state in the convolution
    cache) and the chunk model (every window real) over 3 windows of random frames, state carried; AsrError above
    ``tol``."""
    from asrlib.export.runtime import ort_session

    so, sc = ort_session(online), ort_session(chunk)
    ins = {i.name: i.shape for i in so.get_inputs()}
    rng = np.random.default_rng(seed)
    h, c = (np.zeros(sc.get_inputs()[2].shape, np.float32) for _ in "hc")
    conv = np.zeros(ins["cnn_cache"], np.float32)
    att = np.zeros(ins["att_cache"], np.float32)
    worst = 0.0
    for _ in range(3):
        x = rng.normal(0, 3, ins["chunk"]).astype(np.float32)
        ref, h, c = sc.run(None, {"x": x, "valid": np.array([ins["chunk"][1]], np.int64) // _stack(sc), "h": h, "c": c})
        feeds = {
            "chunk": x + np.float32(INT16_LOG_POWER),
            "offset": np.zeros(1, np.int64),
            "required_cache_size": np.zeros(1, np.int64),
            "att_cache": att,
            "cnn_cache": conv,
            "att_mask": np.ones(ins["att_mask"], bool),
        }
        got, att, conv = so.run(None, feeds)
        worst = max(worst, float(np.abs(got - ref).max()))
    if worst > tol:
        raise AsrError(f"{online}: differs from {chunk} by {worst:.2e} (> {tol:.0e})")
    return worst


def _stack(session) -> int:
    from asrlib.export.runtime import model_metadata

    return int(model_metadata(session)["subsampling"])
