"""Distributed training on torch.distributed, one :class:`~asrlib.train.algo.TrainAlgo` per algorithm, chosen by
``train.dist.algo``: ``sync`` (gradient all-reduce), ``ma`` (K-step model averaging), ``bmuf`` (blockwise
model-update filtering), ``adpsgd`` / ``hadpsgd`` (asynchronous decentralized SGD, flat and hierarchical), ``asgd``
(asynchronous parameter server), ``ring`` (ring-structured parallel strategy), ``powersgd`` (DDP with torch's
PowerSGD gradient compression), ``diloco`` (H inner steps, outer Nesterov step on the pseudo-gradient) and
``topk`` (DDP on sparsified gradients with error feedback). Launch
several learners with ``python -m steps.train_dist --num-learners N -- <steps.train arguments>`` (torchrun underneath).
"""

from __future__ import annotations

from asrlib.config import DistConfig
from asrlib.errors import AsrError

ALGOS = ("sync", "ma", "bmuf", "adpsgd", "hadpsgd", "asgd", "ring", "powersgd", "diloco", "topk")


def make_algo(cfg: DistConfig, device=None):
    """The algorithm named by ``train.dist.algo`` (``local`` = one process, no communication: the trainer's
    :class:`asrlib.train.algo.LocalAlgo`) for learners training on ``device`` (a ``torch.device``; None: CUDA when
    there is one)."""
    if cfg.algo == "local":
        from asrlib.train.algo import LocalAlgo

        return LocalAlgo()
    return make_dist_algo(cfg, device)


def make_dist_algo(cfg: DistConfig, device=None):
    """The algorithm object for ``cfg.algo`` (initialises the process group from torchrun's environment: NCCL for
    learners on CUDA, Gloo on the CPU)."""
    from asrlib.parallel.env import init_process_group

    if cfg.algo not in ALGOS:
        raise AsrError(f"train.dist.algo must be local or one of {', '.join(ALGOS)}, not {cfg.algo!r}")
    if cfg.algo == "sync":
        from asrlib.parallel.sync import SyncSgd as cls
    elif cfg.algo == "ma":
        from asrlib.parallel.ma import ModelAveraging as cls
    elif cfg.algo == "bmuf":
        from asrlib.parallel.bmuf import Bmuf as cls
    elif cfg.algo == "adpsgd":
        from asrlib.parallel.adpsgd import Adpsgd as cls
    elif cfg.algo == "hadpsgd":
        from asrlib.parallel.adpsgd import HierarchicalAdpsgd as cls
    elif cfg.algo == "asgd":
        from asrlib.parallel.asgd import AsyncParameterServer as cls
    elif cfg.algo == "powersgd":
        from asrlib.parallel.powersgd import PowerSgd as cls
    elif cfg.algo == "diloco":
        from asrlib.parallel.diloco import Diloco as cls
    elif cfg.algo == "topk":
        from asrlib.parallel.topk import TopkSgd as cls
    else:
        from asrlib.parallel.ring import RingRsps as cls
    return cls(cfg, init_process_group(cfg, device))
