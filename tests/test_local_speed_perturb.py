"""Speed perturbation of a data dir: Kaldi ids, lengths and pitch scale by the factor, segments follow, reruns
reuse the audio, and the result passes the data-dir checks."""

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asrlib.data.speed_perturb import speed_perturb_data_dir
from asrlib.errors import AsrError
from asrlib.io.tables import read_table
from local.kaldi_import import check_kaldi_dir

SR = 8000


def _dir(tmp_path: Path, segments: bool) -> Path:
    d = tmp_path / "src"
    d.mkdir()
    t = np.arange(SR) / SR
    sf.write(str(tmp_path / "r1.wav"), (0.3 * np.sin(2 * np.pi * 500 * t) * 32767).astype(np.int16), SR)
    (d / "wav.scp").write_text(f"spk-r1 {tmp_path / 'r1.wav'}\n")
    if segments:
        (d / "segments").write_text("spk-u1 spk-r1 0.00 0.45\nspk-u2 spk-r1 0.45 0.90\n")
        utts = ["spk-u1", "spk-u2"]
    else:
        utts = ["spk-r1"]
    (d / "text").write_text("".join(f"{u} YES\n" for u in utts))
    (d / "utt2spk").write_text("".join(f"{u} spk\n" for u in utts))
    (d / "spk2utt").write_text(f"spk {' '.join(utts)}\n")
    return d


def _peak_hz(path: str) -> float:
    x, sr = sf.read(path)
    return float(np.argmax(np.abs(np.fft.rfft(x))) * sr / len(x))


def test_three_way_perturbation(tmp_path):
    src = _dir(tmp_path, segments=False)
    n = speed_perturb_data_dir(src, tmp_path / "sp", [0.9, 1.0, 1.1], tmp_path / "wav_sp")
    assert n == 3
    wav = dict(read_table(tmp_path / "sp" / "wav.scp"))
    assert sorted(wav) == ["sp0.9-spk-r1", "sp1.1-spk-r1", "spk-r1"]
    assert dict(read_table(tmp_path / "sp" / "utt2spk"))["sp0.9-spk-r1"] == "sp0.9-spk"
    assert sf.info(wav["sp0.9-spk-r1"]).frames == pytest.approx(SR / 0.9, abs=2)
    assert sf.info(wav["sp1.1-spk-r1"]).frames == pytest.approx(SR / 1.1, abs=2)
    assert _peak_hz(wav["sp0.9-spk-r1"]) == pytest.approx(450, abs=3)  # pitch moves with speed (sox speed)
    assert _peak_hz(wav["sp1.1-spk-r1"]) == pytest.approx(550, abs=3)
    assert check_kaldi_dir(tmp_path / "sp") == []
    mtime = Path(wav["sp0.9-spk-r1"]).stat().st_mtime_ns
    speed_perturb_data_dir(src, tmp_path / "sp", [0.9, 1.0, 1.1], tmp_path / "wav_sp")  # rerun: audio reused
    assert Path(wav["sp0.9-spk-r1"]).stat().st_mtime_ns == mtime


def test_segments_scale_with_speed(tmp_path):
    src = _dir(tmp_path, segments=True)
    speed_perturb_data_dir(src, tmp_path / "sp", [0.9, 1.1], tmp_path / "wav_sp")
    segs = {u: v.split() for u, v in read_table(tmp_path / "sp" / "segments")}
    assert set(segs) == {"sp0.9-spk-u1", "sp0.9-spk-u2", "sp1.1-spk-u1", "sp1.1-spk-u2"}
    assert segs["sp1.1-spk-u2"][0] == "sp1.1-spk-r1"
    assert float(segs["sp0.9-spk-u2"][1]) == pytest.approx(0.5, abs=1e-3)
    assert float(segs["sp0.9-spk-u2"][2]) == pytest.approx(1.0, abs=1e-3)
    assert check_kaldi_dir(tmp_path / "sp") == []


def test_bad_factors_and_pipes(tmp_path):
    src = _dir(tmp_path, segments=False)
    with pytest.raises(AsrError, match=r"\(0.5, 2\)"):
        speed_perturb_data_dir(src, tmp_path / "sp", [3.0], tmp_path / "w")
    (src / "wav.scp").write_text("spk-r1 cat x.wav |\n")
    with pytest.raises(AsrError, match="kaldi_import"):
        speed_perturb_data_dir(src, tmp_path / "sp", [0.9], tmp_path / "w")
