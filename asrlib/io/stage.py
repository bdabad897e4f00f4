"""A stage's bookkeeping: the exclusive lock on its output directory (a second run writing into the same directory
at the same time refuses to start) and its completion marker with the settings it was made with (a finished stage is
skipped; one made with other settings runs again)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import re
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List, Sequence

from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import _UMASK, write_json


LOCK_NAME = ".lock"

_PID_TEMP = re.compile(r"^\.tmp\d+\.")  # kaldi_io's archives, lhotse manifests: .tmp<pid>.<name>
_held: Dict[Path, int] = {}  # directories this process has locked → nesting depth
_fds: Dict[Path, int] = {}  # their lock files' descriptors


def close_inherited_locks() -> None:
    """In a forked helper process that must not keep its parent's directory locks (a DataLoader worker): close
    its copies of the lock files' descriptors, so that the locks go with the parent when it exits or is killed
    (an ``flock`` lasts while any process holds the open file)."""
    for fd in _fds.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _fds.clear()
    _held.clear()


def die_with_parent() -> bool:
    """Linux: ask the kernel to SIGKILL this (forked) process when its parent dies (prctl PR_SET_PDEATHSIG); exit at
    once if the parent is gone already. A DataLoader worker whose trainer was killed would otherwise live on as an
    orphan, blocked on the pipe to it (its siblings hold the pipe's other end). False where it cannot be done."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes
    import ctypes.util
    import signal

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) != 0:  # 1 = PR_SET_PDEATHSIG
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError):
        return False
    if os.getppid() == 1:  # the parent died before the prctl: nobody will stop this process
        os._exit(1)
    return True


def _lock_holder(lock: Path) -> str:
    try:
        h = json.loads(lock.read_text())
        return f"pid {h['pid']} on {h['host']}, started {h['started']}"
    except (OSError, ValueError, KeyError, TypeError):  # the holder is between locking and writing its details
        return "pid unknown"


@contextlib.contextmanager
def dir_lock(directory: PathLike) -> Iterator[Path]:
    """Hold an exclusive lock on ``directory/.lock`` while writing into ``directory`` (created if missing).

    Non-blocking: when another process holds it, raise an :class:`AsrError` naming the lock file and the holder's
    PID. The lock is an ``flock`` on the open file, so the kernel releases it when the holder exits or is killed
    (even by SIGKILL): a killed run never leaves a stale lock. The file stays (deleting it could let two processes
    lock different files); its content (holder's PID, host, start time, command), emptied on release, only names
    the holder. Nested calls for the same directory in one process are no-ops; forked children share the lock.

    Once the lock is held, temporary files of :func:`atomic_path` left in the directory by a killed run (nobody
    else can be writing there) are removed (:func:`remove_stale_temps`), so interrupted runs do not leak disk.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    key = d.resolve()
    if key in _held:
        _held[key] += 1
        try:
            yield key / LOCK_NAME
        finally:
            _held[key] -= 1
        return
    lock = key / LOCK_NAME
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666 & ~_UMASK)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise AsrError(
                f"another run ({_lock_holder(lock)}) is writing {d} (lock {lock}); wait for it to "
                f"finish, or stop it and rerun — a stopped or killed run releases the lock"
            ) from None
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(sys.argv),
        }
        with contextlib.suppress(OSError):  # details only; on a full disk the lock itself still holds
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        _held[key], _fds[key] = 1, fd
        try:
            remove_stale_temps(key)
            yield lock
        finally:
            del _held[key], _fds[key]
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # an empty lock file: nobody holds it (a killed holder's details stay)
    finally:
        os.close(fd)  # releases the flock


def remove_stale_temps(directory: PathLike) -> List[Path]:
    """Remove the temporary files (``.NAME.XXXX.tmp``, see :func:`atomic_path`; ``.tmp<pid>.NAME`` of the archive and
    manifest writers) under ``directory``.

    Call only while holding the directory's lock: any such file then belongs to a run that was killed before it
    could rename or remove it. Subdirectories with a lock file of their own are another step's and are left alone.
    Returns the removed paths (also logged with their count).
    """
    root = Path(directory)
    removed: List[Path] = []
    for d, subdirs, files in os.walk(root):
        subdirs[:] = [s for s in subdirs if not (Path(d) / s / LOCK_NAME).exists()]
        for f in files:
            if (f.startswith(".") and f.endswith(".tmp") and f != LOCK_NAME) or _PID_TEMP.match(f):
                p = Path(d) / f
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
                    removed.append(p)
    if removed:
        logging.getLogger(__name__).info(
            "removed %d temporary file(s) left in %s by an interrupted run: %s",
            len(removed),
            root,
            ", ".join(str(p.relative_to(root)) for p in removed[:5]) + (" ..." if len(removed) > 5 else ""),
        )
    return removed


def _with_defaults(old, defaults):
    """``old`` with every key it lacks (at any depth) taken from ``defaults``."""
    if not isinstance(old, dict) or not isinstance(defaults, dict):
        return old
    return {**defaults, **{k: _with_defaults(v, defaults.get(k)) for k, v in old.items()}}


def is_done(
    marker: PathLike,
    fingerprint: dict | None = None,
    defaults: dict | None = None,
    forget: Dict[str, Sequence[str]] | None = None,
) -> bool:
    """True when the stage's marker exists and (if given) was written with the same settings ``fingerprint``.

    A marker written with other settings (e.g. the grammar changed in the config) makes the stage run again.
    ``defaults``: the fingerprint of the default settings; a setting the marker or ``fingerprint`` lacks (added to
    the config since the marker was written, or left out at its default) counts as its default, so a new option left
    at its default does not redo finished work. ``forget``: section -> settings a marker may hold that no longer count
    (e.g. a thread count, once left out of the fingerprint): dropped from the marker's fingerprint before comparing.
    """
    marker = Path(marker)
    if not marker.is_file():
        return False
    if fingerprint is None:
        return True
    try:
        old = json.loads(marker.read_text()).get("_fingerprint")
    except (json.JSONDecodeError, AttributeError):
        old = None
    new = json.loads(json.dumps(fingerprint, sort_keys=True, default=str))
    if isinstance(old, dict):
        for section, keys in (forget or {}).items():
            if isinstance(old.get(section), dict):
                old[section] = {k: v for k, v in old[section].items() if k not in keys}
    if defaults is not None and old is not None:  # both sides: a setting either one leaves out is its default
        defaults = json.loads(json.dumps(defaults, sort_keys=True, default=str))
        old, new = _with_defaults(old, defaults), _with_defaults(new, defaults)
    if old != new:
        logging.getLogger(__name__).warning(
            "%s was made with other settings (%s, now %s): redoing the stage", marker, old, fingerprint
        )
        return False
    return True


def mark_done(marker: PathLike, info: dict | None = None, fingerprint: dict | None = None) -> None:
    """Write a stage's completion marker (atomically), with a JSON summary and the settings it was made with."""
    info = dict(info or {})
    if fingerprint is not None:
        info["_fingerprint"] = json.loads(json.dumps(fingerprint, sort_keys=True, default=str))
    write_json(marker, info)
