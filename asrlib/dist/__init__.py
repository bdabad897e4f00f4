"""Distributed training on torch.distributed, one :class:`~asrlib.train.algo.TrainAlgo` per algorithm, chosen by
``train.dist.algo``: ``sync`` (gradient all-reduce), ``ma`` (K-step model averaging), ``bmuf`` (blockwise
model-update filtering), ``adpsgd`` / ``hadpsgd`` (asynchronous decentralized SGD, flat and hierarchical), ``asgd``
(asynchronous parameter server) and ``ring`` (ring-structured parallel strategy). Launch several learners with
``python -m steps.train_dist --num-learners N -- <steps.train arguments>`` (torchrun underneath).
"""
from __future__ import annotations

from asrlib.config import DistConfig
from asrlib.io_utils import AsrError

ALGOS = ("sync", "ma", "bmuf", "adpsgd", "hadpsgd", "asgd", "ring")


def make_dist_algo(cfg: DistConfig):
    """The algorithm object for ``cfg.algo`` (initialises the process group from torchrun's environment)."""
    if cfg.algo not in ALGOS:
        raise AsrError(f"train.dist.algo must be local or one of {', '.join(ALGOS)}, not {cfg.algo!r}")
    if cfg.algo == "sync":
        from asrlib.dist.sync import SyncSgd as cls
    elif cfg.algo == "ma":
        from asrlib.dist.ma import ModelAveraging as cls
    elif cfg.algo == "bmuf":
        from asrlib.dist.bmuf import Bmuf as cls
    elif cfg.algo == "adpsgd":
        from asrlib.dist.adpsgd import Adpsgd as cls
    elif cfg.algo == "hadpsgd":
        from asrlib.dist.adpsgd import HierarchicalAdpsgd as cls
    elif cfg.algo == "asgd":
        from asrlib.dist.asgd import AsyncParameterServer as cls
    else:
        from asrlib.dist.ring import RingRsps as cls
    return cls(cfg)
