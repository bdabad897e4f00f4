"""``bmuf``: blockwise model-update filtering (Chen & Huo, ICASSP 2016).

Parameterisation (the *mean* convention, so that eta = 0, zeta = 1 is exactly K-step model averaging):

- ``W``: the global model; ``W_g``: the model every learner starts a block from; ``Delta``: the block momentum.
- each block, every learner runs tau (= ``train.dist.period``) local steps from ``W_g``, then
  ``G = mean_i(W_i) - W_g``;  ``Delta = eta * Delta + zeta * G``;  ``W = W + Delta``;
  the next block starts from ``W_g = W + eta * Delta`` (Nesterov, ``nesterov: true``) or ``W_g = W``.
- defaults: eta = 1 - 1/N (``block_momentum < 0``), zeta = 1 (``block_lr``), Nesterov on. (Under the *sum*
  convention of some implementations, G is the sum of the learners' updates and zeta is 1/N of ours.)
- after each synchronisation the local optimizer's momentum is cleared (``reset_local_momentum``): SGD's momentum
  buffer. Adam's moments are left alone: clearing Adam's first moment every block hurt badly in our measurement
  (toy task, 2 learners, tau 2, 6 epochs: dev CTC loss 0.254 with the reset vs 0.149 without).
- optional ``warmup_steps`` of synchronous SGD (gradient all-reduce); BMUF starts from the model reached then.
- a block also ends at every epoch end (a possibly shorter block), so each epoch checkpoint holds one model.
  The dev loss at an epoch end is measured on the model the learners hold, ``W_g``; the final model is ``W``.

``overlap: true`` hides the block all-reduce (and the wait for the slower learner) behind one local step: at a
block end the learner starts an asynchronous all-reduce of its model ``W_i`` and goes on with the next local step,
reaching ``W_i'``; when that step is done, it waits for the mean, updates ``Delta``, ``W`` and ``W_g`` as above, and
continues from ``W_g + (W_i' - W_i)``: the step taken during the exchange is kept (computed at ``W_i`` rather than at
``W_g``: one step of staleness). The next block therefore has tau - 1 further local steps. An epoch end, the end
of training and every checkpoint first complete an exchange in flight (so resume stays exact).

``W``, ``W_g``, ``Delta`` and the position in the current block are checkpointed (fairseq loses the block
momentum on resume; this does not), and every learner's local model too, so resume is exact.
"""

from __future__ import annotations

import logging
from typing import Any, Dict

import torch
import torch.distributed as dist

from asrlib.parallel.base import DistAlgo
from asrlib.errors import AsrError

log = logging.getLogger(__name__)


class Bmuf(DistAlgo):
    name = "bmuf"

    def __init__(self, cfg, info=None):
        super().__init__(cfg, info)
        if cfg.period < 1:
            raise AsrError(f"train.dist.period (tau) must be >= 1, not {cfg.period}")
        self.eta = cfg.block_momentum if cfg.block_momentum >= 0 else 1.0 - 1.0 / self.world_size
        self.zeta = cfg.block_lr
        self.since_sync = 0
        self.blocks = 0
        self.W = self.Wg = self.delta = None
        self.pending = None  # overlap: (all-reduce work, its buffer, W_i at the block end)

    def init_state(self) -> None:
        self._start_filter()

    def _start_filter(self) -> None:
        self.W = self.flat_params()
        self.Wg = self.W.clone()
        self.delta = torch.zeros_like(self.W)

    def after_backward(self, model: torch.nn.Module, has_data: bool = True) -> bool:
        return self.sync_during_warmup(has_data)

    def after_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
        super().after_step(model, optimizer, step)
        if step <= self.cfg.warmup_steps:
            if step == self.cfg.warmup_steps:  # learners are identical here: the filter starts from this model
                self._start_filter()
            return
        self.since_sync += 1
        if self.pending is not None:  # overlap: this step ran during the exchange; apply the block update now
            self.finish_sync()
        if self.since_sync >= self.cfg.period:
            self.start_sync() if self.cfg.overlap else self.block_sync()

    def start_sync(self) -> None:
        """Begin the block all-reduce of this learner's model; :meth:`finish_sync` applies it."""
        local = self.flat_params()
        buf = local.clone()
        with self.stats.timed():
            work = dist.all_reduce(buf, async_op=True)
        self.stats.all_reduce(buf.numel() * buf.element_size(), self.world_size)
        self.pending = (work, buf, local)

    def finish_sync(self) -> None:
        """Wait for the all-reduce in flight and apply the block update, keeping the local progress made since."""
        work, mean, at_start = self.pending
        self.pending = None
        with self.stats.timed():
            work.wait()
        moved = self.flat_params().sub_(at_start)
        self._apply_block(mean)
        self.set_flat_params(self.Wg + moved)
        self.since_sync = int(bool(moved.any()))  # the kept step counts towards the next block

    def block_sync(self) -> None:
        if self.pending is not None:
            self.finish_sync()
            if self.since_sync == 0:
                return
        mean = self.flat_params()
        with self.stats.timed():
            dist.all_reduce(mean)
        self.stats.all_reduce(mean.numel() * mean.element_size(), self.world_size)
        self._apply_block(mean)
        self.set_flat_params(self.Wg)

    def _apply_block(self, mean: torch.Tensor) -> None:
        """Delta, W and W_g from the sum of the learners' models (``mean`` is divided in place)."""
        mean.div_(self.world_size)
        g = mean.sub_(self.Wg)
        self.delta.mul_(self.eta).add_(g, alpha=self.zeta)
        self.W.add_(self.delta)
        self.Wg = self.W + self.eta * self.delta if self.cfg.nesterov else self.W.clone()
        if self.cfg.reset_local_momentum:
            for state in self.optimizer.state.values():
                if isinstance(state.get("momentum_buffer"), torch.Tensor):
                    state["momentum_buffer"].zero_()
        self.since_sync = 0
        self.blocks += 1

    def sync_epoch(self) -> None:
        if self.steps_done > self.cfg.warmup_steps and self.since_sync > 0:
            self.block_sync()

    def quiesce(self) -> None:  # before a checkpoint: no exchange in flight
        if self.pending is not None:
            self.finish_sync()

    def stop(self) -> None:
        self.sync_epoch()
        if self.W is not None:
            self.set_flat_params(self.W)  # the final model is the filtered global model W

    def shared_state(self) -> Dict[str, Any]:
        return {
            "W": self.W,
            "Wg": self.Wg,
            "delta": self.delta,
            "since_sync": self.since_sync,
            "blocks": self.blocks,
            "eta": self.eta,
            "zeta": self.zeta,
        }

    def load_shared(self, st: Dict[str, Any]) -> None:
        self.W, self.Wg, self.delta = (st[k].to(self.device) for k in ("W", "Wg", "delta"))
        self.since_sync, self.blocks = st["since_sync"], st["blocks"]

    def extra_summary(self) -> Dict[str, Any]:
        return {
            "blocks": self.blocks,
            "block_momentum": self.eta,
            "block_lr": self.zeta,
            "tau": self.cfg.period,
            "overlap": self.cfg.overlap,
        }
