"""Bytes each learner hands to the communication library, measured at the calls themselves.

:func:`install` wraps the tensor collectives and point-to-point calls of ``torch.distributed`` (``all_reduce``,
``broadcast``, ``all_gather``, ``send``, ``isend``, ...) once per process. Everything that reaches the library
through the package namespace is counted, whoever calls it: our algorithms, torch's model averagers and torch's
DDP communication hooks (PowerSGD's P, Q and uncompressed all-reduces, its vanilla warm-up all-reduce), on any
thread (the gossip and parameter-server threads). What torch's C++ side sends on its own (DDP's initial broadcast
and bucket-order sync, its built-in all-reduce without a hook) does not pass through Python and is not counted;
every algorithm here that trains through DDP sends its gradients through a Python hook.

Per call, ``sent`` is the size of the tensor this learner hands over to be sent: the whole tensor for
``all_reduce``, ``reduce``, ``all_gather``/``all_gather_single`` (its input), ``gather``, ``all_to_all_single`` (its
input: with split sizes, only what it holds), ``reduce_scatter_tensor``,
``send``/``isend``; for ``broadcast``/``scatter`` the source's tensor (0 elsewhere). ``recv`` is what a learner
asks to receive (``recv``/``irecv``, a non-source ``broadcast``). How the library moves those bytes (a ring
all-reduce puts ``2 (n-1)/n`` times the tensor on each link) is not guessed here; :class:`~asrlib.parallel.stats.
CommStats` keeps that estimate.

Calls are booked under the calling thread's category (:meth:`CommMeter.category`): ``train`` by default;
checkpoint gathers and dev-loss reductions run under ``bookkeeping`` so that the figure compared between
algorithms is the training communication alone.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, Dict, Iterator

import torch
import torch.distributed as dist

_OUT_IN = (  # (output, input, ...): the input is sent
    "all_gather_into_tensor",
    "all_gather_single",  # torch 2.13's name for all_gather_into_tensor
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "all_to_all_single",  # the input as handed over (with split sizes: only what it holds)
)
_SENT_ALWAYS = ("all_reduce", "reduce", *_OUT_IN)
_SENT_P2P = ("send", "isend")
_RECV_P2P = ("recv", "irecv")
_ROOTED = {"broadcast": 1, "scatter": 2}  # root sends, the others receive; position of ``src``


def _nbytes(t: Any) -> int:
    if isinstance(t, torch.Tensor):
        return t.numel() * t.element_size()
    if isinstance(t, (list, tuple)):
        return sum(_nbytes(x) for x in t)
    return 0


class CommMeter:
    """Per-category totals of the bytes handed to ``torch.distributed`` (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self.totals: Dict[str, Dict[str, float]] = {}

    @contextlib.contextmanager
    def category(self, name: str) -> Iterator[None]:
        """Book this thread's calls under ``name`` while inside."""
        old = getattr(self._local, "cat", "train")
        self._local.cat = name
        try:
            yield
        finally:
            self._local.cat = old

    def add(self, sent: int, recv: int) -> None:
        cat = getattr(self._local, "cat", "train")
        with self._lock:
            t = self.totals.setdefault(cat, {"sent_bytes": 0.0, "recv_bytes": 0.0, "calls": 0})
            t["sent_bytes"] += sent
            t["recv_bytes"] += recv
            t["calls"] += 1

    def snapshot(self, cat: str = "train") -> Dict[str, float]:
        with self._lock:
            return dict(self.totals.get(cat, {"sent_bytes": 0.0, "recv_bytes": 0.0, "calls": 0}))


METER = CommMeter()  # the process's meter (one process group per process)
_ORIGINALS: Dict[str, Callable] = {}


def _count(name: str, args: tuple, kwargs: dict) -> None:
    tensor = args[0] if args else kwargs.get("tensor", kwargs.get("output_tensor"))
    if name in _SENT_ALWAYS:
        if name in _OUT_IN:
            tensor = args[1] if len(args) > 1 else kwargs.get("input_tensor", kwargs.get("input"))
        METER.add(_nbytes(tensor), 0)
    elif name in ("all_gather", "gather"):  # (tensor_list / tensor, tensor, ...) and (tensor, gather_list, ...)
        mine = args[1] if name == "all_gather" and len(args) > 1 else kwargs.get("tensor", args[0] if args else None)
        METER.add(_nbytes(mine), 0)
    elif name in _SENT_P2P:
        METER.add(_nbytes(tensor), 0)
    elif name in _RECV_P2P:
        METER.add(0, _nbytes(tensor))
    elif name in _ROOTED:
        i = _ROOTED[name]
        src = args[i] if len(args) > i else kwargs.get("src", kwargs.get("group_src", 0))
        group = kwargs.get("group")
        if "group_src" in kwargs and group is not None:
            src = dist.get_global_rank(group, kwargs["group_src"])
        nb = _nbytes(tensor if name == "broadcast" else kwargs.get("scatter_list", args[1:2]))
        if dist.get_rank() == src:
            METER.add(nb, 0)
        else:
            METER.add(0, _nbytes(tensor))


def _wrap(name: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def counted(*args, **kwargs):
        _count(name, args, kwargs)
        return fn(*args, **kwargs)

    counted.__asrlib_meter__ = True
    return counted


_NAMES = _SENT_ALWAYS + ("all_gather", "gather") + _SENT_P2P + _RECV_P2P + tuple(_ROOTED)


def install() -> CommMeter:
    """Wrap the ``torch.distributed`` calls (once per process) and return the process's meter."""
    for name in _NAMES:
        fn = getattr(dist, name, None)
        if fn is None or getattr(fn, "__asrlib_meter__", False):
            continue
        _ORIGINALS[name] = fn
        setattr(dist, name, _wrap(name, fn))
    return METER


def uninstall() -> None:
    """Put the original functions back (tests)."""
    for name, fn in _ORIGINALS.items():
        setattr(dist, name, fn)
    _ORIGINALS.clear()
