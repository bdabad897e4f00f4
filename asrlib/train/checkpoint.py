"""Checkpoints that make resume exact: model, optimizer, scheduler, progress, RNG states and the algorithm's state."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np
import torch

from asrlib.io.atomic import atomic_path
from asrlib.io.torchfile import load_torch, save_torch


def seed_everything(seed: int) -> None:
    """Seed torch, numpy and Python's global generators: a fresh run's every RNG (and so its checkpoints) is
    reproducible, not only the torch one the model uses."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def rng_state() -> Dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: Dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, *rest = state["numpy"]  # its key array comes back as a tensor (asrlib.io.torchfile.plain)
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), *rest))
    random.setstate(state["python"])


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
