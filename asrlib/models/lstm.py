"""LSTM acoustic models: LSTM with recurrent projection (LSTMP) and optional peephole connections.

Two implementations of one layer:
- without peepholes, ``torch.nn.LSTM`` (with ``proj_size``) — the fused CPU/GPU kernels;
- with peepholes, an explicit cell (Sak et al. 2014, as in Kaldi's LSTMP): diagonal cell-to-gate weights on the
  input and forget gates (from c_{t-1}) and on the output gate (from c_t); the projected output r_t = W_rm · m_t
  feeds the recurrence. The input transform for all frames is one matrix product; only the recurrent part loops,
  one call of the per-frame cell (:func:`lstmp_cell`) per frame, compiled by ``torch.compile`` on CUDA
  (:func:`step_cell`: one fused kernel for the gate arithmetic instead of about ten), eager on the CPU.

The acoustic model stacks ``stack`` consecutive 10 ms frames (so the network runs at 30 ms for stack=3), then
LSTM layers, optionally a look-ahead convolution (:class:`LookAhead`, ``model.lookahead``), then a linear layer to the
CTC tokens (index 0 = blank), returning log-probabilities.
"""

from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Tuple

import torch
from torch import nn

from asrlib.config import ModelConfig
from asrlib.models.lc_blstm import LcBlstmLayer, run_layers


class LstmpLayer(nn.Module):
    """One unidirectional LSTM layer with optional projection (proj_size > 0) and optional peepholes.

    Parameter names follow ``torch.nn.LSTM`` (weight_ih, weight_hh, bias_ih, bias_hh, weight_hr; gate order i, f, g, o)
    so weights can be copied between the two implementations.
    """

    def __init__(self, input_size: int, hidden_size: int, proj_size: int = 0, peephole: bool = False):
        super().__init__()
        self.input_size, self.hidden_size, self.proj_size = input_size, hidden_size, proj_size
        self.peephole = peephole
        self.cell_impl = "auto"  # see step_cell
        out = proj_size if proj_size > 0 else hidden_size
        self.output_size = out
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, out))
        self.bias_ih = nn.Parameter(torch.empty(4 * hidden_size))
        self.bias_hh = nn.Parameter(torch.empty(4 * hidden_size))
        self.weight_hr = nn.Parameter(torch.empty(proj_size, hidden_size)) if proj_size > 0 else None
        if peephole:
            self.w_ci = nn.Parameter(torch.empty(hidden_size))
            self.w_cf = nn.Parameter(torch.empty(hidden_size))
            self.w_co = nn.Parameter(torch.empty(hidden_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        std = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -std, std)

    def forward(
        self, x: torch.Tensor, state: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
    ) -> Tuple[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        """x: (N, T, input_size) → (N, T, output_size), (r_T, c_T)."""
        n, t_len, _ = x.shape
        if state is None:
            r = x.new_zeros(n, self.output_size)
            c = x.new_zeros(n, self.hidden_size)
        else:
            r, c = state
        gates_x = torch.nn.functional.linear(x, self.weight_ih, self.bias_ih + self.bias_hh)
        cell = step_cell(self.cell_impl, x.device)
        peep = (self.w_ci, self.w_cf, self.w_co) if self.peephole else (None, None, None)
        outs: List[torch.Tensor] = []
        for t in range(t_len):
            # a first frame from the zero state runs eagerly: its state needs no gradient (and is fp32 under autocast),
            # unlike every later frame's, and would cost the compiled cell two more specialisations
            f = lstmp_cell if t == 0 and state is None else cell
            r, c = f(gates_x[:, t], r, c, self.weight_hh, *peep, self.weight_hr)
            outs.append(r)
        return torch.stack(outs, dim=1), (r, c)


def lstmp_cell(
    gates_x: torch.Tensor,
    r: torch.Tensor,
    c: torch.Tensor,
    weight_hh: torch.Tensor,
    w_ci: Optional[torch.Tensor],
    w_cf: Optional[torch.Tensor],
    w_co: Optional[torch.Tensor],
    weight_hr: Optional[torch.Tensor],
) -> Tuple[torch.Tensor, torch.Tensor]:
    """One frame of :class:`LstmpLayer` from its input transform ``gates_x`` (N, 4H) and state (r, c): (r', c')."""
    g = gates_x + torch.nn.functional.linear(r, weight_hh)
    gi, gf, gg, go = g.chunk(4, dim=1)
    if w_ci is not None:
        gi = gi + w_ci * c
        gf = gf + w_cf * c
    c = torch.sigmoid(gf) * c + torch.sigmoid(gi) * torch.tanh(gg)
    if w_co is not None:
        go = go + w_co * c
    m = torch.sigmoid(go) * torch.tanh(c)
    return (torch.nn.functional.linear(m, weight_hr) if weight_hr is not None else m), c


# the compiled cell (torch.compile; "aot_eager" traces without generating code: what the fast tests use)
CELL_COMPILE_BACKEND = "inductor"
_compiled_cells: dict = {}


def step_cell(impl: str, device: torch.device):
    """The per-frame cell :class:`LstmpLayer` runs: ``eager`` (:func:`lstmp_cell` as it is), ``compiled``
    (``torch.compile`` of it: on CUDA one fused kernel for the gate arithmetic instead of about ten per frame) or
    ``auto`` (compiled on CUDA, eager elsewhere: on the CPU its forward pass is slower, its first call compiles for
    10 s to over a minute, and only a large training step gains, 0.86x; docs/gpus.md has the figures)."""
    if impl == "eager" or (impl == "auto" and device.type != "cuda"):
        return lstmp_cell
    if impl not in ("auto", "compiled"):
        raise ValueError(f"LstmpLayer.cell_impl must be auto, eager or compiled, not {impl!r}")
    backend = CELL_COMPILE_BACKEND
    if backend not in _compiled_cells:
        # not fullgraph: the cell has no graph break, and past torch._dynamo's recompile limit (8 specialisations:
        # grad mode, batch size 1, dtype) a further variant then runs eagerly instead of failing the run
        _compiled_cells[backend] = torch.compile(lstmp_cell, backend=backend, dynamic=True)
    return _compiled_cells[backend]


class _TorchLstmLayer(nn.Module):
    """A ``torch.nn.LSTM`` layer (fused kernel) used when peepholes are off."""

    def __init__(self, input_size: int, hidden_size: int, proj_size: int, bidirectional: bool):
        super().__init__()
        self.lstm = nn.LSTM(
            input_size, hidden_size, num_layers=1, batch_first=True, proj_size=proj_size, bidirectional=bidirectional
        )
        self.output_size = (proj_size or hidden_size) * (2 if bidirectional else 1)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(N, T, D) padded batch → (N, T, output_size), zero past each utterance's ``lengths``.

        A forward-only layer runs on the padded batch as it is: its output at frame t depends on frames <= t only,
        so the padding after an utterance cannot change that utterance's frames. Packing would not change the result
        (within 5e-7 on the digits model) but costs time on the CPU: torch runs its fused oneDNN LSTM kernel only when
        every sequence has the same length, and falls back to a per-frame loop for a packed batch of mixed lengths
        (1.7-4x slower on those batches: a digits training step of 20 s takes 72.6 ms on average instead of 106.5 ms
        on 1 thread, bench/lstm_padding.py, and its spread, which learners meeting at an all-reduce wait for, drops
        from 51.7 to 3.8 ms). A bidirectional layer's backward direction would read the padding first: it is packed."""
        if not self.lstm.bidirectional:
            y, _ = self.lstm(x)
            valid = torch.arange(x.shape[1], device=x.device).unsqueeze(0) < lengths.to(x.device).unsqueeze(1)
            return y * valid.unsqueeze(-1).to(y.dtype)
        return self.packed_forward(x, lengths)

    def packed_forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The layer over a packed batch (zeros past each utterance): what a bidirectional layer runs, and what a
        forward-only one ran before (bench/lstm_padding.py compares the two)."""
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        y, _ = self.lstm(packed)
        return nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])[0]


class _PeepholeLayer(nn.Module):
    """An LstmpLayer, optionally bidirectional (the backward direction runs on per-utterance reversed input)."""

    def __init__(self, input_size: int, hidden_size: int, proj_size: int, bidirectional: bool):
        super().__init__()
        self.fwd = LstmpLayer(input_size, hidden_size, proj_size, peephole=True)
        self.bwd = LstmpLayer(input_size, hidden_size, proj_size, peephole=True) if bidirectional else None
        self.output_size = self.fwd.output_size * (2 if bidirectional else 1)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        y, _ = self.fwd(x)
        if self.bwd is None:
            return y
        rev = _reverse_padded(x, lengths)
        yb, _ = self.bwd(rev)
        return torch.cat([y, _reverse_padded(yb, lengths)], dim=-1)


def _reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Each utterance's frames in reverse order, the padding after them left in place."""
    t = x.shape[1]
    lengths = lengths.to(x.device)
    idx = torch.arange(t, device=x.device).unsqueeze(0).expand(x.shape[0], t)
    rev = (lengths.unsqueeze(1) - 1 - idx).clamp(min=0)
    rev = torch.where(idx < lengths.unsqueeze(1), rev, idx)
    return x.gather(1, rev.unsqueeze(-1).expand_as(x))


def look_ahead_sum(x: torch.Tensor, weight: torch.Tensor, n: int) -> torch.Tensor:
    """sum_{k=0..K} weight[k] * x[:, k : k + n]: x (B, >= n + K, D), weight (K + 1, D) → (B, n, D). The look-ahead
    convolution of :class:`LookAhead` and of the exported chunk model (:mod:`asrlib.export.lc_onnx`)."""
    return sum(x[:, k : k + n] * weight[k] for k in range(weight.shape[0]))


class LookAhead(nn.Module):
    """A look-ahead ("row") convolution, as DeepSpeech 2's: y_t = sum_{k=0..K} w_k * x_{t+k}, one weight per channel
    and offset, frames past each utterance's end read as zeros. It gives a unidirectional network K output frames of
    the future at the cost of K frames of latency; it starts as the identity (w_0 = 1, the others 0)."""

    def __init__(self, dim: int, frames: int):
        super().__init__()
        if frames < 1:
            raise ValueError(f"a look-ahead needs at least one frame, not {frames}")
        self.frames = frames
        self.weight = nn.Parameter(torch.zeros(frames + 1, dim))
        with torch.no_grad():
            self.weight[0] = 1.0

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(N, T, D), zero past ``lengths`` or not → (N, T, D)."""
        t = x.shape[1]
        valid = torch.arange(t, device=x.device).unsqueeze(0) < lengths.to(x.device).unsqueeze(1)
        xp = nn.functional.pad(x * valid.unsqueeze(-1).to(x.dtype), (0, 0, 0, self.frames))
        return look_ahead_sum(xp, self.weight, t)


class StackedLstmAcousticModel(nn.Module):
    """Frame stacking (×stack, also the subsampling), LSTM(P) layers, linear output, log-softmax."""

    def __init__(self, feat_dim: int, vocab_size: int, cfg: ModelConfig):
        super().__init__()
        self.feat_dim, self.vocab_size, self.stack = feat_dim, vocab_size, cfg.stack
        self.cfg = cfg
        self.latency_controlled = cfg.chunk_frames > 0
        if self.latency_controlled and (not cfg.bidirectional or cfg.peephole):
            raise ValueError("model.chunk_frames > 0 (LC-BLSTM) needs bidirectional: true and peephole: false")
        if cfg.right_context < 0 or (cfg.right_context > 0 and not self.latency_controlled):
            raise ValueError("model.right_context needs model.chunk_frames > 0 (and cannot be negative)")
        if cfg.lookahead < 0 or (cfg.lookahead > 0 and cfg.bidirectional):
            raise ValueError("model.lookahead needs model.bidirectional: false (and cannot be negative)")
        layers = []
        in_dim = feat_dim * cfg.stack
        for _ in range(cfg.num_layers):
            if self.latency_controlled:
                layer = LcBlstmLayer(in_dim, cfg.hidden_size, cfg.proj_size, cfg.chunk_frames, cfg.right_context)
            elif cfg.peephole:
                layer = _PeepholeLayer(in_dim, cfg.hidden_size, cfg.proj_size, cfg.bidirectional)
            else:
                layer = _TorchLstmLayer(in_dim, cfg.hidden_size, cfg.proj_size, cfg.bidirectional)
            layers.append(layer)
            in_dim = layer.output_size
        self.layers = nn.ModuleList(layers)
        self.dropout = nn.Dropout(cfg.dropout)
        self.lookahead = LookAhead(in_dim, cfg.lookahead) if cfg.lookahead > 0 else None
        self.output = nn.Linear(in_dim, vocab_size)

    def set_chunking(self, chunk_frames: int, right_context: int) -> None:
        """Run this LC-BLSTM with chunks of ``chunk_frames`` output frames and ``right_context`` frames of look-ahead
        from now on, whatever it was trained with (the weights do not depend on them): a trained model decoded at
        other latencies (bench/streaming_accuracy.py --latency-sweep)."""
        if not self.latency_controlled:
            raise ValueError("set_chunking needs an LC-BLSTM (model.chunk_frames > 0)")
        for layer in self.layers:  # each checks the values first
            layer.set_chunking(chunk_frames, right_context)
        self.cfg = dataclasses.replace(self.cfg, chunk_frames=chunk_frames, right_context=right_context)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        return torch.div(lengths, self.stack, rounding_mode="floor")

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """feats: (N, T, D) normalised features; lengths: (N,) → log-probs (N, T//stack, V), output lengths."""
        n, t, d = feats.shape
        t_out = t // self.stack
        x = feats[:, : t_out * self.stack].reshape(n, t_out, d * self.stack)
        out_lens = self.output_lengths(lengths).clamp(min=1)
        if self.latency_controlled:
            x, _ = run_layers(self.layers, self.dropout, x, out_lens, self.cfg.chunk_frames, self.cfg.right_context)
            return self.output(x).float().log_softmax(dim=-1), out_lens
        for layer in self.layers:
            x = self.dropout(layer(x, out_lens))
        if self.lookahead is not None:
            x = self.lookahead(x, out_lens)
        return self.output(x).float().log_softmax(dim=-1), out_lens  # fp32 under autocast (a no-op in fp32)


def build_model(feat_dim: int, vocab_size: int, cfg: ModelConfig) -> StackedLstmAcousticModel:
    return StackedLstmAcousticModel(feat_dim, vocab_size, cfg)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
