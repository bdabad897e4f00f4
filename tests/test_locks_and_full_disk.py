"""Concurrent runs and full disks.

Locks: a step holds an flock on its output directory's ``.lock`` (asrlib.io.stage.dir_lock, taken by
asrlib.cli.run_main); a second run writing there at the same time exits with one ERROR line naming the lock and
the holder's PID and leaves the directory untouched; a SIGKILLed holder leaves no stale lock; under torchrun only
the learner with rank 0 holds it, so the learners of one run do not lock each other out.

Full disks: a write that fails with ENOSPC (kernel-made through /dev/full for the C++ writers, injected at fsync
for a whole stage) is one ERROR line naming the file, with no traceback, no output file and no ``.done`` marker
left that a rerun could mistake for complete; the rerun, with space again, completes.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

import asrlib.io.atomic as atomic_io
import asrlib.io.stage as stage_io
from asrlib.cli import output_dirs, run_main
from asrlib.errors import AsrError
from asrlib.io.atomic import atomic_path
from asrlib.io.stage import dir_lock
from asrlib.io.tables import write_table
from asrlib.kaldi_io import MatrixReader, write_matrices
from helpers import make_toy_ctc_setup, toy_config_yaml, toy_dirs

ROOT = Path(__file__).resolve().parents[1]
ENV = {
    **{k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")},
    "PYTHONPATH": str(ROOT),
}


def _run(args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300, **kw)


def _error_line(res: subprocess.CompletedProcess) -> str:
    """The run's one ERROR line, which must be its last line of stderr, with no traceback anywhere."""
    lines = res.stderr.strip().splitlines()
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    assert [ln for ln in lines if ln.startswith("ERROR")] == lines[-1:], res.stderr[-3000:]
    return lines[-1]


def _listing(d: Path) -> dict:
    return {
        str(p.relative_to(d)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(d.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


# ------------------------------------------------------------------------------------------------ locks
def _lock_holder(d: Path) -> subprocess.Popen:
    """Another process holding dir_lock(d) until its stdin closes (or it is killed)."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom asrlib.io.stage import dir_lock\n"
            f"with dir_lock({str(d)!r}):\n    print('locked', flush=True)\n    sys.stdin.read()",
        ],
        cwd=ROOT,
        env=ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_dir_lock_is_exclusive_reentrant_and_names_its_holder(tmp_path):
    d = tmp_path / "exp"
    holder = _lock_holder(d)
    try:
        with pytest.raises(AsrError) as e:
            with dir_lock(d):
                pass
        msg = str(e.value)
        assert f"another run (pid {holder.pid} on " in msg and f"is writing {d} (lock {d / '.lock'})" in msg
        info = json.loads((d / ".lock").read_text())
        assert info["pid"] == holder.pid and "started" in info
        holder.send_signal(signal.SIGKILL)  # a killed holder leaves no stale lock
        holder.wait(30)
    finally:
        holder.kill()
        holder.wait()
    with dir_lock(d) as lock:
        assert lock == d.resolve() / ".lock" and json.loads(lock.read_text())["pid"] == os.getpid()
        with dir_lock(os.path.relpath(d)):  # the same directory again in this process: no self-deadlock
            pass
        assert stage_io._held[d.resolve()] == 1
    assert d.resolve() not in stage_io._held


def test_taking_the_lock_removes_temporaries_a_killed_run_left_but_not_another_steps(tmp_path):
    d = tmp_path / "exp"
    (d / "checkpoints").mkdir(parents=True)
    (d / "decode").mkdir()
    (d / "decode" / ".lock").touch()  # another step's directory: left alone
    keep = [d / "final.pt", d / "checkpoints" / "ckpt-10.pt", d / "decode" / ".hyp.txt.x1y2.tmp", d / ".hidden"]
    stale = [d / ".final.pt.ab12cd.tmp", d / "checkpoints" / ".latest.pt.9zq_w1.tmp"]
    with atomic_path(d / "done.txt") as t:  # the name atomic_path gives its temporaries
        stale.append(t)
    for p in keep + stale:
        p.write_text("x")
    with dir_lock(d):
        pass
    assert all(p.exists() for p in keep) and not any(p.exists() for p in stale)
    with dir_lock(d):  # nothing left to remove: nothing else changes
        pass
    assert all(p.exists() for p in keep)


def test_output_dirs_come_from_the_options_and_only_rank_0_of_torchrun_locks(monkeypatch):
    argv = ["--config", "c.yaml", "--out-dir", "o", "--exp-dir=e", "--set", "a.b=1"]
    assert output_dirs(argv) == [Path("o"), Path("e")]
    assert output_dirs(["--lang-dir", "L", "--out-dir", "o"], ("--lang-dir",)) == [Path("L")]
    assert output_dirs(["--out", "o"]) == []  # no abbreviations: `asr ... --out FILE` is not a directory
    assert output_dirs(["--num-learners", "2", "--", "--exp-dir", "e"]) == []  # steps.train_dist's learner args
    monkeypatch.setenv("RANK", "1")
    assert output_dirs(argv) == []
    monkeypatch.setenv("RANK", "0")
    assert output_dirs(argv) == [Path("o"), Path("e")]


def _entry_points(i: Path):
    """(module, arguments, the directory it writes into) for every stage entry point that writes."""
    c, d, f, lang = str(i / "c.yaml"), str(i / "data"), str(i / "fbank"), str(i / "lang")
    train = ["--config", c, "--data-dir", d, "--feats-dir", f, "--lang-dir", lang]
    return {
        "steps.compute_fbank": (["--config", c, "--data-dir", d + "/train", "--out-dir"], "fbank/train"),
        "steps.compute_cmvn": (["--feats", f + "/train/feats.scp", "--out-dir"], "fbank/train"),
        "steps.prepare_lang": (["--config", c, "--text", d + "/train/text", "--lang-dir"], "lang"),
        "steps.validate_data_dir": (["--data-dir"], "data/train"),
        "steps.train": ([*train, "--exp-dir"], "exp"),
        "steps.train_dist": (["--num-learners", "2", "--", *train, "--exp-dir"], "exp"),
        "steps.train_ce": (["--config", c, "--feats-dir", f, "--ali-dir", str(i / "ali"), "--exp-dir"], "exp_ce"),
        "steps.decode": (
            ["--config", c, "--method", "greedy", "--logprobs", str(i / "lp.scp"), "--lang-dir", lang, "--out-dir"],
            "exp/decode",
        ),
        "steps.export_mobile": ([*train[:2], "--model", str(i / "final.pt"), *train[2:], "--out-dir"], "exp/mobile"),
        "local.digits": (["--config", c, "--out-dir"], "data"),
    }


@pytest.mark.parametrize("module", list(_entry_points(Path("."))))
def test_every_writing_entry_point_refuses_while_its_directory_is_locked(tmp_path, module):
    args, target = _entry_points(tmp_path / "in")[module]
    out = tmp_path / target
    out.mkdir(parents=True)
    (out / "keep.txt").write_text("earlier output\n")
    before = _listing(out)
    with dir_lock(out):
        res = _run(["-m", module, *args, str(out)])
    assert res.returncode == 2, res.stderr[-3000:]
    prog = module.rsplit(".", 1)[1]
    assert _error_line(res).startswith(f"ERROR [{prog}]: another run (pid {os.getpid()} on "), res.stderr
    assert f"is writing {out} (lock {out.resolve() / '.lock'}); wait for it" in res.stderr
    assert _listing(out) == before and sorted(p.name for p in out.iterdir()) == [".lock", "keep.txt"]


def _wav_dir(root: Path, n: int = 3) -> Path:
    d = root / "data"
    (d / "wav").mkdir(parents=True)
    rows = []
    rng = np.random.default_rng(0)
    for i in range(n):
        p = d / "wav" / f"u{i}.wav"
        sf.write(p, (0.3 * rng.standard_normal(8000 + 1600 * i)).astype(np.float32), 16000, subtype="PCM_16")
        rows.append((f"u{i}", str(p)))
    write_table(d / "wav.scp", rows)
    (root / "c.yaml").write_text("features:\n  num_mel_bins: 23\n")
    return d


def _fbank_args(root: Path, out: Path):
    return ["--config", str(root / "c.yaml"), "--data-dir", str(root / "data"), "--out-dir", str(out), "--nj", "2"]


def test_a_second_run_of_a_stage_is_refused_and_a_rerun_after_the_holder_is_killed_works(tmp_path):
    _wav_dir(tmp_path)
    out = tmp_path / "fbank"
    holder = _lock_holder(out)
    try:
        res = _run(["-m", "steps.compute_fbank", *_fbank_args(tmp_path, out)])
        assert res.returncode == 2
        assert f"another run (pid {holder.pid} on " in _error_line(res)
        assert sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing written: no log, no features
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(30)
    finally:
        holder.kill()
        holder.wait()
    res = _run(["-m", "steps.compute_fbank", *_fbank_args(tmp_path, out)])
    assert res.returncode == 0, res.stderr[-3000:]
    assert (out / ".done").is_file() and len(MatrixReader(out / "feats.scp")) == 3


def test_learners_of_one_torchrun_job_share_one_lock_and_a_second_job_is_refused(tmp_path):
    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 16, "dev": 4})
    cfg = toy_config_yaml(tmp_path / "c.yaml", epochs=1)
    exp = tmp_path / "exp"
    cmd = [
        "-m",
        "steps.train_dist",
        "--num-learners",
        "2",
        "--threads-per-learner",
        "1",
        "--",
        "--config",
        str(cfg),
        "--set",
        "train.dist.algo=sync",
        "--set",
        "train.dist.straggler_rank=1",  # >= 1 s per step: the
        "--set",
        "train.dist.straggler_sleep=1.0",  # job outlives the check
        *toy_dirs(setup),
        "--exp-dir",
        str(exp),
    ]
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen([sys.executable, *cmd], cwd=ROOT, env=ENV, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while True:  # the launcher checks the lock and lets it go; then the learner with rank 0 takes it
            text = (exp / ".lock").read_text() if (exp / ".lock").is_file() else ""
            if text.strip() and json.loads(text)["pid"] != first.pid:
                break
            assert first.poll() is None and time.time() < deadline, (tmp_path / "first.log").read_text()[-3000:]
            time.sleep(0.1)
        holder = json.loads(text)
        assert "train.py" in holder["command"]  # a learner (steps.train) holds it
        second = _run(cmd)
        assert first.poll() is None, "the first job ended before the second was checked"
        assert second.returncode == 2, second.stderr[-3000:]
        assert f"another run (pid {holder['pid']} on " in _error_line(second)
        assert first.wait(300) == 0, (tmp_path / "first.log").read_text()[-3000:]
    finally:
        first.kill()
        first.wait()
        log.close()
    assert (exp / "final.pt").is_file() and (exp / ".train.done").is_file()
    assert (exp / "log" / "train.rank1.log").is_file()  # the other learner ran alongside, not locked out


# ------------------------------------------------------------------------------------------------ full disks
@pytest.fixture()
def full_disk_tmp_names(monkeypatch):
    """atomic_path's temporary file becomes a symlink to /dev/full (every write: ENOSPC from the kernel)."""
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    real = tempfile.mkstemp

    def mkstemp(prefix="", suffix="", dir=None):
        fd, path = real(prefix=prefix, suffix=suffix, dir=dir)
        os.unlink(path)  # the fd stays on the unlinked file (fchmod goes there, not to /dev/full)
        os.symlink("/dev/full", path)
        return fd, path

    monkeypatch.setattr(atomic_io.tempfile, "mkstemp", mkstemp)


@pytest.mark.parametrize("writer", ["text", "torch.save"])
def test_atomic_writes_on_a_full_disk_name_the_file_and_leave_nothing(tmp_path, full_disk_tmp_names, writer):
    dst = tmp_path / ("feats.scp" if writer == "text" else "latest.pt")
    with pytest.raises(AsrError, match=f"^no space left on device while writing {dst}; free some space"):
        if writer == "text":
            write_table(dst, [(f"u{i}", "x" * 100) for i in range(100)])
        else:  # a C++ writer: RuntimeError without errno, the probe finds ENOSPC
            with atomic_path(dst) as tmp:
                torch.save({"w": torch.zeros(100_000)}, tmp)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("rows", [1, 5000])  # the whole archive in the C++ stream's buffer (lost at close) / not
def test_kaldi_archive_on_a_full_disk_names_the_archive_and_leaves_nothing(tmp_path, rows):
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    ark = tmp_path / "feats.1.ark"
    os.symlink("/dev/full", tmp_path / f".tmp{os.getpid()}.feats.1.ark")  # the writer's temporary archive
    with pytest.raises(AsrError, match=f"^no space left on device while writing {ark}; free some space"):
        write_matrices(ark, [("u1", np.ones((rows, 80), np.float32))])
    assert list(tmp_path.iterdir()) == []
    assert write_matrices(ark, [("u1", np.ones((rows, 80), np.float32))]) == 1  # space again: it works
    assert MatrixReader(tmp_path / "feats.1.scp")["u1"].shape == (rows, 80)


def test_run_main_turns_only_disk_errors_into_one_line(capsys):
    def full(argv):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "exp/checkpoints/latest.pt")

    with pytest.raises(SystemExit) as e:
        run_main(full, [])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no space left on device while writing exp/checkpoints/latest.pt" in err

    def missing(argv):
        raise FileNotFoundError(errno.ENOENT, "No such file", "x")

    with pytest.raises(FileNotFoundError):  # not a disk problem: not hidden
        run_main(missing, [])


ENOSPC_AT_FSYNC = """
import errno, os, runpy
target, real_fsync = {target!r}, os.fsync
def fsync(fd):
    if target in os.path.basename(os.readlink(f"/proc/self/fd/{{fd}}")):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    real_fsync(fd)
os.fsync = fsync
runpy.run_module("steps.compute_fbank", run_name="__main__", alter_sys=True)
"""


def test_feature_stage_on_a_disk_that_fills_up_fails_cleanly_and_the_rerun_completes(tmp_path):
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to see which file is being written")
    _wav_dir(tmp_path)
    out = tmp_path / "fbank"
    # the disk fills up while writing job 1's archive (in a job process), then the table, then the marker
    for target in ("feats.1.ark", "feats.scp", ".done"):
        res = _run(["-c", ENOSPC_AT_FSYNC.format(target=target), *_fbank_args(tmp_path, out)])
        assert res.returncode == 2, res.stderr[-3000:]
        assert _error_line(res) == (
            f"ERROR [compute_fbank]: no space left on device while writing {out / target}; "
            f"free some space (or move the data/exp dirs to a bigger disk), then rerun "
            f"(finished steps are skipped)"
        )
        names = {p.name for p in out.iterdir()}
        assert target not in names and ".done" not in names, names
        assert not [n for n in names if ".tmp" in n], names  # no temporary file left behind
        if target == "feats.1.ark":  # job 1 is incomplete: neither its scp nor its marker exists
            assert not {"feats.1.scp", ".job.1.json", "feats.scp"} & names, names
    res = _run(["-m", "steps.compute_fbank", *_fbank_args(tmp_path, out)])
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((out / ".done").read_text())["num_utts"] == 3
    from asrlib.features.fbank import compute_fbank

    compute_fbank(tmp_path / "data", tmp_path / "ref", nj=2, num_mel_bins=23, show_progress=False, compress=True)
    ref = dict(MatrixReader(tmp_path / "ref" / "feats.scp"))
    got = dict(MatrixReader(out / "feats.scp"))
    assert got.keys() == ref.keys() and all(got[k].tobytes() == ref[k].tobytes() for k in ref)


def test_stale_temporaries_of_every_writer_are_removed_under_the_lock(tmp_path):
    from asrlib.io.stage import remove_stale_temps

    for name in (".x.ab12.tmp", ".tmp4242.logprobs.ark", ".tmp4242.cuts.jsonl.gz", "keep.ark", ".tmpfoo", ".lock"):
        (tmp_path / name).write_text("")
    removed = sorted(p.name for p in remove_stale_temps(tmp_path))
    assert removed == [".tmp4242.cuts.jsonl.gz", ".tmp4242.logprobs.ark", ".x.ab12.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", ".tmpfoo", "keep.ark"]
