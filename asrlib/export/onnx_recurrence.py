"""The three forms the exported network's LSTM layers take (``recurrence``; why each: :mod:`asrlib.export.onnx_model`):
each form lays out the layers' weights as the network's buffers and runs the layers over stacked frames with
``torch._higher_order_ops.scan``, which exports as one ONNX ``Scan`` with a dynamic time axis.

* :class:`LstmNodeRecurrence` (``hybrid``, ``lstm``): layers as ONNX ``LSTM`` nodes, per frame inside the Scan
  (``lstm``: all of them; ``hybrid``: layer 0), or over all frames at once (``hybrid``: layers 1.. and the output
  layer, their input bounded by two constant columns so its int8 scale is fixed);
* :class:`OpsRecurrence` (``ops``): the cell as elementwise ops inside the Scan (the only form for LSTMP).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch.nn import functional as F

from asrlib.errors import AsrError
from asrlib.export.onnx_weights import LayerWeights

RECURRENCES = ("auto", "hybrid", "lstm", "ops")
# > max |h| = |sigmoid(o)·tanh(c)| as ONNX Runtime computes it: its approximations reach 1.0000002 (Tanh) and
# 1.0000001 (Sigmoid), measured; exact in float32
H_BOUND = 1.0 + 2.0**-10

Buffers = Dict[str, torch.Tensor]


def pick_recurrence(recurrence: str, frame_local: bool, has_hr: Sequence[bool]) -> str:
    """The form ``recurrence`` (:data:`RECURRENCES`) names for layers with recurrent projections where ``has_hr``
    (auto: hybrid where an ``LSTM`` node can do it, else ops); an :class:`AsrError` for one that cannot."""
    if recurrence not in RECURRENCES:
        raise AsrError(f"recurrence must be one of {', '.join(RECURRENCES)}, not {recurrence!r}")
    lstm_ok = frame_local and not any(has_hr)
    if recurrence == "auto":
        return "hybrid" if lstm_ok else "ops"
    if recurrence != "ops" and not lstm_ok:
        raise AsrError(
            f"recurrence {recurrence!r} needs frame_local and no recurrent projection (proj_size 0): "
            "ONNX's LSTM node has none; use recurrence 'ops'"
        )
    return recurrence


def _lstm_attrs(hidden: int) -> dict:
    """The ONNX ``LSTM`` node's one attribute, encoded as ``torch.ops.onnx_symbolic`` expects it."""
    return dict(
        attr_keys=["hidden_size"],
        attr_types=["i"],
        attr_pos=[[0, 1]],
        attr_ints=[hidden],
        attr_floats=[],
        attr_strs=[],
        metadata_props_keys=[],
        metadata_props_values=[],
        domain="",
        version=None,
    )


def lstm_node(
    x: torch.Tensor,
    W: torch.Tensor,
    R: torch.Tensor,
    B: torch.Tensor,
    P: Optional[torch.Tensor],
    h: torch.Tensor,
    c: torch.Tensor,
    exporting: bool,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One forward ONNX ``LSTM`` node (weights in its layout: W (1, 4H, in), R (1, 4H, H), B (1, 8H), P (1, 3H) or
    None; gates (i, o, f, c)) over x (S, N, in) from h, c (1, N, H) → Y (S, 1, N, H), h, c. ``exporting``: the node
    itself (under ``torch.onnx.export(dynamo=True)``, inside a ``scan`` body too); else its arithmetic in torch."""
    H = R.shape[-1]
    if exporting:
        from torch.onnx import ops  # noqa: F401 - registers torch.ops.onnx_symbolic

        # the custom op behind torch.onnx.ops.symbolic_multi_out, called directly: dynamo (which traces the
        # Scan body) refuses to trace into torch.onnx, and folds torch.onnx.is_in_onnx_export() to False
        y, h2, c2 = torch.ops.onnx_symbolic._symbolic_multi_out.default(
            [x, W, R, B, None, h, c, P],
            "LSTM",
            [1, 1, 1],
            shapes=[[x.shape[0], 1, x.shape[1], H], [1, x.shape[1], H], [1, x.shape[1], H]],
            **_lstm_attrs(H),
        )
        return y, h2, c2
    gx = F.linear(x, W[0], B[0, : 4 * H] + B[0, 4 * H :])  # the same arithmetic in torch (eager use)
    ys = []
    for t in range(x.shape[0]):
        gi, go, gf, gc = (gx[t : t + 1] + F.linear(h, R[0])).chunk(4, dim=-1)
        if P is not None:
            pi, po, pf = P[0].chunk(3)
            gi, gf = gi + pi * c, gf + pf * c
        c = torch.sigmoid(gf) * c + torch.sigmoid(gi) * torch.tanh(gc)
        h = torch.sigmoid(go + (po * c if P is not None else 0.0)) * torch.tanh(c)
        ys.append(h)
    return torch.cat(ys, 0).unsqueeze(1), h, c


def _reorder_ifgo_to_ifog(w: torch.Tensor) -> torch.Tensor:
    i, f, g, o = w.chunk(4, dim=0)
    return torch.cat([i, f, o, g], dim=0)


class _Recurrence:
    """What every form knows of the layers (all of the same sizes, peepholes on all or none)."""

    def __init__(self, layers: Sequence[LayerWeights], frame_local: bool) -> None:
        self.num_layers, self.H = len(layers), layers[0].hidden
        self.peephole = layers[0].peep is not None
        self.frame_local = frame_local
        self.has_in = [lw.w_in is not None for lw in layers]
        self.has_hr = [lw.w_hr is not None for lw in layers]


class OpsRecurrence(_Recurrence):
    """``ops``: the cell as elementwise ops inside the Scan (every matrix product per frame; without
    ``frame_local`` layer 0's input transform and the output layer are hoisted out of the loop)."""

    def buffers(self, layers: Sequence[LayerWeights], out_weight: torch.Tensor, out_bias: torch.Tensor) -> Buffers:
        """Per layer ``w_ih{k}``, ``b{k}``, ``w_hh{k}`` (gate rows (i, f, o, g) without peepholes: one Sigmoid over
        3H), ``w_hr{k}``, ``w_in{k}`` and the peepholes where present; ``w_out``, ``b_out``."""
        out: Buffers = {}
        for k, lw in enumerate(layers):
            w_ih, b, w_hh = lw.w_ih, lw.bias, lw.w_hh
            if not self.peephole:  # (i, f, o, g): one Sigmoid over 3H
                w_ih, b, w_hh = _reorder_ifgo_to_ifog(w_ih), _reorder_ifgo_to_ifog(b), _reorder_ifgo_to_ifog(w_hh)
            out[f"w_ih{k}"] = w_ih.float().contiguous()
            out[f"b{k}"] = b.float().contiguous()
            out[f"w_hh{k}"] = w_hh.float().contiguous()
            if lw.w_hr is not None:
                out[f"w_hr{k}"] = lw.w_hr.float().contiguous()
            if lw.w_in is not None:
                out[f"w_in{k}"] = lw.w_in.float().contiguous()
            if lw.peep is not None:
                for name, p in zip(("w_ci", "w_cf", "w_co"), lw.peep):
                    out[f"{name}{k}"] = p.float().contiguous()
        out["w_out"] = out_weight.float().contiguous()
        out["b_out"] = out_bias.float().contiguous()
        return out

    def _cell(self, k: int, g: torch.Tensor, r: torch.Tensor, c: torch.Tensor, w: Buffers) -> Tuple[torch.Tensor, ...]:
        H = self.H
        g = g + F.linear(r, w[f"w_hh{k}"])
        if self.peephole:
            gi, gf, gg, go = g.chunk(4, dim=-1)
            c2 = torch.sigmoid(gf + w[f"w_cf{k}"] * c) * c + torch.sigmoid(gi + w[f"w_ci{k}"] * c) * torch.tanh(gg)
            m = torch.sigmoid(go + w[f"w_co{k}"] * c2) * torch.tanh(c2)
        else:
            sig, gg = g.split([3 * H, H], dim=-1)
            gi, gf, go = torch.sigmoid(sig).chunk(3, dim=-1)
            c2 = gf * c + gi * torch.tanh(gg)
            m = go * torch.tanh(c2)
        r2 = F.linear(m, w[f"w_hr{k}"]) if self.has_hr[k] else m
        return r2, c2

    def _input_transform(self, k: int, x: torch.Tensor, w: Buffers) -> torch.Tensor:
        if self.has_in[k]:
            x = F.linear(x, w[f"w_in{k}"])
        return F.linear(x, w[f"w_ih{k}"], w[f"b{k}"])

    def run(self, x: torch.Tensor, h0: List[torch.Tensor], c0: List[torch.Tensor], w: Buffers, exporting: bool):
        """x (N, T', stack·F) stacked normalised fbank → log-probs (N, T', V), final (h, c) per layer."""
        from torch._higher_order_ops.scan import scan

        num_layers, local = self.num_layers, self.frame_local
        # time-major for the scan: stacked frames (frame-local) or layer 0's input transform of all frames
        xs = x.transpose(0, 1) if local else self._input_transform(0, x, w).transpose(0, 1)

        def step(carry, xt):
            rs, cs = carry
            new_r, new_c = [], []
            g = xt
            for k in range(num_layers):
                if k > 0 or local:
                    g = self._input_transform(k, new_r[-1] if k > 0 else xt, w)
                r2, c2 = self._cell(k, g, rs[k], cs[k], w)
                new_r.append(r2)
                new_c.append(c2)
            y = F.linear(new_r[-1], w["w_out"], w["b_out"]) if local else new_r[-1].clone()
            return (new_r, new_c), y

        (hs, cs), ys = scan(step, (h0, c0), xs)
        ys = ys.transpose(0, 1)
        logits = ys if local else F.linear(ys, w["w_out"], w["b_out"])
        return logits.log_softmax(dim=-1), hs, cs


class LstmNodeRecurrence(_Recurrence):
    """``lstm`` (every layer per frame inside the Scan, one ``LSTM`` node each) or ``hybrid`` (layer 0 so, layers
    1.. and the output layer over all frames, their input bounded: constant int8 scales)."""

    def __init__(self, layers: Sequence[LayerWeights], frame_local: bool, hybrid: bool) -> None:
        super().__init__(layers, frame_local)
        self.hybrid = hybrid
        self.in_scan = 1 if hybrid else self.num_layers  # layers run per frame in the Scan

    def buffers(self, layers: Sequence[LayerWeights], out_weight: torch.Tensor, out_bias: torch.Tensor) -> Buffers:
        """Weights in ONNX ``LSTM`` layout: ``W{k}`` (1, 4H, in), ``R{k}`` (1, 4H, H), ``B{k}`` (1, 8H), ``P{k}``
        (1, 3H), gates (i, o, f, c). Whole-sequence layers (hybrid, k > 0) get their bottleneck folded into W and
        two zero input columns for the constant ±H_BOUND inputs; so does the output layer."""
        from torch.onnx import ops  # noqa: F401 - registers torch.ops.onnx_symbolic

        H = self.H
        out: Buffers = {}
        iofc = lambda w: torch.cat([w.chunk(4, dim=0)[j] for j in (0, 3, 1, 2)], dim=0).float()  # noqa: E731
        for k, lw in enumerate(layers):
            whole = k >= self.in_scan
            w_ih = lw.w_ih
            if lw.w_in is not None and whole:  # folded: a whole-sequence layer's input must be the bounded h
                w_ih = (lw.w_ih.double() @ lw.w_in.double()).float()
                self.has_in[k] = False
            if self.has_in[k]:
                out[f"w_in{k}"] = lw.w_in.float().contiguous()
            w = iofc(w_ih)
            out[f"W{k}"] = (F.pad(w, (0, 2)) if whole else w)[None].contiguous()
            out[f"R{k}"] = iofc(lw.w_hh)[None].contiguous()
            out[f"B{k}"] = torch.cat([iofc(lw.bias), torch.zeros(4 * H)])[None].contiguous()
            if lw.peep is not None:
                w_ci, w_cf, w_co = lw.peep
                out[f"P{k}"] = torch.cat([w_ci, w_co, w_cf]).float()[None].contiguous()
        out["w_out"] = (F.pad(out_weight.float(), (0, 2)) if self.hybrid else out_weight.float()).contiguous()
        out["b_out"] = out_bias.float().contiguous()
        out["h_bound"] = torch.tensor([-H_BOUND, H_BOUND])
        return out

    def _lstm(
        self, k: int, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor, w: Buffers, exporting: bool
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Layer k as one ONNX ``LSTM`` node over x (S, N, in) from h, c (1, N, H): Y (S, 1, N, H), h, c."""
        return lstm_node(x, w[f"W{k}"], w[f"R{k}"], w[f"B{k}"], w.get(f"P{k}"), h, c, exporting)

    @staticmethod
    def _bounded(x: torch.Tensor, w: Buffers) -> torch.Tensor:
        """x (..., d) with two more columns, -H_BOUND and +H_BOUND: for |x| < H_BOUND (LSTM outputs) the per-tensor
        int8 range of the result is exactly ±H_BOUND whatever the frames, so its activation scale is constant."""
        return torch.cat([x, w["h_bound"].expand(*x.shape[:-1], 2)], dim=-1)

    def run(self, x: torch.Tensor, h0: List[torch.Tensor], c0: List[torch.Tensor], w: Buffers, exporting: bool):
        """x (N, T', stack·F) stacked normalised fbank → log-probs (N, T', V), final (h, c) per layer;
        ``exporting``: ``LSTM`` nodes are emitted instead of their arithmetic in torch ops."""
        from torch._higher_order_ops.scan import scan

        n = x.shape[0]
        ns, hybrid = self.in_scan, self.hybrid
        h0, c0 = [h.unsqueeze(0) for h in h0], [c.unsqueeze(0) for c in c0]

        def step(carry, xt):  # xt (1, N, F): one frame, as the LSTM node's X
            rs, cs = carry
            new_r, new_c = [], []
            inp = xt
            for k in range(ns):
                if self.has_in[k]:
                    inp = F.linear(inp, w[f"w_in{k}"])
                y, inp, c2 = self._lstm(k, inp, rs[k], cs[k], w, exporting)
                new_r.append(inp)
                new_c.append(c2)
            # hybrid: the node's Y output (a copy of h written by the kernel: no extra node for the scan output)
            return (new_r, new_c), (y if hybrid else F.linear(inp, w["w_out"], w["b_out"]))

        (hs, cs), ys = scan(step, (h0[:ns], c0[:ns]), x.transpose(0, 1).unsqueeze(1))
        hs, cs = list(hs), list(cs)
        seq = ys.reshape(ys.shape[0], n, ys.shape[-1])  # (T, N, H), or (T, N, V) with all layers in the Scan
        for k in range(ns, self.num_layers):  # whole-sequence layers: one LSTM node each over all frames
            seq, h2, c2 = self._lstm(k, self._bounded(seq, w), h0[k], c0[k], w, exporting)
            seq = seq.squeeze(1)
            hs.append(h2)
            cs.append(c2)
        if hybrid:
            seq = F.linear(self._bounded(seq, w), w["w_out"], w["b_out"])
        return seq.transpose(0, 1).log_softmax(dim=-1), [h[0] for h in hs], [c[0] for c in cs]


def make_recurrence(name: str, layers: Sequence[LayerWeights], frame_local: bool):
    """The form ``name`` (a :func:`pick_recurrence` result) for ``layers``."""
    if name == "ops":
        return OpsRecurrence(layers, frame_local)
    return LstmNodeRecurrence(layers, frame_local, hybrid=name == "hybrid")
