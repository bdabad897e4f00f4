"""Latency-controlled BLSTM (LC-BLSTM; Zhang et al. 2016, Kaldi's nnet3 ``lstm*-lc``): a BLSTM that streams.

The network's input (after frame stacking) is cut into chunks of ``N = chunk_frames`` output frames. Chunk k is
processed as a *window* of its N frames plus the ``M = right_context`` frames after it, through every layer:

- the forward direction runs over the window starting from the state it had at the end of chunk k-1 (the forward
  state is carried across chunks, over chunk frames only: what it sees of the right context is discarded);
- the backward direction runs over the window in reverse from a zero state (restarted per chunk), so chunk k's
  frames hear M frames of the future and no more;
- only the N chunk frames' outputs are kept; the M right-context frames' outputs feed the next layer's window.

So the output for chunk k depends on input frames up to ``(k + 1) N + M - 1`` and on nothing later, whatever the
number of layers: a stream emits chunk k once it has those frames (:class:`LcStream`). In training, a whole padded
batch runs at once: the windows of every utterance are one batch of ``B × K`` sequences of ``N + M`` frames for the
backward direction and the forward direction's right-context frames; only the forward direction's carried state
loops over the K chunks (one fused ``nn.LSTM`` call per chunk of N frames).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import nn

State = Tuple[torch.Tensor, torch.Tensor]


def window_lengths(lengths: torch.Tensor, num_chunks: int, chunk: int, right: int) -> torch.Tensor:
    """(B,) frame counts → (B, K) valid frames in each chunk's window of ``chunk + right`` frames."""
    starts = torch.arange(num_chunks, device=lengths.device) * chunk
    return (lengths.unsqueeze(1) - starts.unsqueeze(0)).clamp(min=0, max=chunk + right)


def to_windows(x: torch.Tensor, chunk: int, right: int) -> torch.Tensor:
    """(B, T, D) → (B, K, chunk + right, D), K = ceil(T / chunk); frames past T are zeros."""
    b, t, d = x.shape
    k = max(1, -(-t // chunk))
    pad = k * chunk + right - t
    xp = torch.nn.functional.pad(x, (0, 0, 0, pad))
    return xp.unfold(1, chunk + right, chunk).permute(0, 1, 3, 2)  # (B, K, W, D)


def from_windows(y: torch.Tensor, chunk: int, t: int) -> torch.Tensor:
    """(B, K, W, D) → (B, t, D): each window's first ``chunk`` frames in order."""
    b, k, _, d = y.shape
    return y[:, :, :chunk].reshape(b, k * chunk, d)[:, :t]


def _reverse_valid(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(S, W, D): each sequence's first ``lengths`` frames reversed, the frames after them left in place."""
    w = x.shape[1]
    idx = torch.arange(w, device=x.device).unsqueeze(0).expand(x.shape[0], w)
    ln = lengths.to(x.device).unsqueeze(1)
    rev = torch.where(idx < ln, (ln - 1 - idx).clamp(min=0), idx)
    return x.gather(1, rev.unsqueeze(-1).expand_as(x))


class LcBlstmLayer(nn.Module):
    """One LC-BLSTM layer: a forward and a backward ``nn.LSTM`` (fused kernels; ``proj_size`` as torch's)."""

    def __init__(self, input_size: int, hidden_size: int, proj_size: int, chunk: int, right: int):
        super().__init__()
        self.set_chunking(chunk, right)
        self.fwd = nn.LSTM(input_size, hidden_size, batch_first=True, proj_size=proj_size)
        self.bwd = nn.LSTM(input_size, hidden_size, batch_first=True, proj_size=proj_size)
        self.output_size = 2 * (proj_size or hidden_size)

    def set_chunking(self, chunk: int, right: int) -> None:
        """Chunks of ``chunk`` frames, each window with ``right`` frames of right context (no weight depends on it)."""
        if chunk < 1 or right < 0:
            raise ValueError(f"LC-BLSTM needs chunk_frames >= 1 and right_context >= 0, not {chunk}, {right}")
        self.chunk, self.right = chunk, right

    def forward(self, x: torch.Tensor, wlen: torch.Tensor, state: Optional[State] = None) -> Tuple[torch.Tensor, State]:
        """x: (B, K, W, D) windows; wlen: (B, K) valid frames per window; state: the forward direction's (h, c)
        before chunk 0 (zeros when None). → (B, K, W, 2H) (zeros at invalid frames), the forward state after the
        last chunk's ``chunk`` frames."""
        b, k, w, d = x.shape
        n = self.chunk
        outs: List[torch.Tensor] = []
        ends_h: List[torch.Tensor] = []
        ends_c: List[torch.Tensor] = []
        for i in range(k):  # the carried state: a frame past an utterance's end only changes later (invalid) frames
            y, state = self.fwd(x[:, i, :n], state)
            outs.append(y)
            ends_h.append(state[0])
            ends_c.append(state[1])
        y_fwd = torch.stack(outs, dim=1)  # (B, K, N, H)
        if self.right > 0:  # the right context from each chunk's end state, all windows in one batch
            h0 = torch.stack(ends_h, dim=2).reshape(1, b * k, -1)
            c0 = torch.stack(ends_c, dim=2).reshape(1, b * k, -1)
            y_rc, _ = self.fwd(x[:, :, n:].reshape(b * k, self.right, d), (h0, c0))
            y_fwd = torch.cat([y_fwd, y_rc.reshape(b, k, self.right, -1)], dim=2)
        flat_len = wlen.reshape(-1).clamp(min=1)
        rev = _reverse_valid(x.reshape(b * k, w, d), flat_len)
        y_bwd, _ = self.bwd(rev)  # zero state per window
        y_bwd = _reverse_valid(y_bwd, flat_len).reshape(b, k, w, -1)
        valid = (torch.arange(w, device=x.device).view(1, 1, w) < wlen.unsqueeze(-1)).unsqueeze(-1)
        return torch.cat([y_fwd, y_bwd], dim=-1) * valid.to(y_bwd.dtype), state


def run_layers(
    layers: nn.ModuleList,
    dropout: nn.Module,
    x: torch.Tensor,
    lengths: torch.Tensor,
    chunk: int,
    right: int,
    states: Optional[List[Optional[State]]] = None,
) -> Tuple[torch.Tensor, List[State]]:
    """(B, T, D) stacked frames, (B,) lengths → (B, T, out) of the last layer (chunk frames only), and each
    layer's forward state after the last chunk. ``states``: each layer's forward state before chunk 0."""
    t = x.shape[1]
    win = to_windows(x, chunk, right)
    wlen = window_lengths(lengths.to(x.device), win.shape[1], chunk, right)
    new_states: List[State] = []
    for i, layer in enumerate(layers):
        win, st = layer(win, wlen, None if states is None else states[i])
        win = dropout(win)
        new_states.append(st)
    return from_windows(win, chunk, t), new_states


class LcStream:
    """An LC-BLSTM acoustic model run chunk by chunk on a stream of (normalised) feature frames.

    :meth:`accept` takes any number of 10 ms frames and returns the log-probs (T', V) of every chunk whose window is
    now complete; :meth:`finish` returns the rest (the last chunks, whose windows end with the input). The
    concatenated output equals the model's whole-utterance output (up to float rounding)."""

    def __init__(self, model: nn.Module):
        self.model = model.eval()
        self.n, self.m, self.s = model.cfg.chunk_frames, model.cfg.right_context, model.stack
        self.device = next(model.parameters()).device
        # stacked frames not yet emitted (chunk + context); 10 ms frames not yet stacked
        self.buf = torch.zeros(0, model.feat_dim * model.stack, device=self.device)
        self.pending = torch.zeros(0, model.feat_dim, device=self.device)
        self.states: Optional[List[State]] = None
        self.frames_out = 0  # output frames emitted

    def accept(self, frames) -> torch.Tensor:
        f = torch.as_tensor(frames, dtype=torch.float32).reshape(-1, self.model.feat_dim).to(self.device)
        self.pending = torch.cat([self.pending, f])
        k = self.pending.shape[0] // self.s
        if k:
            stacked = self.pending[: k * self.s].reshape(k, -1)
            self.pending = self.pending[k * self.s :]
            self.buf = torch.cat([self.buf, stacked])
        out = []
        while self.buf.shape[0] >= self.n + self.m:
            out.append(self._run(self.buf[: self.n + self.m], self.n))
            self.buf = self.buf[self.n :]
        return torch.cat(out) if out else torch.zeros(0, self.model.vocab_size, device=self.device)

    def finish(self) -> torch.Tensor:
        """The remaining chunks (the stacked frames left; 10 ms frames short of a full stack are dropped, as in
        the whole-utterance model)."""
        out = []
        while self.buf.shape[0] > 0:
            out.append(self._run(self.buf[: self.n + self.m], min(self.n, self.buf.shape[0])))
            self.buf = self.buf[self.n :]
        return torch.cat(out) if out else torch.zeros(0, self.model.vocab_size, device=self.device)

    @torch.no_grad()
    def _run(self, window: torch.Tensor, keep: int) -> torch.Tensor:
        """One chunk's window (its valid stacked frames, at most chunk + right) → the log-probs of its first
        ``keep`` frames; the forward states carry to the next chunk."""
        w = self.n + self.m
        x = torch.nn.functional.pad(window, (0, 0, 0, w - window.shape[0])).view(1, 1, w, -1)
        wlen = torch.tensor([[window.shape[0]]], device=self.device)
        states: List[State] = []
        for i, layer in enumerate(self.model.layers):
            x, st = layer(x, wlen, None if self.states is None else self.states[i])
            states.append(st)
        self.states = states
        self.frames_out += keep
        return self.model.output(x[0, 0, :keep]).float().log_softmax(dim=-1)
