"""Atomic file writes, output-directory locks, stage-completion markers and Kaldi-style text tables.

Every output of a stage is written under a temporary name in the same directory and renamed into place, so a
killed process never leaves a file that a later stage (or a rerun) could mistake for complete. A write that fails
because the disk is full (or over quota, read-only, past the file size limit) removes its temporary file and
becomes one :class:`AsrError` naming the file. A stage holds an exclusive lock on its output directory
(:func:`dir_lock`) so that a second run writing into the same directory at the same time refuses to start.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Tuple, Union

PathLike = Union[str, os.PathLike]
_UMASK = os.umask(0)
os.umask(_UMASK)


class AsrError(Exception):
    """An error caused by the user's input or set-up; printed as one clear message, without a traceback."""


def sha256_file(path: PathLike) -> str:
    """Hex sha256 of a file's bytes (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# errno of a write the disk cannot take → (what happened, what to do)
_DISK_ERRORS = {
    errno.ENOSPC: ("no space left on device", "free some space (or move the data/exp dirs to a bigger disk)"),
    errno.EDQUOT: ("disk quota exceeded", "free some space or ask for a larger quota"),
    errno.EROFS: ("read-only file system", "write the outputs to a writable disk"),
    errno.EFBIG: ("file too large (over the file size limit, see ulimit -f)", "raise the limit"),
}


def disk_write_error(e: BaseException, path: Optional[PathLike] = None,
                     probe: Optional[PathLike] = None) -> Optional[AsrError]:
    """For an error meaning the disk cannot take the output (full, over quota, read-only, file size limit): an
    :class:`AsrError` naming the file (``path``, else the error's own file name); None for any other exception.

    Libraries that write in C++ (torch.save, kaldi_native_io) report a failed write as a RuntimeError without an
    errno: for such an error (and only then) ``probe``, the (temporary) file that was being written, gets 64 KiB appended from
    Python, and a full disk answers with its errno again.
    """
    if isinstance(e, RuntimeError) and probe is not None:   # the C++ writers' error type; others are not I/O
        try:
            with open(probe, "ab") as f:
                f.write(bytes(1 << 16))
                f.flush()
                os.fsync(f.fileno())
        except OSError as probed:
            e = probed
    if not isinstance(e, OSError) or e.errno not in _DISK_ERRORS:
        return None
    what, todo = _DISK_ERRORS[e.errno]
    where = path if path is not None else e.filename
    return AsrError(f"{what} while writing {where or 'an output file'}; {todo}, then rerun (finished steps are "
                    f"skipped)")


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it to ``path`` (atomic on POSIX).

    On an exception the temporary file is removed and ``path`` is left as it was; a full disk (or quota, read-only
    file system, file size limit) becomes an :class:`AsrError` naming ``path`` (:func:`disk_write_error`).
    """
    path = Path(path)
    tmp_path: Optional[Path] = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        tmp_path = Path(tmp)
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp creates 0600; outputs get the usual umask-based permissions
        os.close(fd)
        yield tmp_path
        with open(tmp_path, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
    except BaseException as e:
        err = disk_write_error(e, path, probe=tmp_path)
        if tmp_path is not None:
            with contextlib.suppress(FileNotFoundError):
                tmp_path.unlink()
        if err is not None:
            raise err from e
        raise


@contextlib.contextmanager
def atomic_open(path: PathLike, mode: str = "w", encoding: str = "utf-8"):
    """Open a temporary file for writing; it replaces ``path`` only when the ``with`` block succeeds."""
    with atomic_path(path) as tmp:
        if "b" in mode:
            with open(tmp, mode) as f:
                yield f
        else:
            with open(tmp, mode, encoding=encoding) as f:
                yield f


def write_text(path: PathLike, text: str) -> None:
    with atomic_open(path) as f:
        f.write(text)


def write_json(path: PathLike, obj) -> None:
    with atomic_open(path) as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def file_identity(path: PathLike) -> dict:
    """What a stage's fingerprint records of an input file: path, size and modification time (None when absent), so
    an input rewritten by an earlier stage (a new model's log-posteriors) makes the stage run again."""
    path = Path(path)
    st = path.stat() if path.is_file() else None
    return {"path": str(path), "bytes": st and st.st_size, "mtime_ns": st and st.st_mtime_ns}


def read_table(path: PathLike) -> List[Tuple[str, str]]:
    """Read a Kaldi text table (``key rest-of-line``), keeping order; blank lines are skipped.

    Raises AsrError naming the file and line for non-UTF-8 bytes.
    """
    path = Path(path)
    rows = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise AsrError(f"{path}:{lineno}: not valid UTF-8 ({e.reason}); re-encode the file as UTF-8") from None
            if not line.strip():
                continue
            parts = line.split(maxsplit=1)
            rows.append((parts[0], parts[1].strip() if len(parts) > 1 else ""))
    return rows


def read_table_dict(path: PathLike) -> Dict[str, str]:
    """Like :func:`read_table` but as a dict; a duplicate key is an AsrError naming the file and key."""
    out: Dict[str, str] = {}
    for key, val in read_table(path):
        if key in out:
            raise AsrError(f"{path}: duplicate key '{key}'; keys must be unique")
        out[key] = val
    return out


def write_table(path: PathLike, rows: Iterable[Tuple[str, str]], sort: bool = True) -> None:
    """Write a Kaldi text table atomically; rows sorted by key (C locale byte order) unless sort=False."""
    rows = list(rows)
    if sort:
        rows.sort(key=lambda kv: kv[0].encode("utf-8"))
    with atomic_open(path) as f:
        for k, v in rows:
            f.write(f"{k} {v}\n" if v != "" else f"{k}\n")


# ---------------------------------------------------------------- output-directory locks
LOCK_NAME = ".lock"
_held: Dict[Path, int] = {}   # directories this process has locked → nesting depth


def _lock_holder(lock: Path) -> str:
    try:
        h = json.loads(lock.read_text())
        return f"pid {h['pid']} on {h['host']}, started {h['started']}"
    except (OSError, ValueError, KeyError, TypeError):   # the holder is between locking and writing its details
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
            raise AsrError(f"another run ({_lock_holder(lock)}) is writing {d} (lock {lock}); wait for it to "
                           f"finish, or stop it and rerun — a stopped or killed run releases the lock") from None
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv)}
        with contextlib.suppress(OSError):   # details only; on a full disk the lock itself still holds
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        _held[key] = 1
        try:
            remove_stale_temps(key)
            yield lock
        finally:
            del _held[key]
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)   # an empty lock file: nobody holds it (a killed holder's details stay)
    finally:
        os.close(fd)   # releases the flock


def remove_stale_temps(directory: PathLike) -> List[Path]:
    """Remove the temporary files (``.NAME.XXXX.tmp``, see :func:`atomic_path`) under ``directory``.

    Call only while holding the directory's lock: any such file then belongs to a run that was killed before it
    could rename or remove it. Subdirectories with a lock file of their own are another step's and are left alone.
    Returns the removed paths (also logged with their count).
    """
    root = Path(directory)
    removed: List[Path] = []
    for d, subdirs, files in os.walk(root):
        subdirs[:] = [s for s in subdirs if not (Path(d) / s / LOCK_NAME).exists()]
        for f in files:
            if f.startswith(".") and f.endswith(".tmp") and f != LOCK_NAME:
                p = Path(d) / f
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
                    removed.append(p)
    if removed:
        logging.getLogger(__name__).info("removed %d temporary file(s) left in %s by an interrupted run: %s",
                                         len(removed), root, ", ".join(str(p.relative_to(root)) for p in removed[:5])
                                         + (" ..." if len(removed) > 5 else ""))
    return removed


# ---------------------------------------------------------------- stage markers
def _with_defaults(old, defaults):
    """``old`` with every key it lacks (at any depth) taken from ``defaults``."""
    if not isinstance(old, dict) or not isinstance(defaults, dict):
        return old
    return {**defaults, **{k: _with_defaults(v, defaults.get(k)) for k, v in old.items()}}


def is_done(marker: PathLike, fingerprint: dict | None = None, defaults: dict | None = None) -> bool:
    """True when the stage's marker exists and (if given) was written with the same settings ``fingerprint``.

    A marker written with other settings (e.g. the grammar changed in the config) makes the stage run again.
    ``defaults``: the fingerprint of the default settings; a setting the marker or ``fingerprint`` lacks (added to
    the config since the marker was written, or left out at its default) counts as its default, so a new option left
    at its default does not redo finished work.
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
    if defaults is not None and old is not None:   # both sides: a setting either one leaves out is its default
        defaults = json.loads(json.dumps(defaults, sort_keys=True, default=str))
        old, new = _with_defaults(old, defaults), _with_defaults(new, defaults)
    if old != new:
        logging.getLogger(__name__).warning("%s was made with other settings (%s, now %s): redoing the stage",
                                            marker, old, fingerprint)
        return False
    return True


def mark_done(marker: PathLike, info: dict | None = None, fingerprint: dict | None = None) -> None:
    """Write a stage's completion marker (atomically), with a JSON summary and the settings it was made with."""
    info = dict(info or {})
    if fingerprint is not None:
        info["_fingerprint"] = json.loads(json.dumps(fingerprint, sort_keys=True, default=str))
    write_json(marker, info)
