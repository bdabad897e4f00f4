"""A stand-in accelerator for the placement tests, so that code that would mix host and device tensors on a GPU
fails on a CPU-only machine too.

Inside :func:`stand_in_device`, ``DEVICE`` (``meta``) behaves like a GPU whose memory is the CPU's: tensors created
on it or moved to it (``.to(DEVICE)``, ``torch.zeros(..., device=DEVICE)``, ``torch.tensor(..., device=DEVICE)``)
are :class:`Placed` tensors that report ``device == DEVICE`` and compute on CPU data, so training runs and gives
real numbers (``.item()`` works). Every operation whose tensor arguments mix Placed tensors with host tensors (more
than a 0-dim scalar) raises :class:`MixedDevices` naming the operation, as CUDA would ("Expected all tensors to be on
the same device") — except the few where torch itself wants host arguments (packing lengths) and copies between
devices (``copy_``, ``to``). ``.cpu()`` gives a plain CPU tensor.

:func:`register_stand_in_nccl` adds a torch.distributed backend that plays NCCL for learners on ``DEVICE``: its
collectives accept device tensors only and run Gloo on their CPU data.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

DEVICE = torch.device("meta")
aten = torch.ops.aten
# torch's own host arguments (pack_padded_sequence wants its lengths on the CPU) and copies across devices
PACKING = {aten._pack_padded_sequence.default, aten._pad_packed_sequence.default}  # data on the device, sizes on host
HOST_ARGS_OK = PACKING | {aten.copy_.default, aten._to_copy.default}


class MixedDevices(RuntimeError):
    pass


class Placed(torch.Tensor):
    """A tensor that says it is on ``DEVICE`` and holds CPU data (``.elem``)."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor):
        r = torch.Tensor._make_wrapper_subclass(
            cls,
            elem.shape,
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            device=DEVICE,
            requires_grad=elem.requires_grad,
        )
        r.elem = elem
        return r

    def __repr__(self) -> str:
        return f"Placed({self.elem!r})"

    @property
    def data(self):
        return torch.Tensor.data.__get__(self)

    @data.setter
    def data(self, new: torch.Tensor) -> None:  # ``p.data = t`` (torch's model averager) must move the CPU data too
        if not isinstance(new, Placed):
            raise MixedDevices(f"the data of a device tensor set to a host tensor of shape {tuple(new.shape)}")
        torch.Tensor.data.__set__(self, new)
        self.elem = new.elem

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _run(func, args, kwargs or {})


def _is_stand_in(dev) -> bool:
    return dev is not None and torch.device(dev).type == DEVICE.type


def _run(func, args, kwargs):
    placed, host = [], []

    def scan(x):
        if isinstance(x, Placed):
            placed.append(x)
        elif isinstance(x, torch.Tensor) and x.device.type == DEVICE.type:
            raise MixedDevices(f"{func}: a {DEVICE.type} tensor made outside the stand-in device (no data)")
        elif isinstance(x, torch.Tensor) and x.dim() > 0:
            host.append(x)
        return x

    tree_map(scan, (args, kwargs))
    if placed and host and func not in HOST_ARGS_OK:
        raise MixedDevices(
            f"{func}: host tensors of shapes {[tuple(h.shape) for h in host]} mixed with tensors on the device"
        )
    dev = kwargs.get("device")
    to_device = _is_stand_in(dev)
    a, k = tree_map(lambda x: x.elem if isinstance(x, Placed) else x, (args, kwargs))
    if to_device:
        k = {**k, "device": torch.device("cpu")}
    out = func(*a, **k)
    to_host = dev is not None and not to_device  # .cpu(), .to("cpu")
    wrap = to_device or (bool(placed) and not to_host)
    if not wrap:
        return out
    if func in PACKING:
        return (Placed(out[0]), *out[1:])
    return tree_map(lambda x: Placed(x) if isinstance(x, torch.Tensor) and not isinstance(x, Placed) else x, out)


class _Factories(TorchDispatchMode):
    """Tensors created with ``device=DEVICE`` become Placed; everything else runs through :func:`_run`."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return _run(func, args, kwargs or {})


class _TensorCtor(TorchFunctionMode):
    """``torch.tensor(data, device=DEVICE)`` builds on the host below the dispatcher: build there, then move."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.tensor, torch.as_tensor) and _is_stand_in(kwargs.get("device")):
            return func(*args, **{**kwargs, "device": "cpu"}).to(DEVICE)
        return func(*args, **kwargs)


@contextlib.contextmanager
def stand_in_device() -> Iterator[torch.device]:
    """Within: ``DEVICE`` is a separate device whose tensors must not meet host tensors (see the module docstring)."""
    with _TensorCtor(), _Factories():
        yield DEVICE


# ------------------------------------------------------------------------------------------- a stand-in for NCCL
STAND_IN_NCCL = "standin_nccl"


def _device_only(op: str, tensors):
    """The CPU data of ``tensors``, which must all be on the stand-in device (NCCL takes GPU memory only)."""
    from torch.utils._pytree import tree_leaves

    for t in tree_leaves(tensors):
        if isinstance(t, torch.Tensor) and not isinstance(t, Placed):
            raise MixedDevices(f"NCCL {op} was handed a host tensor of shape {tuple(t.shape)}")
    return tree_map(lambda t: t.elem if isinstance(t, Placed) else t, tensors)


def _done(value):
    from torch._C._distributed_c10d import _create_work_from_future
    from torch.futures import Future

    fut = Future()
    fut.set_result(value)
    return _create_work_from_future(fut)


def register_stand_in_nccl() -> str:
    """Register (once) a torch.distributed backend that plays NCCL for learners on the stand-in device: every
    collective must get device tensors (a host tensor raises :class:`MixedDevices`, as NCCL would refuse it) and is
    carried out by Gloo on their CPU data. Returns the backend's name for ``init_process_group``/``new_group``."""
    import torch.distributed as dist
    from torch._C._distributed_c10d import AllgatherOptions, AllreduceOptions, AllToAllOptions
    from torch._C._distributed_c10d import BarrierOptions, BroadcastOptions

    if STAND_IN_NCCL.upper() in dist.Backend._plugins:
        return STAND_IN_NCCL

    class StandInNccl(dist.ProcessGroup):
        def __init__(self, store, rank, size, timeout):
            super().__init__(rank, size)
            self.gloo = dist.ProcessGroupGloo(store, rank, size, timeout)

        def getBackendName(self):
            return STAND_IN_NCCL

        def allreduce(self, tensors, opts=AllreduceOptions()):
            self.gloo.allreduce(_device_only("all_reduce", tensors), opts).wait()
            return _done(tensors)

        def broadcast(self, tensors, opts=BroadcastOptions()):
            self.gloo.broadcast(_device_only("broadcast", tensors), opts).wait()
            return _done(tensors)

        def allgather(self, outs, ins, opts=AllgatherOptions()):
            self.gloo.allgather(_device_only("all_gather", outs), _device_only("all_gather", ins), opts).wait()
            return _done(outs)

        def _allgather_base(self, out, inp, opts=AllgatherOptions()):  # all_gather_into_tensor
            self.gloo._allgather_base(_device_only("all_gather", out), _device_only("all_gather", inp), opts).wait()
            return _done([out])

        all_gather_single = _allgather_base

        def all_to_all_single(self, out, inp, out_splits, in_splits, opts=AllToAllOptions()):
            op = "all_to_all_single"
            self.gloo.alltoall_base(_device_only(op, out), _device_only(op, inp), out_splits, in_splits, opts).wait()
            return _done([out])

        alltoall_base = all_to_all_single

        def barrier(self, opts=BarrierOptions()):
            self.gloo.barrier(opts).wait()
            return _done([])

    dist.Backend.register_backend(STAND_IN_NCCL, StandInNccl, devices=[DEVICE.type, "cpu"])
    return STAND_IN_NCCL
