"""Torch files (models, checkpoints) that load without running anyone's code.

``torch.load`` unpickles: a ``.pt`` file from a stranger can run whatever its author wants. Every file asrlib writes
with :func:`save_torch` holds only tensors and plain containers (dicts, lists, tuples, strings, numbers, None; numpy
arrays are stored as tensors, see :func:`plain`), and :func:`load_torch` reads it with ``weights_only=True``, torch's
restricted unpickler that builds nothing else. A file that needs more (written by an older asrlib, whose model files
held numpy arrays, or crafted to run code) is refused with a message naming :func:`convert_trusted`'s command
``asr convert-model --trust FILE``, for files the user trusts: it rebuilds tensors, plain containers and numpy
arrays only (:mod:`asrlib.io.old_pickles`), so even a trusted file runs no code.
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


def _refusal(e: pickle.UnpicklingError) -> str:
    """What torch's ``weights_only`` unpickler refused, without its advice to unpickle anyway."""
    text = str(e).split("WeightsUnpickler error:")[-1].split("Check the documentation")[0]
    return " ".join(text.split())[:300]


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
        raise AsrError(
            f"{path}: this {what} holds Python objects beyond tensors and plain containers ({_refusal(e)}), so loading "
            f"it could run code; asrlib refuses it. A file written by an older asrlib is like that: if you trust "
            f"where it came from, convert it once with `{CONVERT_HINT} {path}`"
        ) from None
    except Exception as e:  # noqa: BLE001 - torch's errors for a damaged zip vary (RuntimeError, EOFError, ...)
        raise AsrError(
            f"{path} is not a readable {what} ({type(e).__name__}: {' '.join(str(e).split())[:200]})"
        ) from None


def convert_trusted(path: PathLike) -> bool:
    """Rewrite an older torch file (tensors, containers and numpy arrays) as :func:`save_torch` writes it, in place
    and atomically. Returns False when it already loads with ``weights_only=True`` (nothing written). Anything else
    in the file is an :class:`AsrError`: torch's restricted unpickler, with numpy's data constructors allowed, builds
    nothing that could run code."""
    import torch

    from asrlib.io.old_pickles import torch_numpy_globals

    path = Path(path)
    try:
        torch.load(path, map_location="cpu", weights_only=True)
        return False
    except pickle.UnpicklingError:
        pass
    try:
        with torch.serialization.safe_globals(torch_numpy_globals()):
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise AsrError(
            f"{path} holds Python objects beyond tensors, plain containers and numpy arrays ({_refusal(e)}), which no "
            f"asrlib file ever held; asrlib builds only data from an old file, so it does not convert this one"
        ) from None
    save_torch(path, obj)
    torch.load(path, map_location="cpu", weights_only=True)  # converted: loads safely now
    return True
