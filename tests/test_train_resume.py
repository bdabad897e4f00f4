"""Training: learns the toy task; a run SIGKILLed mid-epoch, rerun, ends bit-identical to an uninterrupted run (batches
read by 2 DataLoader workers, the default; also with on-the-fly noise and frequency warping, whose draws come from the
checkpointed RNG, and with SpecAugment in the workers, seeded per batch); an utterance whose features turn unreadable is
skipped, listed, and training goes on."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import final_params as _params
from helpers import ROOT, make_toy_ctc_setup, toy_config_yaml, toy_dirs
from helpers import train_step as _train


def _survivors(exp: Path, wait: float = 10.0) -> list:
    """Processes still running with ``exp`` on their command line (a dead trainer's forked workers carry its
    command line), after up to ``wait`` seconds for them to go."""
    import time

    deadline = time.time() + wait
    while True:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1]
            except OSError:
                continue
            if str(exp) in cmd and state != "Z":
                found.append(int(pid))
        if not found or time.time() > deadline:
            return found
        time.sleep(0.5)


def test_a_killed_trainer_takes_its_loader_workers_with_it(tmp_path):
    """Batches larger than a pipe's buffer: a worker of a SIGKILLed trainer would block for ever on its pipe (the
    other worker holds the pipe's read end) and live on as an orphan; the workers die with the trainer instead."""
    setup = make_toy_ctc_setup(tmp_path / "toy", num_utts={"train": 40, "dev": 4}, feat_dim=400)
    cfg = toy_config_yaml(tmp_path / "c.yaml", feat_dim=400, batch_seconds=8.0)
    cmd = [
        sys.executable,
        "-m",
        "steps.train",
        "--config",
        str(cfg),
        *toy_dirs(setup),
        "--exp-dir",
        str(tmp_path / "exp"),
    ]
    with open(tmp_path / "out.txt", "w") as out:  # a file, not a pipe: orphans holding a pipe would block the wait
        rc = subprocess.run([*cmd, "--set", "train.kill_after_steps=2"], cwd=ROOT, stdout=out, stderr=out).returncode
    assert rc == -9, (tmp_path / "out.txt").read_text()[-2000:]
    assert _survivors(tmp_path / "exp") == [], "the killed trainer's loader workers live on"


@pytest.mark.parametrize(
    "augment",
    [{}, {"noise_prob": 0.5, "freq_warp": 0.1}, {"spec_augment_in": "loader", "freq_warp": 0.1}],
    ids=["specaug", "noise+warp", "specaug_in_workers"],
)
def test_killed_run_resumes_exactly(tmp_path, augment):
    setup = make_toy_ctc_setup(tmp_path / "toy")
    cfg = toy_config_yaml(tmp_path / "c.yaml", **augment)
    ref = _train(setup, cfg, tmp_path / "ref")
    assert ref.returncode == 0, ref.stderr
    # steps per epoch with this data is > 7: step 7 is mid-epoch and not a checkpoint step (every 3)
    killed = _train(setup, cfg, tmp_path / "res", "--set", "train.kill_after_steps=7")
    assert killed.returncode == -9, killed.stderr
    assert not (tmp_path / "res" / "final.pt").exists()
    assert (tmp_path / "res" / "checkpoints" / "latest.pt").is_file()
    resumed = _train(setup, cfg, tmp_path / "res")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stderr and "step 6" in resumed.stderr
    a, b = _params(tmp_path / "ref" / "final.pt"), _params(tmp_path / "res" / "final.pt")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # a finished stage is skipped; a changed setting is refused, not silently mixed
    again = _train(setup, cfg, tmp_path / "res")
    assert again.returncode == 0 and "skipping" in again.stdout
    changed = _train(setup, cfg, tmp_path / "res", "--set", "train.lr=0.5")
    assert changed.returncode == 2 and "other model/train settings" in changed.stderr


def test_unreadable_features_mid_epoch_are_skipped_listed_and_training_goes_on(tmp_path):
    from asrlib.io.tables import read_table_dict
    from asrlib.kaldi_io import read_scp

    setup = make_toy_ctc_setup(tmp_path / "toy")
    cfg = toy_config_yaml(tmp_path / "c.yaml", epochs=2)
    ark_offset = read_scp(setup / "fbank" / "train" / "feats.scp")
    victim = sorted(ark_offset)[17]
    ark, offset = ark_offset[victim].rsplit(":", 1)
    r = _train(setup, cfg, tmp_path / "exp", "--set", "train.kill_after_steps=2")  # the cut manifest is written
    assert r.returncode == -9, r.stderr
    with open(ark, "r+b") as f:  # then the archive is damaged under the running corpus, as a failing disk would
        f.seek(int(offset))
        f.write(b"\0" * 16)
    r = _train(setup, cfg, tmp_path / "exp")
    assert r.returncode == 0, r.stderr
    for epoch in (1, 2):
        skipped = read_table_dict(tmp_path / "exp" / "log" / f"skipped_epoch{epoch}.txt")
        assert list(skipped) == [victim] and ark in skipped[victim]
    assert "cuts skipped" in r.stderr and (tmp_path / "exp" / "final.pt").is_file()


def test_training_reduces_dev_loss_and_writes_logs(tmp_path):
    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 60, "dev": 10})
    cfg = toy_config_yaml(tmp_path / "c.yaml", epochs=6)
    r = _train(setup, cfg, tmp_path / "exp")
    assert r.returncode == 0, r.stderr
    import json

    m = json.loads((tmp_path / "exp" / "metrics.json").read_text())
    dev = [x["loss"] for x in m if x["kind"] == "dev"]
    # untrained, a 5-token CTC model scores about log(5) = 1.6 per frame
    assert len(dev) == 6 and dev[-1] < dev[0] and dev[-1] < 0.25
    assert (tmp_path / "exp" / "loss.png").stat().st_size > 1000
    assert (tmp_path / "exp" / "log" / "train.log").read_text().count("loss") > 3
    assert any((tmp_path / "exp" / "tensorboard").iterdir())
    # what made the run, beside it: the command, the resolved config, its seed, the machine and the time
    rec = json.loads((tmp_path / "exp" / "run.json").read_text())
    assert rec["command"][:3] == ["python", "-m", "steps.train"] and str(tmp_path / "exp") in rec["command"]
    assert rec["config"]["train"]["epochs"] == 6 and rec["seed"] == rec["config"]["train"]["seed"]
    assert rec["wall_s"] > 0 and rec["machine"]["cores"] >= 1 and len(rec["machine"]["load_avg_end"]) == 3
    assert rec["summary"]["epochs"] == 6 and rec["kind"] == "train"
    # the last epoch's checkpoint is latest.pt itself (linked, not written twice); earlier epochs are kept apart
    ck = tmp_path / "exp" / "checkpoints"
    assert os.path.samefile(ck / "epoch-6.pt", ck / "latest.pt")
    assert not os.path.samefile(ck / "epoch-5.pt", ck / "latest.pt")
    assert torch.load(ck / "epoch-5.pt", weights_only=True)["epoch"] == 5
    # killed after the last epoch's checkpoint, before its plot was drawn: the rerun draws it, the same bytes
    png = (tmp_path / "exp" / "loss.png").read_bytes()
    for name in ("loss.png", "final.pt", ".train.done", "metrics.json"):
        (tmp_path / "exp" / name).unlink()
    r = _train(setup, cfg, tmp_path / "exp")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "exp" / "loss.png").read_bytes() == png and (tmp_path / "exp" / "final.pt").is_file()


def test_link_checkpoint_replaces_only_its_own_path(tmp_path):
    from asrlib.train.checkpoint import link_checkpoint, load_checkpoint, save_checkpoint

    save_checkpoint(tmp_path / "epoch-1.pt", {"step": 1})
    link_checkpoint(tmp_path / "epoch-1.pt", tmp_path / "latest.pt")
    assert load_checkpoint(tmp_path / "latest.pt") == {"step": 1}
    save_checkpoint(tmp_path / "latest.pt", {"step": 2})  # a mid-epoch save after the link
    assert load_checkpoint(tmp_path / "epoch-1.pt") == {"step": 1}
    assert load_checkpoint(tmp_path / "latest.pt") == {"step": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-1.pt", "latest.pt"]  # no temporary left


@pytest.mark.parametrize("scale", [0.01, 100.0], ids=["within", "clipped"])
def test_clip_gradients_equals_torch_bit_for_bit(scale):
    from asrlib.train.trainer import clip_gradients

    torch.manual_seed(0)
    a, b = torch.nn.LSTM(8, 16, 2), torch.nn.LSTM(8, 16, 2)
    b.load_state_dict(a.state_dict())
    x = torch.randn(5, 3, 8) * scale
    for m in (a, b):
        (m(x)[0] ** 2).sum().mul(scale).backward()
    ref = torch.nn.utils.clip_grad_norm_(a.parameters(), 5.0)
    assert clip_gradients(b, 5.0) == float(ref) and (float(ref) > 5.0) == (scale > 1)
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(a.parameters(), b.parameters()))


def test_a_marker_from_before_a_new_setting_stays_complete_at_its_default(tmp_path):
    """A .train.done written before train.noise_prob and train.dist.overlap existed (they are missing from its
    fingerprint) still matches the same config with both at their defaults (no retraining after an upgrade); a
    non-default value for a missing setting, or a changed existing one, does not match."""
    from asrlib.config import RecipeConfig, load_config
    from asrlib.io.stage import is_done, mark_done
    from asrlib.train.trainer import train_fingerprint

    root = Path(__file__).resolve().parents[1]
    cfg = load_config(root / "recipes/digits/config.yaml")
    old = train_fingerprint(cfg)
    del old["train"]["noise_prob"], old["train"]["dist"]["overlap"]
    marker = tmp_path / ".train.done"
    mark_done(marker, {}, fingerprint=old)
    defaults = train_fingerprint(RecipeConfig())
    assert not is_done(marker, fingerprint=train_fingerprint(cfg))  # the strict comparison alone
    assert is_done(marker, fingerprint=train_fingerprint(cfg), defaults=defaults)
    now = train_fingerprint(cfg)
    now["train"].pop("init")  # either side may lack a default (steps.train left train.init out until 2026-11-24)
    assert is_done(marker, fingerprint=now, defaults=defaults)
    for change in ("train.noise_prob=0.5", "train.dist.overlap=true", "train.epochs=3"):
        changed = load_config(root / "recipes/digits/config.yaml", [change])
        assert not is_done(marker, fingerprint=train_fingerprint(changed), defaults=defaults), change


def test_a_finished_model_is_not_retrained_for_another_thread_count(tmp_path):
    """train.num_threads is how a run goes, not what it learns: a .train.done written with 1 thread (whose
    fingerprint still holds num_threads, as markers of older versions do) is complete when rerun with 2; any setting
    that changes the model still retrains."""
    from asrlib.config import load_config
    from asrlib.io.stage import mark_done
    from asrlib.train.trainer import is_trained, train_fingerprint

    root = Path(__file__).resolve().parents[1]
    one = load_config(root / "recipes/digits/config.yaml", ["train.num_threads=1"])
    two = load_config(root / "recipes/digits/config.yaml", ["train.num_threads=2"])
    assert train_fingerprint(one) == train_fingerprint(two)
    old = train_fingerprint(one)
    old["train"]["num_threads"] = 1  # a marker written before num_threads left the fingerprint
    marker = tmp_path / ".train.done"
    mark_done(marker, {}, fingerprint=old)
    assert is_trained(marker, train_fingerprint(two))
    more = load_config(root / "recipes/digits/config.yaml", ["train.num_threads=2", "train.epochs=3"])
    assert not is_trained(marker, train_fingerprint(more))


def test_a_finished_model_whose_marker_holds_a_retired_setting_is_not_retrained(tmp_path):
    """A train setting this version no longer has (RETIRED_TRAIN_KEYS, e.g. train.feature_cache_mb) is dropped
    from an old marker's fingerprint as it is from an old checkpoint's: the upgrade neither refuses nor retrains."""
    from asrlib.config import RETIRED_TRAIN_KEYS, load_config
    from asrlib.io.stage import mark_done
    from asrlib.train.trainer import is_trained, train_fingerprint

    cfg = load_config(Path(__file__).resolve().parents[1] / "recipes/digits/config.yaml")
    old = train_fingerprint(cfg)
    for key in RETIRED_TRAIN_KEYS:
        old["train"][key] = 256  # a marker written while the setting existed
    marker = tmp_path / ".train.done"
    mark_done(marker, {}, fingerprint=old)
    assert is_trained(marker, train_fingerprint(cfg))
    old["train"]["epochs"] += 1  # a setting that still counts: retrained
    mark_done(marker, {}, fingerprint=old)
    assert not is_trained(marker, train_fingerprint(cfg))
