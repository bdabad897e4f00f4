"""``adpsgd`` and ``hadpsgd``: asynchronous decentralized parallel SGD (Lian et al. 2018) and its hierarchical form
(IBM, Zhang et al. 2019).

``adpsgd``: every learner takes local optimizer steps on its own shard and, concurrently, averages its model with
a ring neighbour (see :mod:`asrlib.parallel.gossip` for the active/passive protocol and why it cannot deadlock). There
is no global barrier between steps; the only waits are for one's own previous exchange (bounded staleness: one
step), the epoch-end dev-loss reduction and checkpoints (every ``train.checkpoint_every`` steps). At the end of
training the learners' models are averaged once (the sum
of the models is preserved by every exchange, so this is the ring's consensus model).

``hadpsgd``: learners on one node (``train.dist.local_world_size``, else torchrun's LOCAL_WORLD_SIZE; 2 simulated
nodes x 2 learners works on one machine) form a super-learner by synchronous gradient all-reduce every step
(NCCL ring on GPUs, Gloo on CPU); the node leaders (local rank 0) run ADPSGD among the super-learners and broadcast
each merge to their node, so the learners of a node stay identical. ``adpsgd`` is the special case of nodes of one.

Checkpoints are taken at rest: actives finish their in-flight exchange, then a barrier, then every learner applies
the merges it received and saves its own model, optimizer and RNG. Resume restores each learner's state exactly,
but which exchange lands between which steps depends on timing, so a resumed run (like any rerun) is not
bit-identical to an uninterrupted one; it continues from the same models.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional

import torch
import torch.distributed as dist

from asrlib.parallel.base import DistAlgo
from asrlib.parallel.env import gloo_group, node_groups
from asrlib.parallel.gossip import Gossip

log = logging.getLogger(__name__)


class HierarchicalAdpsgd(DistAlgo):
    name = "hadpsgd"

    def __init__(self, cfg, info=None, node_size: Optional[int] = None):
        super().__init__(cfg, info)
        self.node_size = node_size or self.info.local_world_size
        if self.world_size % self.node_size:
            from asrlib.errors import AsrError

            raise AsrError(f"{self.world_size} learners cannot form nodes of {self.node_size}")
        self.node_group, self.node_ranks = node_groups(self.world_size, self.node_size, self.rank)
        self.leader = self.node_ranks[0]
        self.leaders = list(range(0, self.world_size, self.node_size))
        self.gossip_group = gloo_group(self.leaders) if len(self.leaders) > 1 else None
        self.gossip: Optional[Gossip] = None
        self.merges = 0

    @property
    def is_leader(self) -> bool:
        return self.rank == self.leader

    def _snapshot(self) -> torch.Tensor:
        with self.lock:
            return self.flat_params(torch.device("cpu"))

    def start(self) -> None:
        if self.is_leader and self.gossip_group is not None:
            numel = sum(p.numel() for p in self.params())
            self.gossip = Gossip(
                self.leaders, self.rank, self.gossip_group, numel, self.params()[0].dtype, self._snapshot, self.bg_stats
            )
            self.gossip.start()
            if self.rank == 0:
                log.info(
                    "%s: %d super-learner(s) of %d learner(s); gossip ring %s",
                    self.name,
                    len(self.leaders),
                    self.node_size,
                    self.leaders,
                )

    def after_backward(self, model: torch.nn.Module, has_data: bool = True) -> bool:
        self.begin_update()
        if self.node_size > 1:
            has_data = self.allreduce_grads(has_data, group=self.node_group, group_size=self.node_size)
        self.lock.acquire()  # released in after_step: no snapshot of a half-applied update
        return has_data

    def after_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
        try:
            super().after_step(model, optimizer, step)
            g = self.gossip
            if g is not None and g.active:
                with self.timed_wait():
                    g.wait_idle()  # previous exchange (overlapped with this step's computation)
            self._apply_merges()
            if g is not None and g.active:
                g.trigger(self.flat_params(torch.device("cpu")))
            if g is not None:
                g.check()
        finally:
            self.lock.release()

    def _apply_merges(self) -> None:
        """Leader: add the merges received so far; broadcast them to the node so its learners stay identical."""
        delta = self.gossip.take_pending() if self.gossip is not None else None
        if self.node_size > 1:
            flag = torch.tensor([0 if delta is None else 1], dtype=torch.int64, device=self.device)
            with self.stats.timed():
                dist.broadcast(flag, src=self.leader, group=self.node_group)
            self.stats.broadcast(8, self.node_size, self.is_leader)
            if int(flag) == 1:
                buf = (
                    delta.to(self.device)
                    if self.is_leader
                    else torch.empty(
                        sum(p.numel() for p in self.params()), dtype=self.params()[0].dtype, device=self.device
                    )
                )
                with self.stats.timed():
                    dist.broadcast(buf, src=self.leader, group=self.node_group)
                self.stats.broadcast(buf.numel() * buf.element_size(), self.node_size, self.is_leader)
                delta = buf
        if delta is not None:
            self.set_flat_params(self.flat_params().add_(delta.to(self.device)))
            self.merges += 1

    def quiesce(self) -> None:
        """Checkpoint at rest: actives finish their exchange, barrier, everyone applies what arrived."""
        if self.gossip is not None and self.gossip.active:
            with self.timed_wait():
                self.gossip.wait_idle()
        dist.barrier()
        with self.lock:
            self._apply_merges()

    def stop(self) -> None:
        if self.gossip is not None:
            if self.gossip.active:
                self.gossip.finish_active()
            else:
                self.gossip.join()
        with self.lock:
            # the last merges: gossip has stopped, so an empty slot is broadcast where there are none
            self._apply_merges()
        self.average_params()  # consensus model: the mean of the learners (preserved by every exchange)

    def extra_summary(self) -> Dict[str, Any]:
        return {
            "node_size": self.node_size,
            "merges_applied": self.merges,
            "gossip_exchanges": self.gossip.exchanges if self.gossip is not None else None,
        }


class Adpsgd(HierarchicalAdpsgd):
    name = "adpsgd"

    def __init__(self, cfg, info=None):
        super().__init__(cfg, info, node_size=1)
