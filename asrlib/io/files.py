"""What a stage knows of a file: its content hash and its identity (path, size, modification time)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from asrlib.errors import PathLike


def sha256_file(path: PathLike) -> str:
    """Hex sha256 of a file's bytes (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_identity(path: PathLike) -> dict:
    """What a stage's fingerprint records of an input file: path, size and modification time (None when absent), so
    an input rewritten by an earlier stage (a new model's log-posteriors) makes the stage run again."""
    path = Path(path)
    st = path.stat() if path.is_file() else None
    return {"path": str(path), "bytes": st and st.st_size, "mtime_ns": st and st.st_mtime_ns}
