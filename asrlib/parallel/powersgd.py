"""``powersgd``: synchronous SGD through torch's DistributedDataParallel with torch's PowerSGD communication hook
(Vogels et al. 2019; ``torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook``).

Each DDP gradient bucket's matrices ``M`` (n x m) are replaced by a rank-r approximation ``P Q^T``: all-reduce
``P = M Q`` (n x r), orthogonalise, all-reduce ``Q = M^T P`` (m x r), so a learner sends ``r (n + m)`` numbers per
matrix instead of ``n m``; vectors (biases) and matrices that would not shrink by ``min_compression_rate`` (2) go
uncompressed in one all-reduce. Error feedback (what compression lost is added to the next step's gradient) and
warm start (Q reused across steps) are on. The first ``max(2, train.dist.warmup_steps)`` steps are plain
all-reduces (torch's ``start_powerSGD_iter``); ``train.dist.powersgd_rank`` is r.

How it plugs into the trainer, which calls the bare model: DDP wraps the model, and forward hooks on the model run
DDP's own pre- and post-forward (what ``DistributedDataParallel.forward`` does around ``module.forward``), so
DDP's reducer sees the backward pass and calls the hook per bucket. The bucket layout is fixed at set-up (the
rebuild DDP would do after the first step is done at once, on every learner, from the parameter order), so it is
the same in a resumed run and the error-feedback tensors (per bucket) fit it.

Empty batches (uneven shard ends): the learner without data runs the same hook on zero buckets (DDP's join
mechanism, ``_get_zeros_like_grad_buckets`` / ``_run_comm_hook``) and applies the result, so every learner takes
the identical step; as in DDP the hook divides by the world size, so on such a step the update is the sum over the
learners with data divided by all learners (``sync`` divides by those with data).

Checkpoints: the model is identical on every learner (rank 0's is everyone's); each learner's PowerSGD state (its
error feedback, the warm-start P and Q, the step counter and the hook's random generator) is saved per learner, so
resume is exact. Works with Gloo on CPU (tests/test_dist_comm.py) and NCCL.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Dict, List

import numpy as np
import torch
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
from torch.nn.parallel import DistributedDataParallel

from asrlib.errors import AsrError
from asrlib.parallel.base import DistAlgo

log = logging.getLogger(__name__)


def _rng_to_state(rng: np.random.RandomState) -> Dict[str, Any]:
    kind, keys, pos, has_gauss, cached = rng.get_state()
    return {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "gauss": [int(has_gauss), cached]}


def _rng_from_state(st: Dict[str, Any]) -> np.random.RandomState:
    rng = np.random.RandomState()
    rng.set_state(("MT19937", st["keys"].numpy().astype(np.uint32), st["pos"], st["gauss"][0], st["gauss"][1]))
    return rng


class PowerSgd(DistAlgo):
    name = "powersgd"
    per_rank_model = False  # identical on every learner: rank 0's model in the checkpoint is everyone's

    def __init__(self, cfg, info=None):
        super().__init__(cfg, info)
        if cfg.powersgd_rank < 1:
            raise AsrError(f"train.dist.powersgd_rank must be >= 1, not {cfg.powersgd_rank}")
        self.ddp = None
        self.state = None
        self._hooks: List[Any] = []

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self._attach(model)
        super().setup(model, optimizer)  # restores this learner's PowerSGD state on resume (load_local)

    def _attach(self, model: torch.nn.Module) -> None:
        with warnings.catch_warnings():  # torch 2.13: broadcast_buffers is deprecated, its successor syncs at init
            warnings.simplefilter("ignore", FutureWarning)
            self.ddp = DistributedDataParallel(
                model, broadcast_buffers=False, bucket_cap_mb=self.cfg.powersgd_bucket_mb, init_sync=False
            )
        red = self.ddp.reducer  # the bucket rebuild of the first step, now, the same on every learner
        red._push_all_rebuilt_params()
        red._rebuild_buckets()
        self.ddp._has_rebuilt_buckets = True
        self.state = psgd.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=self.cfg.powersgd_rank,
            start_powerSGD_iter=max(2, self.cfg.warmup_steps),
            use_error_feedback=True,
            warm_start=True,
            random_seed=0,
        )
        self.ddp.register_comm_hook(self.state, psgd.powerSGD_hook)
        ddp = self.ddp

        def pre(module, args, kwargs):
            return ddp._pre_forward(*args, **kwargs)

        def post(module, args, output):
            return ddp._post_forward(output)

        self._hooks = [
            model.register_forward_pre_hook(pre, with_kwargs=True),
            model.register_forward_hook(post),
        ]

    def after_backward(self, model: torch.nn.Module, has_data: bool = True) -> bool:
        """DDP has averaged the gradients during backward; a learner without data joins with zero buckets."""
        self.begin_update()
        if not has_data:
            with self.stats.timed():
                buckets = self.ddp.reducer._get_zeros_like_grad_buckets()
                futs = [self.ddp.reducer._run_comm_hook(b) for b in buckets]
                for b, fut in zip(buckets, futs):
                    flat = fut.wait()
                    flat = flat[0] if isinstance(flat, list) else flat
                    offset = 0
                    for p in b.parameters():
                        p.grad = flat[offset : offset + p.numel()].view_as(p).clone()
                        offset += p.numel()
        return True

    def stop(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []

    # ------------------------------------------------------------------ state
    def local_state(self) -> Dict[str, Any]:
        s = self.state
        return {
            "iter": s.iter,
            "error": dict(s.error_dict),
            "p": dict(s.p_memory_dict),
            "q": dict(s.q_memory_dict),
            "hook_rng": _rng_to_state(s.rng),
            "numel_before": s.total_numel_before_compression,
            "numel_after": s.total_numel_after_compression,
        }

    def load_local(self, st: Dict[str, Any]) -> None:
        s = self.state
        s.iter = st["iter"]
        s.error_dict = {int(k): v.to(self.device) for k, v in st["error"].items()}
        s.p_memory_dict = {int(k): v.to(self.device) for k, v in st["p"].items()}
        s.q_memory_dict = {int(k): v.to(self.device) for k, v in st["q"].items()}
        s.rng = _rng_from_state(st["hook_rng"])
        s.total_numel_before_compression, s.total_numel_after_compression = st["numel_before"], st["numel_after"]

    def extra_summary(self) -> Dict[str, Any]:
        rate, before, after = self.state.compression_stats()
        return {
            "powersgd_rank": self.cfg.powersgd_rank,
            "start_powerSGD_iter": self.state.start_powerSGD_iter,
            "hook_compression_rate": rate,
            "buckets": len(self.ddp.reducer._get_zeros_like_grad_buckets()),
        }
