"""Process-group set-up: from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_*)
or, without torchrun, a one-learner world so a distributed algorithm still runs as a single process.

Backend: NCCL for learners on CUDA (``train.device`` auto or cuda; communication buffers on the learner's
``cuda:LOCAL_RANK``), Gloo for learners on the CPU. Background point-to-point traffic (gossip, parameter server,
ring) always uses separate Gloo groups on CPU-staged copies of the model (docs/gpus.md says why), because NCCL
point-to-point from a second thread is not safe and Gloo's needs no stream management.

Under torchrun every learner asks the kernel to SIGKILL it when its torchrun agent (the launcher process) dies
(:func:`die_with_agent`): torchrun starts each learner in a session of its own, so killing the launcher's process
group, even with SIGKILL, would otherwise leave the learners training on, orphaned, holding the exp dir's lock.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import List, Optional, Tuple

import torch
import torch.distributed as dist

from asrlib.config import DistConfig
from asrlib.errors import AsrError
from asrlib.io.stage import die_with_parent
from asrlib.models.device import resolve_device

log = logging.getLogger(__name__)


@dataclass
class DistInfo:
    rank: int
    world_size: int
    local_world_size: int  # learners per (real or simulated) node
    node: int  # rank // local_world_size
    backend: str
    device: torch.device  # where collective buffers live (the learner's GPU with NCCL, the CPU with Gloo)


def choose_backend(name: str, device: Optional[torch.device] = None) -> str:
    """``train.dist.backend`` for learners training on ``device`` (default: CUDA when there is one): ``auto`` is
    NCCL for CUDA learners, Gloo for CPU ones."""
    cuda = (device if device is not None else resolve_device("auto")).type == "cuda"
    if name == "auto":
        return "nccl" if cuda else "gloo"
    if name not in ("gloo", "nccl"):
        raise AsrError(f"train.dist.backend must be auto, gloo or nccl, not {name!r}")
    if name == "nccl" and not cuda:
        raise AsrError(
            "train.dist.backend=nccl needs the learners on CUDA (train.device auto or cuda on a machine with GPUs); "
            "use gloo (or auto) for CPU learners"
        )
    return name


def die_with_agent() -> None:
    """Under torchrun (Linux): SIGKILL this learner when the torchrun agent that started it dies (prctl
    PR_SET_PDEATHSIG); exit at once if it has died already. A no-op elsewhere."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or not sys.platform.startswith("linux"):
        return
    if os.getppid() == 1:  # the agent died before this learner got here: nobody will restart or stop it
        log.error("the torchrun agent that started this learner is gone: exiting")
        os._exit(1)
    if not die_with_parent():
        log.warning(
            "cannot tie this learner's life to its torchrun agent: if the launcher is killed, kill the learners too"
        )


def init_process_group(cfg: DistConfig, device: Optional[torch.device] = None) -> DistInfo:
    """Initialise torch.distributed once (torchrun env vars, else a one-learner world) and describe this learner,
    whose model trains on ``device`` (asrlib.models.device.resolve_device of train.device; default: cuda:LOCAL_RANK
    when there is CUDA)."""
    if not dist.is_available():
        raise AsrError("this torch build has no torch.distributed; use train.dist.algo=local")
    if not dist.is_initialized():
        backend = choose_backend(cfg.backend, device)
        timeout = timedelta(seconds=cfg.timeout_s)
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            die_with_agent()
            if backend == "nccl":
                torch.cuda.set_device(device if device is not None else int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group(backend, timeout=timeout)
        else:
            log.warning(
                "train.dist.algo=%s without torchrun: running as a single learner "
                "(launch with python -m steps.train_dist --num-learners N for several)",
                cfg.algo,
            )
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    backend = dist.get_backend()
    local = cfg.local_world_size or int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if local < 1 or world % local != 0:
        raise AsrError(
            f"{world} learners cannot be split into nodes of {local} (train.dist.local_world_size or "
            f"torchrun's LOCAL_WORLD_SIZE must divide the number of learners)"
        )
    # collective buffers: on the learner's GPU for NCCL, on the CPU for Gloo (staged copies of a CUDA model)
    comm = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    return DistInfo(rank, world, local, rank // local, backend, comm)


def node_groups(world: int, local: int, rank: int) -> Tuple[Optional[dist.ProcessGroup], List[int]]:
    """Create one group per node (every learner must call this, in the same order); return this learner's."""
    mine, my_ranks = None, []
    for start in range(0, world, local):
        ranks = list(range(start, start + local))
        g = dist.new_group(ranks) if local < world else dist.group.WORLD
        if rank in ranks:
            mine, my_ranks = g, ranks
    return mine, my_ranks


def gloo_group(ranks: List[int]) -> Optional[dist.ProcessGroup]:
    """A Gloo group over ``ranks`` for background point-to-point traffic (call on every learner)."""
    return dist.new_group(ranks, backend="gloo")
