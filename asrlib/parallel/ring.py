"""``ring``: the ring-structured parallel strategy (RSPS) of the slides — asynchronous, no central node.

One model travels round the ring of learners. Each learner computes the gradient of its next minibatch on the
model it last held; then it receives the travelling model from its predecessor (the only wait), merges its
gradient into it with its optimizer step, and sends the new model on to its successor without waiting
(``isend``) — the transfer overlaps its next minibatch. One model transmission per minibatch per learner.

Timing (see :mod:`asrlib.parallel.timing`): while the model's lap ``n*T_transmit + (n-1)*T_merge`` fits inside one
``T_calc``, no learner waits and the speed-up is n; beyond that every learner waits ``T_wait`` per minibatch.

Each learner's gradient is computed on a model that is n-1 merges old (the staleness is exactly n-1). The token
starts at rank 0 and, after the last step, comes home to rank 0 and is broadcast as the final model.

Every learner does the same operations in the same order whatever the timing, so a run is deterministic and resume
is exact: at a checkpoint rank 0 first takes in the model that is on its way to it and saves it with its state.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist

from asrlib.parallel.base import DistAlgo
from asrlib.parallel.env import gloo_group

log = logging.getLogger(__name__)

TAG = 31


class RingRsps(DistAlgo):
    name = "ring"

    def __init__(self, cfg, info=None):
        super().__init__(cfg, info)
        n = self.world_size
        self.prev, self.next = (self.rank - 1) % n, (self.rank + 1) % n
        self.group = gloo_group(list(range(n))) if n > 1 else None
        self.holding = self.rank == 0  # rank 0 holds the model at the start
        self.token: Optional[torch.Tensor] = None  # a received model not yet used (rank 0 at a checkpoint)
        self.outstanding: List = []
        self.received = 0

    def _recv_token(self) -> torch.Tensor:
        buf = torch.empty(sum(p.numel() for p in self.params()), dtype=self.params()[0].dtype)
        with self.timed_wait():
            dist.recv(buf, self.prev, group=self.group, tag=TAG)
        self.stats.recv(buf.numel() * buf.element_size())
        self.received += 1
        return buf

    def after_backward(self, model: torch.nn.Module, has_data: bool = True) -> bool:
        self.begin_update()
        if self.world_size == 1:
            return has_data
        if self.holding:
            token, self.token, self.holding = self.token, None, False
        else:
            token = self._recv_token()
        if token is not None:
            self.set_flat_params(token.to(self.device))  # this learner's gradient is merged into the ring's model
        return has_data

    def after_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
        super().after_step(model, optimizer, step)
        if self.world_size == 1:
            return
        for w in self.outstanding:  # the previous send (long done unless the successor is slow)
            with self.timed_wait():
                w.wait()
        out = self.flat_params(torch.device("cpu"))
        self.outstanding = [dist.isend(out, self.next, group=self.group, tag=TAG)]
        self.stats.send(out.numel() * out.element_size())

    def quiesce(self) -> None:
        if self.world_size > 1 and self.rank == 0 and not self.holding and self.steps_done > 0:
            self.token, self.holding = self._recv_token(), True
        for w in self.outstanding:
            w.wait()
        self.outstanding = []

    def stop(self) -> None:
        if self.world_size == 1:
            return
        self.quiesce()
        if self.rank == 0 and self.token is not None:
            self.set_flat_params(self.token.to(self.device))
        self.broadcast_params(0)

    def local_state(self) -> Dict[str, Any]:
        return {"holding": self.holding, "token": self.token}

    def load_local(self, st: Dict[str, Any]) -> None:
        self.holding, self.token = st["holding"], st["token"]

    def extra_summary(self) -> Dict[str, Any]:
        return {"tokens_received": self.received, "staleness": self.world_size - 1}
