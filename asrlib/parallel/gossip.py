"""Pairwise model averaging on a ring without a global barrier: the communication engine of ADPSGD / H-ADPSGD.

Members (learners, or super-learners represented by their node leader) sit on a ring. Why it cannot deadlock:

- **active/passive split** (bipartite ring): members at even ring positions are *active*, the others *passive*
  (with an odd count the last member is passive too, so no two actives are neighbours). Only actives start an
  exchange, always with a passive neighbour (alternating left/right); passives only answer. No member ever waits
  for a member that is itself waiting for it, and an active has at most one exchange in flight.
- **a communication thread per member** does all the sending and receiving, on its own Gloo group, so exchanges
  overlap the training thread's forward/backward; a passive answers requests even while its training thread is
  busy, waiting in an epoch-end collective, or finished.
- **the training thread never sends or waits inside the ring except in two bounded places**: an active hands its
  model snapshot to its thread after every step and, before handing the next one, waits for the previous exchange
  (staleness is bounded by one step); and at the end, actives send DONE to their passive neighbours and passives
  stop after a DONE from every active neighbour.

An exchange: the active sends a snapshot ``a`` of its model, the passive replies with its own snapshot ``p``. Each
side then adds half the difference to whatever its model has become meanwhile (``x += (p - a)/2`` and
``x += (a - p)/2``), applied by the training thread between steps. So the sum of all models is preserved exactly
however exchanges interleave with local steps — the average model moves only by gradient steps.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable, List, Optional

import torch
import torch.distributed as dist

from asrlib.parallel.stats import CommStats

log = logging.getLogger(__name__)

REQ, DONE = 1, 2
HEADER_TAG, MODEL_TAG = 11, 12  # separate tags: a header never matches a model message


def is_active(pos: int, n: int) -> bool:
    """Active members: even ring positions, except the last one of an odd-sized ring."""
    return n > 1 and pos % 2 == 0 and not (n % 2 == 1 and pos == n - 1)


class Gossip:
    """The communication thread of one ring member (see the module docstring)."""

    def __init__(
        self,
        members: List[int],
        me: int,
        group,
        numel: int,
        dtype: torch.dtype,
        snapshot: Callable[[], torch.Tensor],
        stats: CommStats,
    ):
        self.members, self.me, self.group = members, me, group
        self.numel, self.dtype, self.snapshot, self.stats = numel, dtype, snapshot, stats
        n = len(members)
        self.pos = members.index(me)
        self.active = is_active(self.pos, n)
        nbrs = sorted({members[(self.pos - 1) % n], members[(self.pos + 1) % n]} - {me}) if n > 1 else []
        if self.active:
            self.peers = [r for r in nbrs if not is_active(members.index(r), n)]
        else:
            self.peers = [r for r in nbrs if is_active(members.index(r), n)]
        self.pending: List[torch.Tensor] = []
        self.pending_lock = threading.Lock()
        self.idle = threading.Event()
        self.idle.set()
        self.jobs: "queue.Queue[Optional[torch.Tensor]]" = queue.Queue()
        self.exchanges = 0
        self.error: Optional[BaseException] = None
        self.thread: Optional[threading.Thread] = None

    def start(self) -> None:
        if not self.peers:
            return
        target = self._active_loop if self.active else self._passive_loop
        self.thread = threading.Thread(target=self._guard, args=(target,), daemon=True, name=f"gossip-{self.me}")
        self.thread.start()

    def _guard(self, target) -> None:
        try:
            target()
        except BaseException as e:  # surfaced in the training thread by check()
            self.error = e
            self.idle.set()

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"gossip thread of learner {self.me} failed: {self.error!r}") from self.error

    # ---------------------------------------------------------------- active side
    def trigger(self, snap: torch.Tensor) -> None:
        """Start the next exchange with ``snap`` (a copy of the model taken by the training thread)."""
        if not self.active or not self.peers:
            return
        self.idle.clear()
        self.jobs.put(snap)

    def wait_idle(self) -> float:
        t0 = time.perf_counter()
        self.idle.wait()
        self.check()
        return time.perf_counter() - t0

    def _active_loop(self) -> None:
        k = 0
        header = torch.zeros(2, dtype=torch.int64)
        remote = torch.empty(self.numel, dtype=self.dtype)
        while True:
            snap = self.jobs.get()
            if snap is None:
                for peer in self.peers:
                    header[0], header[1] = DONE, k
                    dist.send(header, peer, group=self.group, tag=HEADER_TAG)
                    self.stats.send(header.numel() * 8)
                return
            peer = self.peers[k % len(self.peers)]
            t0 = time.perf_counter()
            header[0], header[1] = REQ, k
            dist.send(header, peer, group=self.group, tag=HEADER_TAG)
            dist.send(snap, peer, group=self.group, tag=MODEL_TAG)
            dist.recv(remote, peer, group=self.group, tag=MODEL_TAG)
            self.stats.background_comm_s += time.perf_counter() - t0
            self.stats.send(header.numel() * 8)
            self.stats.send(snap.numel() * snap.element_size())
            self.stats.recv(remote.numel() * remote.element_size())
            with self.pending_lock:
                self.pending.append((remote - snap).mul_(0.5))
            k += 1
            self.exchanges = k
            self.idle.set()

    def finish_active(self) -> None:
        self.wait_idle()
        self.jobs.put(None)
        self.join()

    # ---------------------------------------------------------------- passive side
    def _passive_loop(self) -> None:
        remaining = set(self.peers)
        header = torch.zeros(2, dtype=torch.int64)
        remote = torch.empty(self.numel, dtype=self.dtype)
        while remaining:
            src = dist.recv(header, src=None, group=self.group, tag=HEADER_TAG)
            self.stats.recv(header.numel() * 8)
            if int(header[0]) == DONE:
                remaining.discard(src)
                continue
            t0 = time.perf_counter()
            dist.recv(remote, src, group=self.group, tag=MODEL_TAG)
            snap = self.snapshot()
            dist.send(snap, src, group=self.group, tag=MODEL_TAG)
            self.stats.background_comm_s += time.perf_counter() - t0
            self.stats.recv(remote.numel() * remote.element_size())
            self.stats.send(snap.numel() * snap.element_size())
            with self.pending_lock:
                self.pending.append((remote - snap).mul_(0.5))
            self.exchanges += 1

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        self.check()

    # ---------------------------------------------------------------- both
    def take_pending(self) -> Optional[torch.Tensor]:
        """Sum of the merges that arrived since the last call (None if none)."""
        with self.pending_lock:
            items, self.pending = self.pending, []
        if not items:
            return None
        total = items[0]
        for d in items[1:]:
            total = total + d
        return total
