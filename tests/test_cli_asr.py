"""The `asr` command: transcribe files / directories / wav.scp (text and JSON lines), bad inputs reported while the
others are still transcribed, --nj, package + info, clear fatal errors. Uses the tone model of tests/tone_model.py."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from asrlib.cli import env_with_root
from asrlib.app.cli_asr import collect_inputs, main
from asrlib.errors import AsrError
from tone_model import SR, read_texts, tone_model

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tm(tmp_path_factory):
    torch.set_num_threads(1)
    return tone_model(tmp_path_factory)


def _run(capsys, *argv):
    rc = main(list(map(str, argv)))
    out, err = capsys.readouterr()
    return rc, out, err


def test_transcribe_dir_scp_and_files_text_and_jsonl(tm, capsys, tmp_path):
    wav_dir = tm.root / "wav" / "test"
    ref = read_texts(tm.data / "test" / "text")
    rc, out, err = _run(capsys, "transcribe", tm.exp, wav_dir, "-q")
    assert rc == 0 and err == ""
    assert read_texts_str(out) == ref  # every test utterance right, keys = file names
    rc, out_scp, _ = _run(capsys, "transcribe", tm.exp, tm.data / "test" / "wav.scp", "-q")
    assert rc == 0 and out_scp == out
    files = sorted(wav_dir.glob("*.wav"))[:2]
    rc, out_files, err = _run(capsys, "transcribe", tm.exp, *files, "-o", tmp_path / "hyp.txt")
    assert rc == 0 and out_files == "" and "2 of 2 inputs transcribed" in err and "RTF" in err
    assert (tmp_path / "hyp.txt").read_text() == "".join(out.splitlines(True)[:2])

    rc, out, _ = _run(capsys, "transcribe", tm.exp, wav_dir, "--format", "jsonl", "-q", "--method", "greedy")
    assert rc == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert {r["key"]: r["text"] for r in rows} == ref
    for r in rows:
        assert r["duration"] == pytest.approx(sf.info(r["path"]).duration, abs=1e-3)
        times = [t for w in r["words"] for t in (w["start"], w["end"])]
        assert times == sorted(times) and 0 <= times[0] and times[-1] <= r["duration"]
        assert [w["word"] for w in r["words"]] == r["text"].split()
        assert all(0 < w["confidence"] <= 1 for w in r["words"])


def read_texts_str(text: str) -> dict:
    return {k: v.strip() for k, _, v in (line.partition(" ") for line in text.splitlines())}


def test_bad_inputs_are_reported_and_the_rest_transcribed(tm, capsys, tmp_path):
    good = sorted((tm.root / "wav" / "test").glob("*.wav"))[:2]
    (tmp_path / "empty.wav").write_bytes(b"")
    (tmp_path / "junk.flac").write_bytes(b"\x00garbage" * 50)
    scp = tmp_path / "wav.scp"
    scp.write_text(
        f"ok1 {good[0]}\npiped sox a.wav -t wav - |\nempty {tmp_path / 'empty.wav'}\n"
        f"junk {tmp_path / 'junk.flac'}\nmissing {tmp_path / 'nope.wav'}\nok2 {good[1]}\n"
    )
    rc, out, err = _run(capsys, "transcribe", tm.exp, scp, "-q")
    assert rc == 1
    assert [line.split()[0] for line in out.splitlines()] == ["ok1", "ok2"]
    for key, msg in [
        ("piped", "only file paths"),
        ("empty", "empty file"),
        ("junk", "cannot read audio"),
        ("missing", "no such file"),
    ]:
        assert f"ERROR [asr]: {key}: " in err and msg in err, (key, err)
    assert "4 of 6 inputs failed" in err
    rc, out, _ = _run(capsys, "transcribe", tm.exp, scp, "-q", "--format", "jsonl")
    rows = [json.loads(line) for line in out.splitlines()]
    assert rc == 1 and [r["key"] for r in rows] == ["ok1", "piped", "empty", "junk", "missing", "ok2"]
    assert [("error" in r) for r in rows] == [False, True, True, True, True, False]


def test_input_listing(tm, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        sf.write(str(tmp_path / d / "x.wav"), np.zeros(800, np.float32), SR)
    with pytest.raises(AsrError, match="two inputs have the key 'x'"):
        collect_inputs([str(tmp_path)])
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(AsrError, match="holds no audio files"):
        collect_inputs([str(tmp_path / "empty_dir")])
    items = collect_inputs([str(tmp_path / "a"), str(tmp_path / "my file.WAV")])
    assert [k for k, _, _ in items] == ["x", "my_file"]


def test_package_info_and_verify(tm, capsys, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("decode: {beam: 9.0, max_active: 500}\n")
    pkg = tmp_path / "pkg"
    rc, out, _ = _run(capsys, "package", tm.exp, tm.lang, pkg, "--config", cfg)
    assert rc == 0 and "model.json" in out
    meta = json.loads((pkg / "model.json").read_text())
    assert meta["format_version"] == 1 and meta["decode"]["beam"] == 9.0 and meta["num_mel_bins"] == 24
    rc, out, _ = _run(capsys, "info", pkg, "--json", "--verify")
    info = json.loads(out)
    assert rc == 0 and info["verified"] == "ok" and info["words"] == 4 and info["tokens"] == 5 and info["tlg"]
    assert info["decode"]["max_active"] == 500 and info["network"]["parameters"] > 1000
    wav_dir = tm.root / "wav" / "test"
    assert _run(capsys, "transcribe", pkg, wav_dir, "-q")[1] == _run(capsys, "transcribe", tm.exp, wav_dir, "-q")[1]
    with pytest.raises(AsrError, match="already exists"):
        main(["package", str(tm.exp), str(tm.lang), str(pkg)])
    words = pkg / "lang" / "words.txt"
    words.write_text(words.read_text().replace("W1", "W9"))  # same size, other content
    with pytest.raises(AsrError, match="lang/words.txt: checksum differs"):
        main(["info", str(pkg), "--verify"])


def test_nj_and_fatal_errors(tm, capsys, tmp_path, monkeypatch):
    """--nj 2 (a separate process, as users run it) gives the --nj 1 output; a broken model is one ERROR line
    and exit status 2 from the console entry point."""
    from asrlib.app.cli_asr import console_main

    wav_dir = tm.root / "wav" / "test"
    rc, one, _ = _run(capsys, "transcribe", tm.exp, wav_dir, "-q")
    two = subprocess.run(
        [sys.executable, "-m", "asrlib.app.cli_asr", "transcribe", str(tm.exp), str(wav_dir), "-q", "--nj", "2"],
        capture_output=True,
        text=True,
        env=env_with_root(ROOT),
    )
    assert rc == 0 and two.returncode == 0, two.stderr
    assert two.stdout == one and len(one.splitlines()) == 8

    broken = tmp_path / "broken"
    shutil.copytree(tm.exp, broken, ignore=shutil.ignore_patterns("checkpoints", "tensorboard"))
    shutil.copytree(tm.lang, broken / "lang")
    (broken / "lang" / "lexicon.txt").unlink()
    monkeypatch.setattr(sys, "argv", ["asr", "transcribe", str(broken), "x.wav", "--nj", "2"])
    with pytest.raises(SystemExit) as e:
        console_main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err
    assert (
        err.strip() == f"ERROR [asr]: lang dir {broken / 'lang'} lacks lexicon.txt; run the lang stage "
        f"(steps.prepare_lang)"
    )


def test_console_script_installed():
    """`make install` (pip install -e .) puts the `asr` command beside the interpreter: its absence is the failure
    this test is for, so it fails rather than skips."""
    exe = Path(sys.executable).parent / "asr"
    assert exe.is_file(), f"the `asr` console script is not installed at {exe} (make install: pip install -e .)"
    r = subprocess.run([str(exe), "transcribe", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--format {text,jsonl,srt,vtt}" in r.stdout


def test_the_summary_counts_the_inputs_transcribed_and_times_them(tm, capsys, tmp_path, monkeypatch):
    """The closing line on stderr: inputs transcribed of all, seconds of audio, the wall time from the model's
    loading on and the RTF (on a clock the test sets: model loaded at 100.25 - 100.0, the inputs 202.5 - 200.0)."""
    from asrlib.app import cli_asr

    good = sorted((tm.root / "wav" / "test").glob("*.wav"))[:3]
    scp = tmp_path / "wav.scp"
    scp.write_text("".join(f"ok{i} {p}\n" for i, p in enumerate(good)) + f"missing {tmp_path / 'nope.wav'}\n")
    ticks = [100.0, 100.25, 200.0]
    monkeypatch.setattr(cli_asr.time, "perf_counter", lambda: ticks.pop(0) if ticks else 202.5)
    rc, out, err = _run(capsys, "transcribe", tm.exp, scp, "--method", "greedy")
    audio = sum(sf.info(p).duration for p in good)
    assert rc == 1 and len(out.splitlines()) == 3
    summary = next(line for line in err.splitlines() if line.startswith("asr transcribe: "))
    assert summary == (
        f"asr transcribe: 3 of 4 inputs transcribed ({audio:.1f} s of audio in 2.50 s, RTF {2.5 / audio:.3f}, "
        f"nj=1; model loaded in 0.25 s)"
    )


def test_a_long_file_gets_a_progress_bar_in_seconds_of_its_audio(tmp_path):
    from asrlib.app.cli_asr import LONG_FILE_SECONDS, file_progress

    sr = 8000
    long_wav, short_wav = tmp_path / "long.wav", tmp_path / "short.wav"
    sf.write(long_wav, np.zeros(int((LONG_FILE_SECONDS + 0.26) * sr), np.int16), sr)
    sf.write(short_wav, np.zeros(int((LONG_FILE_SECONDS - 1) * sr), np.int16), sr)
    bar = file_progress("long", str(long_wav))
    try:
        assert bar.total == pytest.approx(LONG_FILE_SECONDS + 0.3) and bar.unit == "s"  # to a tenth of a second
    finally:
        bar.close()
    assert file_progress("short", str(short_wav)) is None
    assert file_progress("missing", str(tmp_path / "nothing.wav")) is None  # transcribe_file says why
