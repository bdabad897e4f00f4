"""``ma``: K-step model averaging (local SGD): each learner runs K local steps, then parameters are averaged.

Averaging uses torch's ``torch.distributed.algorithms.model_averaging``: :class:`PeriodicModelAverager`, or with
``train.dist.node_period > 0`` the :class:`HierarchicalModelAverager` (average within each node every
``node_period`` steps, over all learners every K steps). The averager's step counter is driven from here (steps
since the last global average), so it is part of the checkpoint and resume is exact.

Optional warm-up: ``warmup_steps`` of synchronous SGD (gradient all-reduce) before local steps begin (post-local SGD).
At every epoch end the learners are averaged once more, so the dev loss and the epoch checkpoint see one model.

Adaptive measures, in the spirit of Cong et al. (2017) — both off by default, both identical on every learner:

- ``adaptive: true`` adapts K to the measured spread of the learners. At each global average the relative
  divergence ``D = mean_i ||W_i - W||^2 / ||W||^2`` (W = the average) is computed with one extra scalar all-reduce.
  ``D < div_low``: the learners barely drifted apart, communication was wasted, so K doubles (up to
  ``max_period``); ``D > div_high``: they drifted far (early training, large learning rate), so K halves (down to
  1). Early in training K therefore stays small and grows as the model settles — progress-driven communication.
- ``lr_scale: sqrt|linear`` multiplies each learner's learning rate by sqrt(N) or N (ramped in linearly over
  ``lr_ramp_steps``). Averaging N models that each took a step of size lr moves the average by about lr — like
  one learner with an N times larger batch — so without scaling, more learners means less progress per sample.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections import OrderedDict
from typing import Any, Dict, List

import torch
import torch.distributed as dist
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
from torch.distributed.algorithms.model_averaging.hierarchical_model_averager import HierarchicalModelAverager

from asrlib.parallel.base import DistAlgo
from asrlib.errors import AsrError

log = logging.getLogger(__name__)


class ModelAveraging(DistAlgo):
    name = "ma"

    def __init__(self, cfg, info=None):
        super().__init__(cfg, info)
        if cfg.period < 1:
            raise AsrError(f"train.dist.period must be >= 1, not {cfg.period}")
        if cfg.lr_scale not in ("none", "sqrt", "linear"):
            raise AsrError(f"train.dist.lr_scale must be none, sqrt or linear, not {cfg.lr_scale!r}")
        self.period = cfg.period
        self.since_sync = 0  # local steps since the last global average
        self.syncs = 0
        self.divergence: List[float] = []
        self.hierarchical = cfg.node_period > 0
        if self.hierarchical and cfg.adaptive:
            raise AsrError("train.dist.adaptive and node_period (hierarchical averaging) cannot be combined")
        with warnings.catch_warnings():  # torch warns that K=1 is better served by DDP: K=1 is our test case
            warnings.simplefilter("ignore", UserWarning)
            if self.hierarchical:
                local = self.info.local_world_size
                levels = OrderedDict()
                if local < self.world_size:
                    if not 0 < cfg.node_period < self.period:
                        raise AsrError("train.dist.node_period must be smaller than train.dist.period")
                    levels[cfg.node_period] = local
                levels[self.period] = self.world_size
                self.averager = HierarchicalModelAverager(levels)
            else:
                self.averager = PeriodicModelAverager(period=self.period)

    # lr scaling ------------------------------------------------------------------------------------------
    def lr_factor(self, step: int) -> float:
        n = self.world_size
        full = {"none": 1.0, "sqrt": math.sqrt(n), "linear": float(n)}[self.cfg.lr_scale]
        ramp = self.cfg.lr_ramp_steps
        return full if ramp <= 0 else 1.0 + (full - 1.0) * min(1.0, step / ramp)

    def after_backward(self, model: torch.nn.Module, has_data: bool = True) -> bool:
        self.begin_update()
        step = self.steps_done
        if step < self.cfg.warmup_steps:
            return self.allreduce_grads(has_data)
        f = self.lr_factor(step)
        if f != 1.0:  # this step only: the trainer's LambdaLR scheduler sets lr from base_lr after every step
            for g in self.optimizer.param_groups:
                g["lr"] *= f
        return has_data

    def after_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
        super().after_step(model, optimizer, step)
        if step <= self.cfg.warmup_steps:
            return
        self.since_sync += 1
        global_now = self.since_sync % self.period == 0
        before = self._sq_norm_sum() if (global_now and self.cfg.adaptive) else None
        self.averager.step = self.since_sync
        params = self.params()
        nbytes = sum(p.numel() * p.element_size() for p in params)
        with self.stats.timed():
            if params[0].device != self.device:  # Gloo for learners on GPUs: torch's averager on host copies
                host = [torch.nn.Parameter(p.detach().to(self.device)) for p in params]
                for h in host:  # it averages the parameters that have a gradient
                    h.grad = torch.zeros_like(h)
                self.averager.average_parameters(host)
                with torch.no_grad():
                    for p, h in zip(params, host):
                        p.copy_(h)
            else:
                self.averager.average_parameters(params)
        if global_now:
            self.stats.all_reduce(nbytes, self.world_size)
            self.since_sync = 0
            self.syncs += 1
            if before is not None:
                self._adapt(before)
        elif self.hierarchical and self.since_sync % self.cfg.node_period == 0:
            self.stats.all_reduce(nbytes, self.info.local_world_size)

    def _sq_norm_sum(self) -> float:
        sq = torch.tensor(
            [sum(float(p.detach().double().pow(2).sum()) for p in self.params())],
            dtype=torch.float64,
            device=self.device,
        )
        dist.all_reduce(sq)
        self.stats.all_reduce(8, self.world_size)
        return float(sq) / self.world_size

    def _adapt(self, mean_sq: float) -> None:
        avg_sq = sum(float(p.detach().double().pow(2).sum()) for p in self.params())
        d = max(0.0, mean_sq - avg_sq) / max(avg_sq, 1e-30)
        self.divergence.append(d)
        old = self.period
        if d < self.cfg.div_low and self.period < self.cfg.max_period:
            self.period = min(self.cfg.max_period, self.period * 2)
        elif d > self.cfg.div_high and self.period > 1:
            self.period = max(1, self.period // 2)
        if self.period != old:
            self.averager.period = self.period
            if self.is_main:
                log.info("ma: divergence %.2e -> averaging period K %d -> %d", d, old, self.period)

    def sync_epoch(self) -> None:
        if self.since_sync > 0:
            self.average_params()
            self.since_sync = 0
            self.syncs += 1

    def stop(self) -> None:
        self.sync_epoch()

    # state -----------------------------------------------------------------------------------------------
    def shared_state(self) -> Dict[str, Any]:
        return {
            "period": self.period,
            "since_sync": self.since_sync,
            "syncs": self.syncs,
            "divergence": list(self.divergence),
        }

    def load_shared(self, st: Dict[str, Any]) -> None:
        self.period, self.since_sync, self.syncs = st["period"], st["since_sync"], st["syncs"]
        self.divergence = list(st["divergence"])
        if not self.hierarchical:
            self.averager.period = self.period

    def extra_summary(self) -> Dict[str, Any]:
        return {"period": self.period, "syncs": self.syncs, "divergence": self.divergence}
