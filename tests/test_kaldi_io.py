"""Kaldi archive helpers: bit-exact round trips, scp order, atomic writes."""

from __future__ import annotations

import numpy as np
import pytest

from asrlib.errors import AsrError
from asrlib.kaldi_io import (
    MatrixReader,
    read_int_vectors,
    read_matrix,
    read_scp,
    write_double_matrices,
    write_int_vectors,
    write_matrices,
)


def _mats(rng, n=5, dim=7, dtype=np.float32):
    out = []
    for i in range(n):
        m = (rng.standard_normal((3 + 4 * i, dim)) * 10.0 ** rng.integers(-20, 20)).astype(dtype)
        out.append((f"utt{(7 * i) % n}", m))  # keys deliberately not in sorted order
    out[0][1][0, :3] = [np.finfo(dtype).max, np.finfo(dtype).tiny, -0.0]
    return out


def test_float_matrices_round_trip_bit_exact(tmp_path):
    items = _mats(np.random.default_rng(0))
    ark = tmp_path / "feats.1.ark"
    assert write_matrices(ark, iter(items)) == len(items)
    scp = tmp_path / "feats.1.scp"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["feats.1.ark", "feats.1.scp"]  # no temp files
    rx = read_scp(scp)
    assert list(rx) == [k for k, _ in items]  # scp keeps writing order
    assert all(v.startswith(f"{ark}:") for v in rx.values())  # entries point at the final ark
    reader = MatrixReader(scp)
    assert [k for k, _ in reader] == [k for k, _ in items]  # iteration in scp order
    for key, m in items:  # random access, bit exact
        got = reader[key]
        assert got.dtype == np.float32 and got.shape == m.shape and got.tobytes() == m.tobytes()
        assert read_matrix(reader.rxfilename(key)).tobytes() == m.tobytes()
    assert "nope" not in reader and len(reader) == len(items)
    with pytest.raises(KeyError):
        reader["nope"]


def test_double_matrix_round_trip_bit_exact(tmp_path):
    stats = np.random.default_rng(1).standard_normal((2, 81)) * 1e6
    stats[1, -1] = 0.0
    write_double_matrices(tmp_path / "cmvn.ark", [("global", stats)])
    got = MatrixReader(tmp_path / "cmvn.scp", double=True)["global"]
    assert got.dtype == np.float64 and got.tobytes() == stats.tobytes()


def test_int_vectors_round_trip(tmp_path):
    i32 = np.iinfo(np.int32)
    items = [("b", np.array([3, 1, 2], dtype=np.int64)), ("a", []), ("c", np.array([i32.min, -1, 0, i32.max]))]
    write_int_vectors(tmp_path / "ali.ark", items)
    got = read_int_vectors(tmp_path / "ali.scp")
    assert list(got) == ["b", "a", "c"]
    for k, v in items:
        assert got[k].dtype == np.int32 and got[k].tolist() == list(np.asarray(v, dtype=np.int64))
    with pytest.raises(ValueError):
        write_int_vectors(tmp_path / "bad.ark", [("x", [2**31])])
    assert not list(tmp_path.glob("bad*")) and not list(tmp_path.glob(".tmp*"))


def test_killed_writer_leaves_no_final_files_and_keeps_old_ones(tmp_path):
    ark, scp = tmp_path / "feats.ark", tmp_path / "feats.scp"

    def failing(n_ok):
        for i in range(n_ok):
            yield f"u{i}", np.ones((4, 3), np.float32)
        raise RuntimeError("simulated crash mid-write")

    with pytest.raises(RuntimeError, match="simulated"):
        write_matrices(ark, failing(3))
    assert list(tmp_path.iterdir()) == []  # neither final nor temp files
    write_matrices(ark, [("old", np.zeros((2, 3), np.float32))])
    before = (ark.read_bytes(), scp.read_bytes())
    with pytest.raises(RuntimeError, match="simulated"):
        write_matrices(ark, failing(2))
    assert (ark.read_bytes(), scp.read_bytes()) == before  # the previous complete table is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["feats.ark", "feats.scp"]
    with pytest.raises(TypeError):  # wrong dtype is refused, nothing left behind
        write_matrices(tmp_path / "x.ark", [("a", np.zeros((2, 2), np.float64))])
    assert not (tmp_path / "x.ark").exists() and not (tmp_path / "x.scp").exists()


def test_missing_or_corrupt_archives_are_clear_errors(tmp_path):
    with pytest.raises(AsrError, match="does not exist"):
        MatrixReader(tmp_path / "nope.scp")
    write_matrices(tmp_path / "f.ark", [("a", np.ones((2, 2), np.float32))])
    (tmp_path / "f.ark").unlink()
    with pytest.raises(AsrError, match="cannot read 'a'"):
        MatrixReader(tmp_path / "f.scp")["a"]
    (tmp_path / "dup.scp").write_text("a x.ark:1\na x.ark:9\n")
    with pytest.raises(AsrError, match="duplicate key 'a'"):
        MatrixReader(tmp_path / "dup.scp")
