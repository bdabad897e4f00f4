"""``powersgd``: synchronous SGD through torch's DistributedDataParallel with torch's PowerSGD communication hook
(Vogels et al. 2019; ``torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook``).

Each DDP gradient bucket's matrices ``M`` (n x m) are replaced by a rank-r approximation ``P Q^T``: all-reduce
``P = M Q`` (n x r), orthogonalise, all-reduce ``Q = M^T P`` (m x r), so a learner sends ``r (n + m)`` numbers per
matrix instead of ``n m``; vectors (biases) and matrices that would not shrink by ``min_compression_rate`` (2) go
uncompressed in one all-reduce. Error feedback (what compression lost is added to the next step's gradient) and
warm start (Q reused across steps) are on. The first ``max(2, train.dist.warmup_steps)`` steps are plain
all-reduces (torch's ``start_powerSGD_iter``); ``train.dist.powersgd_rank`` is r.

DDP's set-up, the forward hooks that let the trainer call the bare model, and how a learner without data joins a
step are shared with ``sync`` (:mod:`asrlib.parallel.ddp`); the bucket layout is fixed at set-up, so the
error-feedback tensors (per bucket) fit a resumed run.

Checkpoints: the model is identical on every learner (rank 0's is everyone's); each learner's PowerSGD state (its
error feedback, the warm-start P and Q, the step counter and the hook's random generator) is saved per learner, so
resume is exact. Works with Gloo on CPU (tests/test_dist_comm.py) and NCCL.
"""

from __future__ import annotations

import logging
from typing import Any, Dict

import numpy as np
import torch
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

from asrlib.errors import AsrError
from asrlib.parallel.ddp import DdpAlgo

log = logging.getLogger(__name__)


def _rng_to_state(rng: np.random.RandomState) -> Dict[str, Any]:
    kind, keys, pos, has_gauss, cached = rng.get_state()
    return {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "gauss": [int(has_gauss), cached]}


def _rng_from_state(st: Dict[str, Any]) -> np.random.RandomState:
    rng = np.random.RandomState()
    rng.set_state(("MT19937", st["keys"].numpy().astype(np.uint32), st["pos"], st["gauss"][0], st["gauss"][1]))
    return rng


class PowerSgd(DdpAlgo):
    name = "powersgd"

    def __init__(self, cfg, info=None):
        super().__init__(cfg, info)
        if cfg.powersgd_rank < 1:
            raise AsrError(f"train.dist.powersgd_rank must be >= 1, not {cfg.powersgd_rank}")
        self.bucket_mb = cfg.powersgd_bucket_mb
        self.state = None

    def comm_hook(self) -> tuple:
        self.state = psgd.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=self.cfg.powersgd_rank,
            start_powerSGD_iter=max(2, self.cfg.warmup_steps),
            use_error_feedback=True,
            warm_start=True,
            random_seed=0,
        )
        return self.state, psgd.powerSGD_hook

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
            "buckets": self.buckets(),
        }
