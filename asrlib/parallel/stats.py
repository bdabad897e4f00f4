"""Communication accounting per learner: bytes, messages, time spent communicating and time spent waiting.

Point-to-point volumes are exact (the bytes of the tensors sent and received). For collectives the library picks
its own algorithm, so the volume put on the wire is the standard estimate: a ring all-reduce of ``B`` bytes among
``n`` learners sends and receives ``2 (n-1)/n * B`` per learner; a broadcast sends ``(n-1) * B`` from the root and
receives ``B`` elsewhere. ``payload_bytes`` is always the exact size of the tensors handed to the library.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass
from typing import Dict, Iterator


@dataclass
class CommStats:
    sent_bytes: float = 0.0  # bytes put on the wire by this learner (p2p exact, collectives estimated)
    recv_bytes: float = 0.0
    payload_bytes: float = 0.0  # bytes of the tensors handed to the communication library
    messages: int = 0  # collectives + point-to-point messages
    comm_s: float = 0.0  # time the training thread spent blocked in communication
    wait_s: float = 0.0  # time the training thread waited for a background exchange / the ring token
    background_comm_s: float = 0.0  # communication on background threads (overlapped with computation)
    steps: int = 0
    cycle_s: float = 0.0  # step cycles (backward to backward) inside epochs: the time per step
    cycles: int = 0

    def all_reduce(self, nbytes: int, n: int) -> None:
        self.payload_bytes += nbytes
        self.messages += 1
        if n > 1:
            self.sent_bytes += 2.0 * (n - 1) / n * nbytes
            self.recv_bytes += 2.0 * (n - 1) / n * nbytes

    def all_gather(self, nbytes: int, n: int) -> None:
        """``nbytes`` from each learner to every other (a ring: each learner passes on N - 1 blocks)."""
        self.payload_bytes += nbytes
        self.messages += 1
        self.sent_bytes += (n - 1) * nbytes
        self.recv_bytes += (n - 1) * nbytes

    def broadcast(self, nbytes: int, n: int, root: bool) -> None:
        self.payload_bytes += nbytes
        self.messages += 1
        if n > 1:
            if root:
                self.sent_bytes += (n - 1) * nbytes
            else:
                self.recv_bytes += nbytes

    def send(self, nbytes: int) -> None:
        self.payload_bytes += nbytes
        self.sent_bytes += nbytes
        self.messages += 1

    def recv(self, nbytes: int) -> None:
        self.payload_bytes += nbytes
        self.recv_bytes += nbytes
        self.messages += 1

    @contextlib.contextmanager
    def timed(self, field: str = "comm_s") -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, field, getattr(self, field) + time.perf_counter() - t0)

    def as_dict(self) -> Dict[str, float]:
        return dataclasses.asdict(self)

    def __add__(self, other: "CommStats") -> "CommStats":
        return CommStats(**{k: getattr(self, k) + getattr(other, k) for k in self.as_dict()})

    def __sub__(self, other: "CommStats") -> "CommStats":
        return CommStats(**{k: getattr(self, k) - getattr(other, k) for k in self.as_dict()})

    def copy(self) -> "CommStats":
        return CommStats(**self.as_dict())
