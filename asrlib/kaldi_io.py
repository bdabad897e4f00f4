"""Kaldi binary archives (``.ark`` + ``.scp``) through kaldi_native_io, written atomically.

Writers put the archive and its script file under temporary names in the destination directory, rewrite the
script so that its entries point at the *final* archive name, and only then rename the archive and, last, the
script into place. A writer that is killed or raises leaves neither final file behind (the ``.scp`` appears last,
so its presence means the archive is complete). A write that fails (full disk, quota, read-only file system) is an
:class:`AsrError` naming the archive, with the temporary files removed.

Paths inside a ``.scp`` are absolute, so an archive written by one front-end (Snakemake runs in its workdir) is read
correctly by another (run.sh runs in the recipe dir) or by any tool started elsewhere.

Readers open the archive for each item read (``ark:offset``), so a :class:`MatrixReader` holds no open file
handle and can be shared by forked data-loader workers.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Sequence, Tuple

import kaldi_native_io as knio
import numpy as np

from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import disk_write_error
from asrlib.io.tables import read_table


# ------------------------------------------------------------------------------------------------ writing
def _scp_path(ark_path: Path) -> Path:
    return ark_path.with_suffix(".scp")


def _check_path(path: Path) -> None:
    s = str(path)
    if any(c.isspace() for c in s) or "," in s or s.endswith("|") or s == "-":
        raise AsrError(f"archive path '{s}' cannot be used in a Kaldi wspecifier (no whitespace or commas allowed)")


@contextlib.contextmanager
def _atomic_ark_scp(ark_path: PathLike) -> Iterator[str]:
    """Yield a wspecifier writing temp files; on success move them to ``ark_path`` and its ``.scp``."""
    ark = Path(ark_path)
    if ark.suffix != ".ark":
        raise ValueError(f"archive name must end in .ark: {ark}")
    _check_path(ark)
    scp = _scp_path(ark)
    tag = f".tmp{os.getpid()}."
    tmp_ark = ark.with_name(tag + ark.name)
    tmp_scp = scp.with_name(tag + scp.name)
    try:
        ark.parent.mkdir(parents=True, exist_ok=True)
        yield f"ark,scp:{tmp_ark},{tmp_scp}"
        lines: List[str] = []
        prefix = f"{tmp_ark}:"
        with open(tmp_scp, encoding="utf-8") as f:
            for line in f:
                key, rx = line.rstrip("\n").split(" ", 1)
                if not rx.startswith(prefix):  # cannot happen unless kaldi_native_io changes its output
                    raise RuntimeError(f"unexpected scp entry written by kaldi_native_io: {line!r}")
                lines.append(f"{key} {ark.resolve()}:{rx[len(prefix) :]}\n")  # absolute: readable from any cwd
        with open(tmp_scp, "w", encoding="utf-8") as f:
            f.writelines(lines)
            f.flush()
            os.fsync(f.fileno())
        with open(tmp_ark, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp_ark, ark)
        os.replace(tmp_scp, scp)
    except BaseException as e:
        err = disk_write_error(e, ark, probe=tmp_ark)  # kaldi_native_io's RuntimeError has no errno: probe
        for p in (tmp_ark, tmp_scp):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        if err is not None:
            raise err from e
        raise


def _write_table(
    ark_path: PathLike, items: Iterable[Tuple[str, object]], writer_cls, convert: Callable[[str, object], object]
) -> int:
    n = 0
    with _atomic_ark_scp(ark_path) as wspec:
        writer = writer_cls(wspec)
        try:
            for key, value in items:
                if not key or any(c.isspace() for c in key):
                    raise ValueError(f"bad archive key {key!r}: must be non-empty without whitespace")
                writer.write(key, convert(key, value))
                n += 1
        finally:
            # the wrapper's close() drops TableWriter::Close()'s status, so a buffered tail lost on a full disk
            # would go unnoticed: ask the C++ writer itself
            closed = not writer.is_open or writer._impl.close()
        if not closed:
            raise RuntimeError(f"kaldi_native_io could not finish writing {ark_path} (TableWriter::Close failed)")
    return n


def _as_matrix(dtype):
    def convert(key: str, value) -> np.ndarray:
        arr = np.asarray(value)
        if arr.dtype != dtype or arr.ndim != 2:
            raise TypeError(f"item '{key}': expected a 2-D {np.dtype(dtype).name} array, got {arr.ndim}-D {arr.dtype}")
        return np.ascontiguousarray(arr)

    return convert


def _as_int_vector(key: str, value) -> List[int]:
    arr = np.asarray(value)
    if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise TypeError(f"item '{key}': expected a 1-D integer array, got {arr.ndim}-D {arr.dtype}")
    if arr.size and (arr.min() < np.iinfo(np.int32).min or arr.max() > np.iinfo(np.int32).max):
        raise ValueError(f"item '{key}': values do not fit in int32")
    return arr.astype(np.int64).tolist()


def write_matrices(ark_path: PathLike, items: Iterable[Tuple[str, np.ndarray]]) -> int:
    """Write float32 matrices to ``ark_path`` and ``ark_path`` with ``.scp`` suffix, atomically.

    ``items`` may be a generator (items are streamed to disk). Returns the number of items written.
    """
    return _write_table(ark_path, items, knio.FloatMatrixWriter, _as_matrix(np.float32))


class _SpeechFeatureWriter(knio.CompressedMatrixWriter):
    def write(self, key: str, value: np.ndarray, method=knio.CompressionMethod.kSpeechFeature) -> None:
        super().write(key, value, method)


def write_compressed_matrices(ark_path: PathLike, items: Iterable[Tuple[str, np.ndarray]]) -> int:
    """Like :func:`write_matrices`, stored as Kaldi compressed matrices (``copy-feats --compress=true``'s
    speech-feature method: one byte per value plus per-column quantiles, about 0.26 of float32's bytes on fbank).
    Every reader here (and Kaldi's own) decompresses them transparently."""

    return _write_table(ark_path, items, _SpeechFeatureWriter, _as_matrix(np.float32))


def write_double_matrices(ark_path: PathLike, items: Iterable[Tuple[str, np.ndarray]]) -> int:
    """Like :func:`write_matrices` for float64 matrices (e.g. CMVN statistics)."""
    return _write_table(ark_path, items, knio.DoubleMatrixWriter, _as_matrix(np.float64))


def write_int_vectors(ark_path: PathLike, items: Iterable[Tuple[str, Iterable[int]]]) -> int:
    """Like :func:`write_matrices` for int32 vectors (alignments, token ids)."""
    return _write_table(ark_path, items, knio.Int32VectorWriter, _as_int_vector)


# ------------------------------------------------------------------------------------------------ reading
def read_scp(scp_path: PathLike) -> Dict[str, str]:
    """Read a ``.scp`` into an ordered dict key → rxfilename (``path.ark:offset``).

    A missing file, an entry without a location or a duplicate key is an :class:`AsrError`.
    """
    scp_path = Path(scp_path)
    if not scp_path.is_file():
        raise AsrError(f"{scp_path} does not exist; run the stage that creates it first")
    out: Dict[str, str] = {}
    for key, rx in read_table(scp_path):
        if not rx:
            raise AsrError(f"{scp_path}: entry '{key}' has no archive location")
        if "\0" in rx:
            raise AsrError(f"{scp_path}: entry '{key}' has a NUL byte in its location (a damaged file)")
        if key in out:
            raise AsrError(f"{scp_path}: duplicate key '{key}'")
        out[key] = rx
    return out


def _read_item(reader: Callable[[str], object], rx: str, key: str, scp: Path):
    check_matrix_header(rx, key, scp)
    try:
        return reader(rx)
    except (RuntimeError, UnicodeDecodeError, ValueError, MemoryError) as e:  # kaldi_native_io's read errors
        text = str(e) if not isinstance(e, UnicodeDecodeError) else "unreadable data"
        msg = text.strip().splitlines()[-1] if text.strip() else "read error"
        raise AsrError(
            f"{scp}: cannot read '{key}' from {rx} ({msg}); the archive is missing or corrupt — "
            f"delete the stage's output directory and rerun it"
        ) from None


# bytes per element of Kaldi's binary matrix types (token -> (element bytes, compressed))
_MATRIX_TOKENS = {b"FM": 4, b"DM": 8, b"CM": 1, b"CM2": 2, b"CM3": 1}


def check_matrix_header(rx: str, key: str, scp: Path) -> None:
    """Before a binary matrix at ``path:offset`` is read, check that the rows x columns its header claims fit in
    the bytes the file has after it, so a damaged header can never make the reader allocate more than the file
    holds (an :class:`AsrError` naming the entry). Text-mode and unrecognised entries are left to the reader."""
    path, _, offset = rx.rpartition(":")
    if not offset.isdigit():
        return
    try:
        with open(path, "rb") as f:
            f.seek(int(offset))
            head = f.read(32)
            f.seek(0, 2)
            left = f.tell() - int(offset)
    except (OSError, ValueError, OverflowError):
        return  # the reader says what is missing
    if not head.startswith(b"\0B"):
        return
    token, _, rest = head[2:].partition(b" ")
    if token not in _MATRIX_TOKENS:
        return
    import struct

    if token.startswith(b"CM"):  # global header: min, range (float32), rows, cols (int32)
        if len(rest) < 16:
            raise AsrError(f"{scp}: '{key}' at {rx}: truncated compressed-matrix header")
        rows, cols = struct.unpack("<ii", rest[8:16])
        need = rows * cols * _MATRIX_TOKENS[token] + (cols * 8 if token == b"CM" else 0)
    else:  # <size byte 4> rows <size byte 4> cols
        if len(rest) < 10 or rest[0] != 4 or rest[5] != 4:
            raise AsrError(f"{scp}: '{key}' at {rx}: damaged matrix header")
        rows, cols = struct.unpack("<i", rest[1:5])[0], struct.unpack("<i", rest[6:10])[0]
        need = rows * cols * _MATRIX_TOKENS[token]
    if rows < 0 or cols < 0 or need > left:
        raise AsrError(
            f"{scp}: '{key}' at {rx} claims a {rows} x {cols} matrix, more than the {left} bytes the file has "
            f"there: the archive is corrupt; delete the stage's output directory and rerun it"
        )


class MatrixReader:
    """Random access by key and iteration in ``.scp`` order over a table of float32 (or float64) matrices.

    >>> r = MatrixReader("data/fbank/train/feats.scp")
    >>> feats = r["utt1"]            # np.ndarray float32 (T, D)
    >>> for utt, feats in r: ...     # scp order
    """

    def __init__(self, scp_path: PathLike, double: bool = False) -> None:
        self.scp_path = Path(scp_path)
        self._rx = read_scp(self.scp_path)
        self._double = double

    def _read(self, rx: str) -> np.ndarray:
        return (knio.DoubleMatrix if self._double else knio.FloatMatrix).read(rx).numpy()

    def keys(self) -> List[str]:
        return list(self._rx)

    def rxfilename(self, key: str) -> str:
        return self._rx[key]

    def __len__(self) -> int:
        return len(self._rx)

    def __contains__(self, key: str) -> bool:
        return key in self._rx

    def __getitem__(self, key: str) -> np.ndarray:
        try:
            rx = self._rx[key]
        except KeyError:
            raise KeyError(f"'{key}' is not in {self.scp_path}") from None
        return _read_item(self._read, rx, key, self.scp_path)

    def __iter__(self) -> Iterator[Tuple[str, np.ndarray]]:
        for key in self._rx:
            yield key, self[key]


def open_matching_readers(scps: Sequence[PathLike]) -> Tuple[List[MatrixReader], List[str]]:
    """Readers of several models' tables of the same set (log-posteriors to combine) and the first one's keys, in
    its order; an AsrError when the tables do not hold the same utterances."""
    readers = [MatrixReader(f) for f in scps]
    keys = readers[0].keys()
    for f, r in zip(scps[1:], readers[1:]):
        if set(r.keys()) != set(keys):
            diff = sorted(set(r.keys()) ^ set(keys))
            raise AsrError(
                f"{f} and {scps[0]} hold different utterances ({len(diff)} differ, e.g. {diff[0]}); "
                "compute every model's on the same feats.scp"
            )
    return readers, keys


def read_matrix(rxfilename: str, double: bool = False) -> np.ndarray:
    """Read one matrix given a Kaldi rxfilename such as ``feats.1.ark:1234``."""
    return (knio.DoubleMatrix if double else knio.FloatMatrix).read(rxfilename).numpy()


def read_int_vectors(scp_path: PathLike) -> Dict[str, np.ndarray]:
    """Read every int32 vector listed in ``scp_path`` into an ordered dict (scp order) of int32 arrays."""
    scp_path = Path(scp_path)
    return {
        key: np.asarray(_read_item(knio.read_int32_vector, rx, key, scp_path), dtype=np.int32)
        for key, rx in read_scp(scp_path).items()
    }
