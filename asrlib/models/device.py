"""Where the network runs and in which precision: ``train.device`` and ``train.precision``, for every stage that runs
the network (training, CE training, log-posteriors, decoding, export fine-tuning, speaker adaptation, ``asr
transcribe --device``).

* :func:`resolve_device`: ``auto`` is ``cuda:LOCAL_RANK`` when torch sees a CUDA device (torchrun sets LOCAL_RANK;
  0 without it), else the CPU; ``cuda`` is ``cuda:LOCAL_RANK`` too, and an error naming the setting where there is
  no CUDA, as is ``cuda:N`` (that very GPU for every learner).
* :func:`resolve_precision`: ``auto`` is bf16 on CUDA, fp32 elsewhere. bf16 and fp16 run the network under
  ``torch.autocast`` (:func:`autocast`); the CTC and CE losses are computed in fp32 (the criteria cast the
  network's output), and fp16 scales the loss with a ``GradScaler`` (:func:`grad_scaler`) whose state is in the
  checkpoint.
* :func:`to_device`: a batch's tensors moved with ``non_blocking=True`` to a CUDA device (the loader pins them),
  everything else left as it is.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, ContextManager, Dict, Optional, Union

import torch

from asrlib.config import PRECISIONS, check_device_name
from asrlib.errors import AsrError

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

DeviceLike = Union[str, torch.device]


def resolve_device(name: DeviceLike = "auto", where: str = "train.device") -> torch.device:
    """The ``torch.device`` a setting names (see the module docstring); a ``torch.device`` is returned as it is."""
    if isinstance(name, torch.device):
        return name
    check_device_name(name, where)
    if name == "cpu":
        return torch.device("cpu")
    if name == "auto" and not torch.cuda.is_available():
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise AsrError(
            f"{where}={name}, but torch sees no CUDA device (torch {torch.__version__}, "
            f"CUDA build: {torch.version.cuda or 'no'}); use cpu or auto"
        )
    if name in ("auto", "cuda"):  # learner k of a node (torchrun's LOCAL_RANK) on GPU k
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    dev = torch.device(name)
    if dev.index >= torch.cuda.device_count():
        raise AsrError(f"{where}={name}, but torch sees {torch.cuda.device_count()} CUDA device(s)")
    return dev


def resolve_precision(name: str, device: torch.device, where: str = "train.precision") -> Optional[torch.dtype]:
    """The autocast dtype of a precision setting on ``device`` (None: fp32, no autocast)."""
    if name not in PRECISIONS:
        raise AsrError(f"{where} must be one of {', '.join(PRECISIONS)}, not {name!r}")
    if name == "auto":
        name = "bf16" if device.type == "cuda" else "fp32"
    return _DTYPES.get(name)


def precision_name(dtype: Optional[torch.dtype]) -> str:
    return {v: k for k, v in _DTYPES.items()}.get(dtype, "fp32")


def autocast(device: torch.device, dtype: Optional[torch.dtype]) -> ContextManager:
    """``torch.autocast`` for the network's forward pass in ``dtype`` (a no-op context for fp32)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(device: torch.device, dtype: Optional[torch.dtype]) -> Optional[torch.amp.GradScaler]:
    """fp16's loss scaler (None for fp32 and bf16, whose range needs none)."""
    return torch.amp.GradScaler(device.type) if dtype == torch.float16 else None


def to_device(batch: Dict[str, Any], device: torch.device) -> Dict[str, Any]:
    """The batch with its tensors on ``device`` (copied asynchronously from pinned memory to CUDA); other entries
    (ids, the skipped list) as they are. On the CPU the batch is returned unchanged."""
    if device.type == "cpu":
        return batch
    nb = device.type == "cuda"
    return {k: v.to(device, non_blocking=nb) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def describe(device: torch.device, dtype: Optional[torch.dtype]) -> str:
    """E.g. ``cuda:0 (NVIDIA H100 80GB HBM3), bf16`` or ``cpu, fp32`` for the training log."""
    name = f"{device}"
    if device.type == "cuda":
        name += f" ({torch.cuda.get_device_name(device)})"
    return f"{name}, {precision_name(dtype)}"
