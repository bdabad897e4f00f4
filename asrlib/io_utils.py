"""Atomic file writes, stage-completion markers and Kaldi-style text tables.

Every output of a stage is written under a temporary name in the same directory and renamed into place, so a
killed process never leaves a file that a later stage (or a rerun) could mistake for complete.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Tuple, Union

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


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it to ``path`` (atomic on POSIX).

    On an exception the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp creates 0600; outputs get the usual umask-based permissions
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
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


# ---------------------------------------------------------------- stage markers
def is_done(marker: PathLike, fingerprint: dict | None = None) -> bool:
    """True when the stage's marker exists and (if given) was written with the same settings ``fingerprint``.

    A marker written with other settings (e.g. the grammar changed in the config) makes the stage run again.
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
    if old != json.loads(json.dumps(fingerprint, sort_keys=True, default=str)):
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
