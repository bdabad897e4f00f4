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
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence

import torch
import torch.distributed as dist

from asrlib.errors import AsrError


def check(density: float, bits: int, key: str) -> None:
    if not 0.0 < density <= 1.0:
        raise AsrError(f"{key} must be in (0, 1], not {density}")
    if bits not in (16, 32):
        raise AsrError(f"train.dist.topk_value_bits must be 16 or 32, not {bits}")


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


def pack(idx: torch.Tensor, values: torch.Tensor, bits: int) -> torch.Tensor:
    """Positions (int32) and values (bfloat16 or float32) as one message of bytes."""
    v = values.to(torch.bfloat16) if bits == 16 else values.to(torch.float32)
    return torch.cat([idx.to(torch.int32).view(torch.uint8), v.view(torch.uint8)])


def unpack(msg: torch.Tensor, k: int, bits: int) -> tuple:
    idx = msg[: 4 * k].view(torch.int32).long()
    values = msg[4 * k :].view(torch.bfloat16 if bits == 16 else torch.float32).float()
    return idx, values


class SparseMean:
    """The mean over the learners of the top values of each learner's vector plus its residual."""

    def __init__(self, sizes: Sequence[int], bits: int, world: int):
        self.sizes, self.bits, self.world = list(sizes), bits, world
        self.residual: Optional[torch.Tensor] = None
        self.sent_values = 0  # values sent so far
        self.last_bytes = 0  # bytes of the last message

    def mean(self, v: torch.Tensor, density: float, carry: bool = True) -> torch.Tensor:
        """``carry`` False: ``v`` already holds what was not sent before (diloco keeps it in the learner's model)."""
        acc = v.to(torch.float32, copy=True)  # a copy: it becomes the residual
        if carry and self.residual is not None:
            acc += self.residual
        idx = select(acc, self.sizes, density)
        k = idx.numel()
        msg = pack(idx, acc[idx], self.bits)
        acc[idx] -= unpack(msg, k, self.bits)[1]  # what the others add: its rounding stays here
        self.residual = acc
        self.sent_values += k
        self.last_bytes = msg.numel()
        got = [torch.empty_like(msg) for _ in range(self.world)]
        dist.all_gather(got, msg)
        out = torch.zeros(acc.numel(), dtype=torch.float32, device=acc.device)
        for m in got:  # in rank order: the same sums on every learner
            out.index_add_(0, *unpack(m, k, self.bits))
        return out.div_(self.world)

    def state_dict(self) -> Dict[str, object]:
        return {"residual": self.residual, "sent_values": self.sent_values}

    def load_state_dict(self, st: Dict[str, object], device: torch.device) -> None:
        r = st["residual"]
        self.residual = r.to(device) if r is not None else None
        self.sent_values = int(st["sent_values"])
