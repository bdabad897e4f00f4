"""A quantised mean of one vector over the learners (diloco's ``train.dist.outer_bits`` 8 or 4).

Every value is sent as a signed ``bits``-bit integer code with one float32 scale per ``block`` consecutive values
(``scale = max |x| / (2^(bits-1) - 1)`` over the block, codes rounded to nearest); 4-bit codes are packed two to a
byte. A sum of codes cannot go through a plain all-reduce (each block has its own scale), so the mean is computed
in two collectives of quantised payloads (a reduce-scatter, then an all-gather):

1. the padded vector is split into ``world`` equal chunks; learner ``r`` quantises its whole vector and sends
   chunk ``j`` to learner ``j`` (``all_to_all_single``; its own chunk stays home);
2. learner ``r`` dequantises the ``world`` copies of its chunk, averages them, quantises the mean once more and
   all-gathers it (``all_gather_single``); every learner dequantises the same gathered bytes, so all hold the
   same mean bit for bit.

A learner hands ``(world - 1) / world + 1 / world`` = one quantised vector to torch.distributed per mean (as the
byte meter counts it: what each call is handed to send), against four bytes per value for a float32 all-reduce.

Error feedback (``error_feedback``): what quantisation dropped is added to the next call's input, per learner for
step 1 (``error``, the vector's length) and for step 2 (``server_error``, its chunk's length); both are state to
checkpoint (:meth:`QuantisedMean.state_dict`).

Buffers live on the device of the vector given to :meth:`QuantisedMean.mean` (the learner's ``self.device``).
"""

from __future__ import annotations

from typing import Dict, Optional

import torch
import torch.distributed as dist

from asrlib.errors import AsrError

BITS = (8, 4)


def check(bits: int, block: int, key: str = "train.dist") -> None:
    if bits not in (32, *BITS):
        raise AsrError(f"{key}.outer_bits must be 32 (float32 all-reduce), 8 or 4, not {bits}")
    if block < 2 or block % 2:
        raise AsrError(f"{key}.outer_block must be an even number >= 2 (values per scale), not {block}")


def quantise(x: torch.Tensor, bits: int, block: int) -> tuple:
    """Codes (uint8; 4-bit codes packed two per byte) and float32 scales of ``x`` (length a multiple of ``block``)."""
    qmax = 2 ** (bits - 1) - 1
    xb = x.reshape(-1, block)
    scale = xb.abs().amax(dim=1) / qmax
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = torch.round(xb / safe[:, None]).clamp_(-qmax, qmax).to(torch.int8).reshape(-1)
    if bits == 8:
        return codes.view(torch.uint8), scale
    u = (codes + 8).to(torch.uint8)  # 1..15
    return u[0::2] | (u[1::2] << 4), scale


def dequantise(codes: torch.Tensor, scale: torch.Tensor, bits: int, block: int) -> torch.Tensor:
    if bits == 8:
        q = codes.view(torch.int8).to(torch.float32)
    else:
        q = torch.stack([codes & 15, codes >> 4], dim=1).reshape(-1).to(torch.float32) - 8
    return (q.reshape(-1, block) * scale[:, None]).reshape(-1)


def pack(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """One uint8 message: the codes, then the scales' bytes."""
    return torch.cat([codes, scale.view(torch.uint8)])


def unpack(msg: torch.Tensor, n: int, bits: int, block: int) -> torch.Tensor:
    """:func:`dequantise` of a :func:`pack` message of ``n`` values."""
    nc = n * bits // 8
    return dequantise(msg[:nc], msg[nc:].view(torch.float32), bits, block)


def roundtrip(x: torch.Tensor, bits: int, block: int) -> torch.Tensor:
    return dequantise(*quantise(x, bits, block), bits, block)


class QuantisedMean:
    """The mean over the learners of a vector of ``n`` values, sent quantised (see the module docstring)."""

    def __init__(self, n: int, bits: int, block: int, rank: int, world: int, error_feedback: bool = True):
        check(bits, block)
        self.n, self.bits, self.block, self.rank, self.world = n, bits, block, rank, world
        self.chunk = -(-n // (world * block)) * block  # values per learner's chunk, a whole number of blocks
        self.error_feedback = error_feedback
        self.error: Optional[torch.Tensor] = None  # (world * chunk,): this learner's dropped remainder
        self.server_error: Optional[torch.Tensor] = None  # (chunk,): same, for the mean of its chunk

    def _quantise(self, name: str, x: torch.Tensor) -> tuple:
        if self.error_feedback:
            err = getattr(self, name)
            if err is not None:
                x = x + err
        codes, scale = quantise(x, self.bits, self.block)
        if self.error_feedback:
            setattr(self, name, x - dequantise(codes, scale, self.bits, self.block))
        return codes, scale

    def mean(self, v: torch.Tensor) -> torch.Tensor:
        """Collective: the quantised mean of every learner's ``v`` (1-D, ``n`` values), the same on every learner."""
        c, w, r = self.chunk, self.world, self.rank
        x = torch.zeros(w * c, dtype=torch.float32, device=v.device)
        x[: self.n] = v
        codes, scale = self._quantise("error", x)
        cb, sb = c * self.bits // 8, c // self.block  # code bytes and scales per chunk
        msgs = [pack(codes[j * cb : (j + 1) * cb], scale[j * sb : (j + 1) * sb]) for j in range(w)]
        size = msgs[0].numel()
        total = dequantise(codes[r * cb : (r + 1) * cb], scale[r * sb : (r + 1) * sb], self.bits, self.block)
        if w > 1:  # everyone's chunk r, not our own (it stays home)
            others = [j for j in range(w) if j != r]
            recv = torch.empty(len(others) * size, dtype=torch.uint8, device=v.device)
            splits = [0 if j == r else size for j in range(w)]
            dist.all_to_all_single(recv, torch.cat([msgs[j] for j in others]), splits, splits)
            for i in range(len(others)):
                total = total + unpack(recv[i * size : (i + 1) * size], c, self.bits, self.block)
        mine = pack(*self._quantise("server_error", total / w))
        out = torch.empty(w * size, dtype=torch.uint8, device=v.device)
        if w > 1:
            dist.all_gather_single(out, mine)
        else:
            out.copy_(mine)
        return torch.cat([unpack(out[j * size : (j + 1) * size], c, self.bits, self.block) for j in range(w)])[: self.n]

    def payload_bytes(self) -> int:
        """Bytes one learner hands to torch.distributed per :meth:`mean` (for tests and the timing model)."""
        size = self.chunk * self.bits // 8 + self.chunk // self.block * 4
        return size * self.world if self.world > 1 else 0

    def state_dict(self) -> Dict[str, Optional[torch.Tensor]]:
        return {"error": self.error, "server_error": self.server_error}

    def load_state_dict(self, st: Dict[str, Optional[torch.Tensor]], device: torch.device) -> None:
        self.error = None if st.get("error") is None else st["error"].to(device)
        self.server_error = None if st.get("server_error") is None else st["server_error"].to(device)
