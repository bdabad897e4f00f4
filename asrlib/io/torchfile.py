"""Torch files (models, checkpoints) that load without running anyone's code.

``torch.load`` unpickles: a ``.pt`` file from a stranger can run whatever its author wants. Every file asrlib writes
with :func:`save_torch` holds only tensors and plain containers (dicts, lists, tuples, strings, numbers, None; numpy
arrays are stored as tensors, see :func:`plain`), and :func:`load_torch` reads it with ``weights_only=True``, torch's
restricted unpickler that builds nothing else. A file that needs more (written by an older asrlib, whose model files
held numpy arrays, or crafted to run code) is refused with a message naming :func:`convert_trusted`'s command
``asr convert-model --trust FILE``, for files the user trusts.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import atomic_path

CONVERT_HINT = "asr convert-model --trust"


def plain(obj: Any) -> Any:
    """``obj`` with numpy arrays as tensors (unsigned integers wider than 8 bits as int64, which torch stores
    everywhere) and numpy scalars as Python numbers, through dicts, lists and tuples."""
    import torch

    if isinstance(obj, np.ndarray):
        arr = obj.astype(np.int64) if obj.dtype.kind == "u" and obj.dtype.itemsize > 1 else obj
        return torch.from_numpy(np.ascontiguousarray(arr))
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        out = [plain(v) for v in obj]
        return out if isinstance(obj, list) else tuple(out)
    return obj


def save_torch(path: PathLike, obj: Any) -> None:
    """``torch.save`` of :func:`plain` ``(obj)``, atomically: the file either is complete or does not exist."""
    import torch

    with atomic_path(path) as tmp:
        torch.save(plain(obj), tmp)


def load_torch(path: PathLike, what: str = "model file") -> Any:
    """Read a file of :func:`save_torch` with ``weights_only=True``; anything else is an :class:`AsrError`."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise AsrError(f"{what} {path} does not exist")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        reason = " ".join(str(e).split("Check the documentation")[0].split())[:300]
        raise AsrError(
            f"{path}: this {what} holds Python objects beyond tensors and plain containers ({reason}), so loading "
            f"it could run code; asrlib refuses it. A file written by an older asrlib is like that: if you trust "
            f"where it came from, convert it once with `{CONVERT_HINT} {path}`"
        ) from None
    except Exception as e:  # noqa: BLE001 - torch's errors for a damaged zip vary (RuntimeError, EOFError, ...)
        raise AsrError(
            f"{path} is not a readable {what} ({type(e).__name__}: {' '.join(str(e).split())[:200]})"
        ) from None


def convert_trusted(path: PathLike) -> bool:
    """Rewrite a trusted older torch file (any pickled content) as :func:`save_torch` writes it, in place and
    atomically. Returns False when it already loads with ``weights_only=True`` (nothing written)."""
    import torch

    path = Path(path)
    try:
        torch.load(path, map_location="cpu", weights_only=True)
        return False
    except pickle.UnpicklingError:
        pass
    obj = torch.load(path, map_location="cpu", weights_only=False)  # the user vouched for this file
    save_torch(path, obj)
    torch.load(path, map_location="cpu", weights_only=True)  # converted: loads safely now
    return True
