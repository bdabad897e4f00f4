"""Kaldi-style text tables (``key rest-of-line``): wav.scp, text, utt2spk, feats.scp, ..."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Iterable, List, Tuple

from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import atomic_open


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
