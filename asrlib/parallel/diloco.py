"""``diloco``: DiLoCo (Douillard et al. 2023): H inner steps, then one outer Nesterov step.

- every learner runs ``H`` (= ``train.dist.period``) steps of the recipe's optimizer (the inner optimizer, e.g.
  Adam; its state is never reset) on its own shard, starting from the global model ``theta``;
- then the pseudo-gradient ``Delta = theta - mean_i(theta_i)`` is averaged with one all-reduce of the model's
  size, and the outer optimizer — torch's SGD with Nesterov momentum (``outer_lr``, ``outer_momentum``; the
  paper's 0.7 / 0.9) — steps ``theta`` with ``Delta`` as its gradient; every learner continues from the new
  ``theta``. With ``outer_lr`` 1 and momentum 0 this is K-step model averaging.
- optional ``warmup_steps`` of synchronous SGD (gradient all-reduce) first; ``theta`` starts from the model
  reached then.
- optional ``early_period`` (H') for the first ``early_steps`` steps after that: blocks of H' steps, then of H
  (frequent, cheap averaging while CTC training leaves its blank plateau, where local updating costs most; the
  "post-local SGD" of Lin et al. 2020 with averaging instead of synchronous SGD in its first phase).

A learner sends one model-sized all-reduce per H steps: ``H`` times fewer bytes than ``sync``. With
``outer_bits`` 8 or 4 (Streaming DiLoCo, Douillard et al. 2025, sends 4-bit pseudo-gradients) the pseudo-gradient
is averaged quantised instead (:mod:`asrlib.parallel.quant`: ``outer_block`` values per float32 scale, a
reduce-scatter then an all-gather of the codes, ``outer_error_feedback`` carrying what rounding dropped into the
next outer step): about ``32 / (bits + 32 / outer_block)`` times fewer bytes per outer step again. With
``outer_topk`` (a density) only that share of each parameter's pseudo-gradient, its largest values, is sent
(:mod:`asrlib.parallel.sparse`: positions and bfloat16 values all-gathered): about ``1 / (1.5 outer_topk)`` times
fewer bytes per outer step. The learner keeps what it did not send in its model (it continues from ``theta`` minus
its unsent rest, so the rest is in its next pseudo-gradient again); the learners' models then differ by their rests,
which one all-reduce averages at the end of training (and, with ``outer_topk_dense_every`` k, after every k-th
outer step: in bfloat16 at ``topk_value_bits`` 16, paid for from the same byte budget; up to trainer step
``outer_topk_dense_steps`` when set). With ``period`` 1, ``outer_lr`` 1 and no outer momentum this is
error-feedback sparsification of each learner's Adam update (sparse local SGD; for an adaptive optimizer what Deep
Gradient Compression's momentum correction is for SGD). Resetting the learners to ``theta`` instead, the rest waiting
in a residual only, diverged on digits (docs/distributed.md). The block counter
runs across epoch ends (no synchronisation there: every learner's own model is in the checkpoint), so H may exceed
an epoch; the dev loss at an epoch end is therefore the mean of the learners' losses on their own models. At the end
of training the last (possibly shorter) block gets its outer step, and every learner holds ``theta``. A learner
without data at a step (uneven shard end) takes no inner step; its smaller pseudo-gradient still counts 1/N in the
mean, as a model does in ``ma`` and ``bmuf``.

``theta``, the outer optimizer's momentum and the position in the block are checkpointed (identical on every
learner), with every learner's model, inner optimizer state and quantisation or sparsification error feedback, so
resume is exact.
"""

from __future__ import annotations

import logging
from typing import Any, Dict

import torch
import torch.distributed as dist

from asrlib.errors import AsrError
from asrlib.parallel import quant, sparse
from asrlib.parallel.base import DistAlgo

log = logging.getLogger(__name__)


class Diloco(DistAlgo):
    name = "diloco"

    def __init__(self, cfg, info=None):
        super().__init__(cfg, info)
        if cfg.period < 1:
            raise AsrError(f"train.dist.period (H) must be >= 1, not {cfg.period}")
        if cfg.outer_lr <= 0 or not 0 <= cfg.outer_momentum < 1:
            raise AsrError(
                f"train.dist.outer_lr must be > 0 and outer_momentum in [0, 1), not {cfg.outer_lr}, "
                f"{cfg.outer_momentum}"
            )
        if cfg.early_period < 0 or cfg.early_steps < 0:
            raise AsrError(
                f"train.dist.early_period and early_steps must be >= 0, not {cfg.early_period}, {cfg.early_steps}"
            )
        if cfg.outer_bits != 32:
            quant.check(cfg.outer_bits, cfg.outer_block)
        if cfg.outer_topk:
            sparse.check_config(cfg, cfg.outer_topk, "train.dist.outer_topk")
            if cfg.outer_bits != 32:
                raise AsrError("train.dist.outer_topk and outer_bits 8 / 4 are two ways to compress: choose one")
        if cfg.outer_topk_dense_every < 0 or cfg.outer_topk_dense_steps < 0:
            raise AsrError(
                "train.dist.outer_topk_dense_every and outer_topk_dense_steps must be >= 0, not "
                f"{cfg.outer_topk_dense_every}, {cfg.outer_topk_dense_steps}"
            )
        if cfg.outer_topk_dense_every and not cfg.outer_topk:
            raise AsrError("train.dist.outer_topk_dense_every averages the rests of outer_topk: set outer_topk too")
        self.since_sync = 0
        self.syncs = 0
        self.theta = None  # the global model, a flat parameter of the outer optimizer
        self.outer = None
        self.quant = None  # quant.QuantisedMean (outer_bits 8 / 4), made on first use
        self.sparse = None  # sparse.SparseMean (outer_topk), made on first use
        self.dense_averages = 0  # outer_topk: the learners' rests averaged whole (outer_topk_dense_every, the end)

    def init_state(self) -> None:
        self._start_outer()

    def _start_outer(self) -> None:
        self.theta = torch.nn.Parameter(self.flat_params())
        self._make_outer_optimizer()
        self.since_sync = 0
        self.quant = self.sparse = None  # fresh error feedback

    def _quantiser(self) -> quant.QuantisedMean:
        if self.quant is None:
            n = sum(p.numel() for p in self.params())
            c = self.cfg
            self.quant = quant.QuantisedMean(
                n, c.outer_bits, c.outer_block, self.rank, self.world_size, c.outer_error_feedback
            )
        return self.quant

    def _sparsifier(self) -> sparse.SparseMean:
        if self.sparse is None:
            sizes = [p.numel() for p in self.params()]
            self.sparse = sparse.SparseMean.from_config(sizes, self.cfg, self.world_size)
        return self.sparse

    def after_backward(self, model: torch.nn.Module, has_data: bool = True) -> bool:
        return self.sync_during_warmup(has_data)

    def after_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
        super().after_step(model, optimizer, step)
        if step <= self.cfg.warmup_steps:
            if step == self.cfg.warmup_steps:  # learners are identical here: theta starts from this model
                self._start_outer()
            return
        self.since_sync += 1
        if self.since_sync >= self.period_at(step):
            self.outer_step()
            c = self.cfg
            every, until = c.outer_topk_dense_every, c.outer_topk_dense_steps
            if c.outer_topk and every > 0 and self.syncs % every == 0 and (until <= 0 or step <= until):
                self.average_rests(c.topk_value_bits)

    def period_at(self, step: int) -> int:
        """H for the block that trainer step ``step`` (1-based, the warm-up's steps included) may end:
        ``early_period`` up to step ``warmup_steps + early_steps``, else ``period`` (a block open at the switch
        goes on to H steps)."""
        c = self.cfg
        return c.early_period if c.early_period > 0 and step <= c.warmup_steps + c.early_steps else c.period

    def outer_step(self) -> None:
        """Average the pseudo-gradient theta - theta_i over the learners; one Nesterov step of theta."""
        delta = self.theta.detach() - self.flat_params()
        if self.cfg.outer_topk:
            sp = self._sparsifier()
            with self.stats.timed():
                delta = sp.mean(delta, self.cfg.outer_topk, carry=False)  # the learner's model holds the rest
            self.stats.all_gather(sp.last_bytes, self.world_size)
        elif self.cfg.outer_bits == 32:
            with self.stats.timed():
                dist.all_reduce(delta)
            self.stats.all_reduce(delta.numel() * delta.element_size(), self.world_size)
            delta.div_(self.world_size)
        else:
            q = self._quantiser()
            with self.stats.timed():
                delta = q.mean(delta)
            self.stats.all_reduce(q.payload_bytes(), self.world_size)  # a reduce-scatter + all-gather of it
        self.theta.grad = delta
        self.outer.step()
        self.theta.grad = None
        if self.cfg.outer_topk:  # what this learner did not send stays in its model (as its delta from theta)
            self.set_flat_params(self.theta.detach() - self.sparse.residual)
        else:
            self.set_flat_params(self.theta.detach())
        self.since_sync = 0
        self.syncs += 1

    def stop(self) -> None:
        if self.steps_done > self.cfg.warmup_steps and self.since_sync > 0:
            self.outer_step()
        if self.sparse is not None and self.sparse.residual is not None:  # the learners' unsent parts, whole
            self.average_rests(32)

    def average_rests(self, bits: int) -> None:
        """Average the learners' unsent rests (one all-reduce of the model's size, ``bits`` 32 or 16 per value) and
        take the mean off ``theta``: every learner's model becomes ``theta`` less what bfloat16 rounded off its own
        rest, which it keeps (at 32 bits: ``theta`` exactly). The sum of the learners' bfloat16 rests is rounded once
        more, the same on every learner (a relative 2^-9 of it, not kept)."""
        rest = self.sparse.residual
        sent = rest.to(torch.bfloat16) if bits == 16 else rest.clone()
        rest -= sent.float()  # 0 at 32 bits; else what this learner keeps
        with self.stats.timed():
            dist.all_reduce(sent)
        self.stats.all_reduce(sent.numel() * sent.element_size(), self.world_size)
        self.theta.data -= sent.float().div_(self.world_size)
        self.set_flat_params(self.theta.detach() - rest)
        self.dense_averages += 1

    def shared_state(self) -> Dict[str, Any]:
        return {
            "theta": self.theta.detach(),
            "outer": self.outer.state_dict(),
            "since_sync": self.since_sync,
            "syncs": self.syncs,
            "dense_averages": self.dense_averages,
        }

    def load_shared(self, st: Dict[str, Any]) -> None:
        self.theta = torch.nn.Parameter(st["theta"].to(self.device))
        self._make_outer_optimizer()
        self.outer.load_state_dict(st["outer"])
        self.since_sync, self.syncs = st["since_sync"], st["syncs"]
        self.dense_averages = st.get("dense_averages", 0)  # checkpoints before outer_topk_dense_every lack it

    def local_state(self) -> Dict[str, Any]:
        st = {"quant": self.quant.state_dict()} if self.quant is not None else {}
        return {**st, "sparse": self.sparse.state_dict()} if self.sparse is not None else st

    def load_local(self, st: Dict[str, Any]) -> None:
        if "quant" in st:
            self._quantiser().load_state_dict(st["quant"], self.device)
        if "sparse" in st:
            self._sparsifier().load_state_dict(st["sparse"], self.device)

    def _make_outer_optimizer(self) -> None:
        self.outer = torch.optim.SGD(
            [self.theta],
            lr=self.cfg.outer_lr,
            momentum=self.cfg.outer_momentum,
            nesterov=self.cfg.outer_momentum > 0,
        )

    def extra_summary(self) -> Dict[str, Any]:
        return {
            "H": self.cfg.period,
            "early_H": self.cfg.early_period,
            "early_steps": self.cfg.early_steps,
            "outer_steps": self.syncs,
            "outer_lr": self.cfg.outer_lr,
            "outer_momentum": self.cfg.outer_momentum,
            "outer_bits": self.cfg.outer_bits,
            "outer_block": self.cfg.outer_block,
            "outer_error_feedback": self.cfg.outer_error_feedback,
            "outer_topk": self.cfg.outer_topk,
            **(
                {
                    "outer_topk_sent_values": self.sparse.sent_values,
                    "topk_index_bits": self.cfg.topk_index_bits,
                    "outer_topk_dense_every": self.cfg.outer_topk_dense_every,
                    "outer_topk_dense_steps": self.cfg.outer_topk_dense_steps,
                    "outer_topk_dense_averages": self.dense_averages,
                }
                if self.sparse is not None
                else {}
            ),
        }
