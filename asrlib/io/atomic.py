"""Atomic writes: every output is written under a temporary name in the same directory and renamed into place, so a
killed process never leaves a file that a later stage (or a rerun) could mistake for complete. A write that fails
because the disk is full (or over quota, read-only, past the file size limit) removes its temporary file and becomes
one :class:`AsrError` naming the file."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator, Optional

from asrlib.errors import AsrError, PathLike


_UMASK = os.umask(0)

os.umask(_UMASK)

# errno of a write the disk cannot take → (what happened, what to do)
_DISK_ERRORS = {
    errno.ENOSPC: ("no space left on device", "free some space (or move the data/exp dirs to a bigger disk)"),
    errno.EDQUOT: ("disk quota exceeded", "free some space or ask for a larger quota"),
    errno.EROFS: ("read-only file system", "write the outputs to a writable disk"),
    errno.EFBIG: ("file too large (over the file size limit, see ulimit -f)", "raise the limit"),
}


def disk_write_error(
    e: BaseException, path: Optional[PathLike] = None, probe: Optional[PathLike] = None
) -> Optional[AsrError]:
    """For an error meaning the disk cannot take the output (full, over quota, read-only, file size limit): an
    :class:`AsrError` naming the file (``path``, else the error's own file name); None for any other exception.

    Libraries that write in C++ (torch.save, kaldi_native_io) report a failed write as a RuntimeError without an
    errno: for such an error (and only then) ``probe``, the (temporary) file that was being written, gets 64 KiB
    appended from
    Python, and a full disk answers with its errno again.
    """
    if isinstance(e, RuntimeError) and probe is not None:  # the C++ writers' error type; others are not I/O
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
    return AsrError(
        f"{what} while writing {where or 'an output file'}; {todo}, then rerun (finished steps are skipped)"
    )


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
