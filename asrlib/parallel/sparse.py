"""A sparsified mean of one vector over the learners, with error feedback (``topk``'s gradients, per DDP bucket;
``diloco``'s pseudo-gradient with ``train.dist.outer_topk``).

Each learner adds the vector to its residual (what it has not sent yet), keeps, in each parameter's segment, the
``density`` share of that sum with the largest magnitudes (at least one value a segment, so every layer keeps a
voice: the per-layer selection of Deep Gradient Compression, Lin et al. 2018), and all-gathers their positions
(int32) and values (bfloat16, or float32 at 32 bits) as one message of bytes (Gloo gathers no int16). Everything
else, and the rounding of the values sent, stays in the residual for the next call: nothing is dropped, only delayed.
Every learner scatters all the messages into zeros and divides by the learners, so all hold the same mean bit for
bit. A learner hands ``6 k`` bytes (``8 k`` at 32 bits) to torch.distributed for ``k`` values kept of ``n``, against
``4 n`` for a float32 all-reduce; but an all-gather brings every learner's message to everyone, so what a learner
receives grows with the learners (N - 1 messages).

With ``topk_index_bits: 16`` the segments are cut into blocks of at most 65 536 values, each keeping its own top
share, and a position is sent as its 16-bit offset in its block: ``4 k`` bytes at bfloat16, so the same bytes carry
1.5 times the values (every learner knows the blocks and how many each keeps, so the offsets decode alone).
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from asrlib.errors import AsrError


BLOCK = 1 << 16  # values per block with 16-bit positions


def check(density: float, bits: int, key: str, index_bits: int = 32) -> None:
    if not 0.0 < density <= 1.0:
        raise AsrError(f"{key} must be in (0, 1], not {density}")
    if bits not in (16, 32):
        raise AsrError(f"train.dist.topk_value_bits must be 16 or 32, not {bits}")
    if index_bits not in (16, 32):
        raise AsrError(f"train.dist.topk_index_bits must be 16 or 32, not {index_bits}")


def check_config(cfg, density: float, key: str) -> None:
    """``check`` of ``density`` (the setting ``key``) with the widths a ``train.dist`` config sets."""
    check(density, cfg.topk_value_bits, key, cfg.topk_index_bits)


def blocks(sizes: Sequence[int], index_bits: int) -> List[int]:
    """The segments selected in: the parameters (32-bit positions), or each cut into blocks of at most ``BLOCK``
    values (16-bit positions: offsets in the block)."""
    if index_bits == 32:
        return list(sizes)
    return [min(BLOCK, n - o) for n in sizes for o in range(0, n, BLOCK)]


def kept(sizes: Sequence[int], density: float) -> List[int]:
    """Values kept per segment: the same on every learner."""
    return [max(1, min(n, math.ceil(density * n))) for n in sizes]


def select(acc: torch.Tensor, sizes: Sequence[int], density: float) -> torch.Tensor:
    """Positions in ``acc`` of the ``density`` share of each segment's values (``sizes``) with the largest
    magnitudes."""
    picks, offset = [], 0
    mags = acc.abs()
    for n, k in zip(sizes, kept(sizes, density)):
        picks.append(torch.topk(mags[offset : offset + n], k, sorted=False).indices + offset)
        offset += n
    return torch.cat(picks)


def pack(idx: torch.Tensor, base: torch.Tensor, values: torch.Tensor, bits: int, index_bits: int) -> torch.Tensor:
    """Positions (int32, or int16 offsets from ``base``, their blocks' starts) and values (bfloat16 or float32) as one
    message of bytes, the wider kind first so that each part's bytes can be viewed as its type."""
    pos = idx.to(torch.int32) if index_bits == 32 else (idx - base).to(torch.int32).to(torch.int16)  # wraps >= 2^15
    v = values.to(torch.bfloat16) if bits == 16 else values.to(torch.float32)
    parts = sorted([pos, v], key=lambda t: -t.element_size())
    return torch.cat([t.view(torch.uint8) for t in parts])


def unpack(msg: torch.Tensor, base: torch.Tensor, bits: int, index_bits: int) -> tuple:
    """(positions, float32 values) of a message of ``base.numel()`` values."""
    k = base.numel()
    kinds = sorted([(index_bits, "pos"), (bits, "val")], key=lambda t: -t[0])
    at, part = 0, {}
    for b, name in kinds:
        part[name] = msg[at : at + k * b // 8]
        at += k * b // 8
    if index_bits == 32:
        idx = part["pos"].view(torch.int32).long()
    else:
        idx = (part["pos"].view(torch.int16).long() & 0xFFFF) + base
    values = part["val"].view(torch.bfloat16 if bits == 16 else torch.float32).float()
    return idx, values


class SparseMean:
    """The mean over the learners of the top values of each learner's vector plus its residual."""

    def __init__(self, sizes: Sequence[int], bits: int, world: int, index_bits: int = 32):
        self.sizes, self.bits, self.world, self.index_bits = blocks(sizes, index_bits), bits, world, index_bits
        self.starts = torch.tensor([0, *self.sizes[:-1]]).cumsum(0)
        self.bases: Dict[Tuple[float, torch.device], torch.Tensor] = {}  # each kept value's block start
        self.residual: Optional[torch.Tensor] = None
        self.sent_values = 0  # values sent so far
        self.last_bytes = 0  # bytes of the last message

    @classmethod
    def from_config(cls, sizes: Sequence[int], cfg, world: int) -> "SparseMean":
        """With the value and position widths a ``train.dist`` config sets."""
        return cls(sizes, cfg.topk_value_bits, world, cfg.topk_index_bits)

    def base(self, density: float, device: torch.device) -> torch.Tensor:
        key = (density, device)
        if key not in self.bases:
            counts = torch.tensor(kept(self.sizes, density))
            self.bases[key] = torch.repeat_interleave(self.starts, counts).to(device)
        return self.bases[key]

    def mean(self, v: torch.Tensor, density: float, carry: bool = True) -> torch.Tensor:
        """``carry`` False: ``v`` already holds what was not sent before (diloco keeps it in the learner's model)."""
        acc = v.to(torch.float32, copy=True)  # a copy: it becomes the residual
        if carry and self.residual is not None:
            acc += self.residual
        idx = select(acc, self.sizes, density)
        base = self.base(density, acc.device)
        msg = pack(idx, base, acc[idx], self.bits, self.index_bits)
        mine = unpack(msg, base, self.bits, self.index_bits)  # what the others add
        acc[idx] -= mine[1]  # its rounding stays here
        self.residual = acc
        self.sent_values += idx.numel()
        self.last_bytes = msg.numel()
        got = [torch.empty_like(msg) for _ in range(self.world)]
        dist.all_gather(got, msg)
        out = torch.zeros(acc.numel(), dtype=torch.float32, device=acc.device)
        me = dist.get_rank()
        for r, m in enumerate(got):  # in rank order: the same sums on every learner
            out.index_add_(0, *(mine if r == me else unpack(m, base, self.bits, self.index_bits)))
        return out.div_(self.world)

    def state_dict(self) -> Dict[str, object]:
        return {"residual": self.residual, "sent_values": self.sent_values}

    def load_state_dict(self, st: Dict[str, object], device: torch.device) -> None:
        r = st["residual"]
        self.residual = r.to(device) if r is not None else None
        self.sent_values = int(st["sent_values"])
