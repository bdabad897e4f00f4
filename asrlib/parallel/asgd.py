"""``asgd``: asynchronous parameter-server SGD (Downpour-style), the baseline the seeds call inefficient.

Rank 0 hosts the parameter server in a background thread (its training thread is also a worker). Each worker,
after its local optimizer step, pushes its update ``delta = W_local - W_pulled`` (point-to-point send on a Gloo
group) and blocks until the server replies with the current global model, which becomes its new local model.
The server adds every delta to the global model as it arrives, in arrival order, with no barrier between workers.
Rank 0's own worker pushes in-process (no bytes on the wire).

Staleness: the server counts global versions; a push computed from version ``v`` applied at version ``V`` has
staleness ``V - v`` (how many other updates landed in between). Its distribution (max, mean, histogram) is logged and
reported; with N workers and no stragglers its mean is near N - 1 (toy task, 2 workers: mean 0.95, max 3).
Nothing bounds it by force — a straggler's stale update is applied as is — which, with the server's serialised
apply-and-reply and two model transfers per step, is why ASGD scales poorly.

Resume: the global model, its version and every worker's model/optimizer/RNG are checkpointed (at rest: every push
is synchronous, so none is in flight when all workers are in the checkpoint). Arrival order after resume depends
on timing, so as for ADPSGD the run continues from the same state but is not bit-identical to an uninterrupted one.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Dict, Optional

import torch
import torch.distributed as dist

from asrlib.parallel.base import DistAlgo
from asrlib.parallel.env import gloo_group

log = logging.getLogger(__name__)

PUSH, DONE = 1, 2
HEADER_TAG, MODEL_TAG = 21, 22


class AsyncParameterServer(DistAlgo):
    name = "asgd"

    def __init__(self, cfg, info=None):
        super().__init__(cfg, info)
        self.group = gloo_group(list(range(self.world_size))) if self.world_size > 1 else None
        self.server_lock = threading.Lock()
        self.global_W: Optional[torch.Tensor] = None  # rank 0 only
        self.version = 0  # rank 0: updates applied so far
        self.staleness: collections.Counter = collections.Counter()
        self.pulled: Optional[torch.Tensor] = None  # the global model this worker last received
        self.pulled_version = 0
        self.thread: Optional[threading.Thread] = None
        self.error: Optional[BaseException] = None

    def init_state(self) -> None:
        cpu = torch.device("cpu")
        self.pulled = self.flat_params(cpu)
        if self.rank == 0:
            self.global_W = self.pulled.clone()

    def start(self) -> None:
        if self.rank == 0 and self.world_size > 1:
            self.thread = threading.Thread(target=self._guard, daemon=True, name="param-server")
            self.thread.start()

    # ---------------------------------------------------------------- server (rank 0)
    def _apply(self, delta: torch.Tensor, from_version: int) -> tuple:
        with self.server_lock:
            self.staleness[self.version - from_version] += 1
            self.global_W.add_(delta)
            self.version += 1
            return self.global_W.clone(), self.version

    def _guard(self) -> None:
        try:
            self._serve()
        except BaseException as e:
            self.error = e

    def _serve(self) -> None:
        remaining = set(range(1, self.world_size))
        header = torch.zeros(2, dtype=torch.int64)
        delta = torch.empty_like(self.global_W)
        st = self.bg_stats
        while remaining:
            src = dist.recv(header, src=None, group=self.group, tag=HEADER_TAG)
            st.recv(16)
            if int(header[0]) == DONE:
                remaining.discard(src)
                continue
            t0 = time.perf_counter()
            dist.recv(delta, src, group=self.group, tag=MODEL_TAG)
            W, v = self._apply(delta, int(header[1]))
            dist.send(torch.tensor([v, 0], dtype=torch.int64), src, group=self.group, tag=HEADER_TAG)
            dist.send(W, src, group=self.group, tag=MODEL_TAG)
            st.background_comm_s += time.perf_counter() - t0
            st.recv(delta.numel() * delta.element_size())
            st.send(16)
            st.send(W.numel() * W.element_size())

    # ---------------------------------------------------------------- worker
    def after_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
        super().after_step(model, optimizer, step)
        if self.error is not None:
            raise RuntimeError(f"parameter server failed: {self.error!r}") from self.error
        local = self.flat_params(torch.device("cpu"))
        delta = local - self.pulled
        if self.rank == 0:
            W, v = self._apply(delta, self.pulled_version)
        else:
            header = torch.tensor([PUSH, self.pulled_version], dtype=torch.int64)
            W = torch.empty_like(local)
            with self.stats.timed():
                dist.send(header, 0, group=self.group, tag=HEADER_TAG)
                dist.send(delta, 0, group=self.group, tag=MODEL_TAG)
                dist.recv(header, 0, group=self.group, tag=HEADER_TAG)
                dist.recv(W, 0, group=self.group, tag=MODEL_TAG)
            self.stats.send(16)
            self.stats.send(delta.numel() * delta.element_size())
            self.stats.recv(16)
            self.stats.recv(W.numel() * W.element_size())
            v = int(header[0])
        self.pulled, self.pulled_version = W, v
        self.set_flat_params(W.to(self.device))

    def stop(self) -> None:
        if self.world_size > 1:
            if self.rank == 0:
                if self.thread is not None:
                    self.thread.join()
                    self.thread = None
                if self.error is not None:
                    raise RuntimeError(f"parameter server failed: {self.error!r}") from self.error
                self.set_flat_params(self.global_W.to(self.device))
            else:
                dist.send(torch.tensor([DONE, 0], dtype=torch.int64), 0, group=self.group, tag=HEADER_TAG)
                self.stats.send(16)
            self.broadcast_params(0)  # everyone ends with the server's global model
        elif self.global_W is not None:
            self.set_flat_params(self.global_W.to(self.device))
        if self.rank == 0 and self.staleness:
            log.info("asgd staleness (updates applied in between): %s", self.staleness_summary())

    def staleness_summary(self) -> Dict[str, Any]:
        n = sum(self.staleness.values())
        if not n:
            return {}
        return {
            "pushes": n,
            "max": max(self.staleness),
            "mean": sum(k * c for k, c in self.staleness.items()) / n,
            "histogram": {int(k): int(c) for k, c in sorted(self.staleness.items())},
        }

    # ---------------------------------------------------------------- state
    def shared_state(self) -> Dict[str, Any]:
        if self.rank != 0:
            return {}
        with self.server_lock:
            return {"global_W": self.global_W.clone(), "version": self.version, "staleness": dict(self.staleness)}

    def load_shared(self, st: Dict[str, Any]) -> None:
        if self.rank == 0:
            self.global_W, self.version = st["global_W"].clone(), st["version"]
            self.staleness = collections.Counter(st["staleness"])

    def local_state(self) -> Dict[str, Any]:
        return {"pulled": self.pulled, "pulled_version": self.pulled_version}

    def load_local(self, st: Dict[str, Any]) -> None:
        self.pulled, self.pulled_version = st["pulled"].clone(), st["pulled_version"]

    def extra_summary(self) -> Dict[str, Any]:
        return {"staleness": self.staleness_summary()} if self.rank == 0 else {}
