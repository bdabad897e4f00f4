"""Checkpoints that make resume exact: model, optimizer, scheduler, progress, RNG states and the algorithm's state."""

from __future__ import annotations

import copy
import logging
import os
import random
import shutil
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np
import torch

from asrlib.errors import AsrError
from asrlib.io.atomic import atomic_path
from asrlib.io.torchfile import load_torch, save_torch

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    """Seed torch, numpy and Python's global generators: a fresh run's every RNG (and so its checkpoints) is
    reproducible, not only the torch one the model uses."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def rng_state() -> Dict[str, Any]:
    """Every generator a training step draws from: torch's CPU one, NumPy's, Python's and, where CUDA is in use,
    each CUDA device's."""
    st = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        st["cuda"] = torch.cuda.get_rng_state_all()
    return st


def set_rng_state(state: Dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, *rest = state["numpy"]  # its key array comes back as a tensor (asrlib.io.torchfile.plain)
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), *rest))
    random.setstate(state["python"])
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available():
        n = min(len(cuda), torch.cuda.device_count())
        for i in range(n):  # a checkpoint of a machine with more GPUs: the devices this one has
            torch.cuda.set_rng_state(cuda[i], i)
    elif cuda:
        log.info("the checkpoint was written with CUDA; resuming without it, its CUDA generator states are unused")


def to_cpu(obj: Any) -> Any:
    """A copy of ``obj`` with every tensor on the CPU (through dicts, lists and tuples): a checkpoint written on
    any device loads on any other."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().clone()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return copy.deepcopy(obj)


def save_checkpoint(path: Path, state: Dict[str, Any]) -> None:
    """Write atomically: a checkpoint file either is complete or does not exist."""
    save_torch(path, state)


def link_checkpoint(src: Path, dst: Path) -> None:
    """Make ``dst`` the same checkpoint as ``src`` without writing it again: a hard link, put in place atomically
    (a copy where the file system has no hard links). A later :func:`save_checkpoint` to either path replaces that
    path's link only, never the other file."""
    with atomic_path(dst) as tmp:
        tmp.unlink()
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)


def load_checkpoint(path: Path) -> Dict[str, Any]:
    return load_torch(path, "checkpoint")


def latest_checkpoint(ckpt_dir: Path) -> Optional[Path]:
    p = Path(ckpt_dir) / "latest.pt"
    return p if p.is_file() else None


# ------------------------------------------------------------------------------------------------ learners' parts
RANK_DIR = "ranks"


def rank_file(ckpt_dir: Path, step: int, rank: int) -> Path:
    """Where learner ``rank`` writes its part of the checkpoint of ``step`` (a distributed run; the checkpoint
    itself, written by rank 0 after every learner has written its part, says it has such parts). Named by step, not
    by checkpoint name, so ``latest.pt`` and an ``epoch-N.pt`` of the same step share them and a learner's part of
    a newer checkpoint never replaces the one an older, still current checkpoint names."""
    return Path(ckpt_dir) / RANK_DIR / f"step{step}.rank{rank}.pt"


def remove_rank_files(ckpt_dir: Path, keep_steps) -> None:
    """Remove the learners' parts of checkpoints of steps not in ``keep_steps`` (rank 0, after a checkpoint)."""
    d = Path(ckpt_dir) / RANK_DIR
    keep = {int(s) for s in keep_steps}
    for p in d.glob("step*.rank*.pt") if d.is_dir() else ():
        step = p.name[len("step") :].split(".", 1)[0]
        if step.isdigit() and int(step) not in keep:
            p.unlink(missing_ok=True)


def load_rank_part(ckpt: Path, state: Dict[str, Any], rank: int, world_size: int) -> Optional[Dict[str, Any]]:
    """Learner ``rank``'s part of the checkpoint ``ckpt`` (already loaded as ``state``): None when the checkpoint
    has no parts or was written by another number of learners; an error naming the file when a part is missing."""
    algo = state.get("algo") or {}
    if not algo.get("rank_files") or algo.get("world_size") != world_size:
        return None
    p = rank_file(Path(ckpt).parent, state["step"], rank)
    if not p.is_file():
        raise AsrError(
            f"{ckpt} is a checkpoint of {world_size} learners whose part for learner {rank}, {p}, is missing: "
            f"restore it, or delete {Path(ckpt).parent} to start again"
        )
    return load_checkpoint(p)


def read_rank_parts(ckpt: Path) -> list:
    """Every learner's part of a distributed checkpoint (for tools and tests)."""
    state = load_checkpoint(ckpt)
    world = state["algo"]["world_size"]
    return [load_rank_part(ckpt, state, r, world) for r in range(world)]
