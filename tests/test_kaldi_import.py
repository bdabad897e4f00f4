"""Kaldi data dirs in and out: pipes/archives materialised, segments kept, bad dirs refused or repaired, and a
round trip import -> features -> export (validate_data_dir.sh checks) -> import that changes nothing."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asrlib.errors import AsrError
from asrlib.io.tables import read_table
from local.kaldi_import import check_kaldi_dir, export_kaldi_dir, import_kaldi_dir, pipe_argv, wav_entry_kind

SR = 8000


def _tone(path: Path, seconds: float, freq: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    x = (0.3 * np.sin(2 * np.pi * freq * t) + 0.01 * rng.standard_normal(len(t))) * 32767
    x = x.astype(np.int16)
    sf.write(str(path), x, SR, subtype="PCM_16")
    return x


def _write(d: Path, name: str, lines):
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text("".join(f"{ln}\n" for ln in lines))


@pytest.fixture()
def kaldi_dir(tmp_path):
    """A Kaldi dir: a plain path, a `cat |` pipe, a `sox |` pipe (if sox is here), a wave-archive entry; segments."""
    import kaldi_native_io as kio

    audio = tmp_path / "audio"
    audio.mkdir()
    sig = {r: _tone(audio / f"{r}.wav", 1.2, 300 + 100 * i, i) for i, r in enumerate(("r1", "r2", "r3", "r4"))}
    ark = audio / "waves.ark"
    with kio.WaveWriter(f"ark,scp:{ark},{audio / 'waves.scp'}") as w:
        w.write("r4", kio.WaveData(sample_freq=SR, data=sig["r4"].astype(np.float32)[None, :]))
    r4_entry = (audio / "waves.scp").read_text().split()[1]
    d = tmp_path / "kaldi"
    sox = shutil.which("sox")
    r3 = f"sox {audio / 'r3.wav'} -t wav - |" if sox else f"cat {audio / 'r3.wav'} |"
    _write(d, "wav.scp", [f"r1 {audio / 'r1.wav'}", f"r2 cat {audio / 'r2.wav'} |", f"r3 {r3}", f"r4 {r4_entry}"])
    segs = [
        ("a-1", "r1", 0.0, 0.6),
        ("a-2", "r1", 0.6, 1.2),
        ("a-3", "r2", 0.1, 1.1),
        ("b-1", "r3", 0.0, 1.0),
        ("b-2", "r4", 0.2, 1.2),
    ]
    _write(d, "segments", [f"{u} {r} {s:.2f} {e:.2f}" for u, r, s, e in segs])
    _write(d, "text", [f"{u} ONE TWO" for u, *_ in segs])
    _write(d, "utt2spk", [f"{u} {u[0]}" for u, *_ in segs])
    _write(d, "spk2utt", ["a a-1 a-2 a-3", "b b-1 b-2"])
    return d, sig


def _segments(d: Path):
    return [(u, v.split()[0], float(v.split()[1]), float(v.split()[2])) for u, v in read_table(d / "segments")]


def test_entry_kinds(tmp_path):
    assert wav_entry_kind("sph2pipe -f wav x.sph |") == "pipe"
    assert wav_entry_kind("/data/waves.ark:1234") == "ark"
    assert wav_entry_kind("/data/x.wav") == "file"


def test_pipes_are_refused_unless_allowed(kaldi_dir, tmp_path):
    """A wav.scp command runs a program its author chose: refused by default, naming the file and line; run (in
    --base-dir) only with allow_pipes."""
    src, _ = kaldi_dir
    lines = (src / "wav.scp").read_text().splitlines()
    pipe_line = next(i for i, ln in enumerate(lines, 1) if ln.rstrip().endswith("|"))
    with pytest.raises(AsrError, match=rf"wav.scp:{pipe_line}: .* is a command .*--allow-pipes"):
        import_kaldi_dir(src, tmp_path / "a")
    assert not (tmp_path / "a" / "wav.scp").exists()
    rep = import_kaldi_dir(src, tmp_path / "b", allow_pipes=True)
    assert rep.num_materialised == 3 and not rep.excluded


def test_a_plain_command_runs_without_a_shell():
    assert pipe_argv("sph2pipe -f wav -p -c 1 /data/a.sph") == ["sph2pipe", "-f", "wav", "-p", "-c", "1", "/data/a.sph"]
    assert pipe_argv("cat 'my file.wav'") == ["cat", "my file.wav"]
    for needs_shell in (
        "sph2pipe a.sph | sox -t wav - -r 8000 -t wav -",
        "cat a.wav; rm -rf x",
        "cat $HOME/a.wav",
        "cat a.wav > b",
        "cat *.wav",
        "cat 'unbalanced",
    ):
        assert pipe_argv(needs_shell) is None, needs_shell


def test_import_materialises_pipes_and_keeps_segments(kaldi_dir, tmp_path):
    src, sig = kaldi_dir
    dst = tmp_path / "data" / "train"
    rep = import_kaldi_dir(src, dst, allow_pipes=True)
    assert rep.num_utts == 5 and rep.num_materialised == 3 and not rep.excluded
    wav = dict(read_table(dst / "wav.scp"))
    assert all(wav_entry_kind(v) == "file" and Path(v).is_file() for v in wav.values())
    for r in ("r2", "r3", "r4"):
        assert Path(wav[r]).parent == dst / "wav"
        x, sr = sf.read(wav[r], dtype="int16")
        assert sr == SR and np.array_equal(x, sig[r]), r
    assert _segments(dst) == _segments(src)
    assert read_table(dst / "spk2utt") == [("a", "a-1 a-2 a-3"), ("b", "b-1 b-2")]
    assert check_kaldi_dir(dst) == []


def test_round_trip_with_features(kaldi_dir, tmp_path):
    from asrlib.features.cmvn import compute_global_cmvn
    from asrlib.features.fbank import compute_fbank
    from asrlib.kaldi_io import read_matrix

    src, _ = kaldi_dir
    ours = tmp_path / "data" / "train"
    import_kaldi_dir(src, ours, allow_pipes=True)
    fb = tmp_path / "data" / "fbank"
    compute_fbank(ours, fb, nj=1, num_mel_bins=23, sample_rate=SR, show_progress=False)
    compute_global_cmvn(fb / "feats.scp", fb, show_progress=False)
    out = tmp_path / "export" / "train"
    assert export_kaldi_dir(ours, out, feats_dir=fb) == 5
    assert check_kaldi_dir(out) == []
    feats = dict(read_table(out / "feats.scp"))
    assert all(Path(v.rsplit(":", 1)[0]).is_absolute() for v in feats.values())
    assert read_matrix(feats["b-2"]).shape[1] == 23  # Kaldi-readable matrices at absolute paths
    assert [k for k, _ in read_table(out / "cmvn.scp")] == ["a", "b"]
    dur = dict(read_table(out / "utt2dur"))
    assert float(dur["a-3"]) == pytest.approx(1.0)
    again = tmp_path / "again" / "train"
    rep = import_kaldi_dir(out, again, allow_pipes=True)
    assert rep.num_materialised == 0  # the export holds plain files only
    for name in ("wav.scp", "segments", "text", "utt2spk", "spk2utt"):
        assert read_table(again / name) == read_table(ours / name), name
    assert dict(read_table(again / "feats.scp")) == feats


def test_unsorted_dir_is_refused_then_fixed(kaldi_dir, tmp_path):
    src, _ = kaldi_dir
    lines = (src / "utt2spk").read_text().splitlines()
    (src / "utt2spk").write_text("\n".join(reversed(lines)) + "\n")
    with pytest.raises(AsrError, match=r"not sorted.*\n.*--fix"):
        import_kaldi_dir(src, tmp_path / "x", allow_pipes=True)
    rep = import_kaldi_dir(src, tmp_path / "x", fix=True, allow_pipes=True)
    assert rep.num_utts == 5 and any("unsorted" in r for r in rep.repairs)
    assert [k for k, _ in read_table(tmp_path / "x" / "utt2spk")] == ["a-1", "a-2", "a-3", "b-1", "b-2"]


def test_inconsistent_dir_lists_exclusions(kaldi_dir, tmp_path):
    src, _ = kaldi_dir
    (src / "text").write_text(
        "".join(ln + "\n" for ln in (src / "text").read_text().splitlines() if not ln.startswith("a-2"))
    )  # a-2 has no transcript
    (src / "spk2utt").write_text("a a-1 a-2 a-3 b-1\nb b-2\n")  # b-1 under the wrong speaker
    with pytest.raises(AsrError, match="inconsistent"):
        import_kaldi_dir(src, tmp_path / "x", allow_pipes=True)
    rep = import_kaldi_dir(src, tmp_path / "x", fix=True, allow_pipes=True)
    excluded = dict(read_table(tmp_path / "x" / "excluded.txt"))
    assert "a-2" in excluded and excluded["a-2"].startswith("missing-transcript")
    assert rep.num_utts == 4
    assert check_kaldi_dir(tmp_path / "x") == []


def test_failing_pipe_excludes_its_utterances(kaldi_dir, tmp_path):
    src, _ = kaldi_dir
    scp = (src / "wav.scp").read_text().replace("cat ", "cat /no/such/file ", 1)
    (src / "wav.scp").write_text(scp)
    rep = import_kaldi_dir(src, tmp_path / "x", allow_pipes=True)
    assert set(rep.excluded) == {"a-3"} and rep.excluded["a-3"].startswith("pipe-failed")
    assert "a-3 pipe-failed" in (tmp_path / "x" / "excluded.txt").read_text()
    assert "r2" not in dict(read_table(tmp_path / "x" / "wav.scp"))


def test_check_finds_kaldi_problems(kaldi_dir, tmp_path):
    src, _ = kaldi_dir
    d = tmp_path / "x"
    import_kaldi_dir(src, d, allow_pipes=True)
    (d / "utt2dur").write_text("a-1 0.6\n")
    (d / "cmvn.scp").write_text("a /x.ark:1\n")
    problems = check_kaldi_dir(d)
    assert any("utt2dur" in p for p in problems) and any("cmvn.scp" in p for p in problems)
