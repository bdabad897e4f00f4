"""The training data path (asrlib.train.loader): lazy cut manifests, lhotse's DynamicBucketingSampler, DataLoader
workers; CTC feasibility; augmentation. Utterances too long for the memory budget or with more tokens than the
network has output frames are excluded, listed with the reason and counted; unreadable features are skipped and
listed; a manifest line that does not parse names the file and line."""

import gzip
import logging

import numpy as np
import pytest
import torch

from asrlib.config import LoaderConfig, ModelConfig
from asrlib.data.cuts import CUTS_NAME, ensure_cuts, open_cuts
from asrlib.errors import AsrError
from asrlib.io.tables import read_table, write_table
from asrlib.kaldi_io import MatrixReader
from asrlib.models.lstm import build_model
from asrlib.train import loader as loader_module
from asrlib.train.augment import LoaderAugment, augments_in_loader, freq_warp, make_spec_augment, spec_augment
from asrlib.train.loader import (
    CtcTargets,
    SamplerSettings,
    ctc_min_frames,
    dev_cut_batches,
    epoch_cut_batches,
    open_set,
)
from helpers import make_audio_ctc_setup, make_toy_ctc_setup, spec_augment_masked_fill


def _set(setup, name="train", workers=0, loader=None, **kw):
    fb = setup / "fbank" / name
    return open_set(
        fb,
        CtcTargets(setup / "lang", 3, **kw),
        setup / "fbank" / "train" / "cmvn.scp",
        loader=loader or LoaderConfig(num_workers=workers),
        excluded_path=setup / f"excluded_{name}.txt",
        data_dir=setup / "data" / name,
    )


def _ids(batches):
    return [[c.id for c in b] for b in batches]


def test_ctc_min_frames_counts_blanks_between_repeats():
    assert ctc_min_frames([1, 2, 3]) == 3
    assert ctc_min_frames([1, 1, 2, 2, 2]) == 5 + 3


def test_sampler_batches_cover_every_cut_once_within_budget_and_depend_only_on_seed_and_epoch(tmp_path):
    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 40})
    ds = _set(setup)
    s = SamplerSettings(max_duration=2.0, seed=1, num_buckets=3)
    b0 = _ids(epoch_cut_batches(ds, s, 0, 0))
    frames = {k: int(v) for k, v in read_table(setup / "fbank" / "train" / "utt2num_frames")}
    assert sorted(u for b in b0 for u in b) == sorted(frames)  # every cut once
    assert all(len(b) == 1 or sum(frames[u] for u in b) <= 200 for b in b0)  # max_duration 2 s = 200 frames
    assert b0 == _ids(epoch_cut_batches(_set(setup), s, 0, 0))  # a fresh sampler: the same batches
    assert b0 != _ids(epoch_cut_batches(ds, s, 1, 0))  # another epoch: another order
    assert _ids(epoch_cut_batches(ds, s, 0, 3)) == b0[3:]  # resume: skip the batches done


def test_two_learners_get_as_many_batches_and_disjoint_cuts(tmp_path):
    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 41})
    ds = _set(setup)
    shards = [
        _ids(epoch_cut_batches(ds, SamplerSettings(max_duration=2.0, seed=3, world_size=2, rank=r), 0, 0))
        for r in (0, 1)
    ]
    assert len(shards[0]) == len(shards[1]) > 1
    seen = [u for sh in shards for b in sh for u in b]
    assert len(set(seen)) == 41  # everything once (lhotse splits the last batches; it duplicates only below 2 cuts)
    dev = [_ids(dev_cut_batches(ds, 2.0, r, 2)) for r in (0, 1)]
    assert sorted(u for d in dev for b in d for u in b) == sorted(seen)  # the dev share: exact, no duplicate
    # the trainer's one pass over the metadata: each learner's batch count, and the whole set's cuts and seconds
    for r in (0, 1):
        batches, n, seconds = _set(setup).census(SamplerSettings(max_duration=2.0, seed=3, world_size=2, rank=r))
        assert (batches, n) == (len(shards[r]), 41) and seconds == pytest.approx(_set(setup).stats()[1])


def test_loader_workers_run_at_the_configured_lower_priority(tmp_path, monkeypatch):
    import os

    from asrlib.train import loader as loader_mod

    getitem = loader_mod.BatchDataset.__getitem__

    def with_priority(self, cuts):
        return {**getitem(self, cuts), "nice": os.getpriority(os.PRIO_PROCESS, 0)}

    monkeypatch.setattr(loader_mod.BatchDataset, "__getitem__", with_priority)  # the forked workers inherit it
    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 8})
    s = SamplerSettings(max_duration=2.0, seed=0)
    base = os.getpriority(os.PRIO_PROCESS, 0)
    for nice in (0, 7):
        ds = _set(setup, loader=LoaderConfig(num_workers=2, worker_nice=nice, persistent_workers=False))
        got = {b["nice"] for b in ds.batches(epoch_cut_batches(ds, s, 0, 0))}
        assert got == {min(base + nice, 19)}, (nice, got)
    assert os.getpriority(os.PRIO_PROCESS, 0) == base  # the training process keeps its own


def test_workers_build_the_same_batches_as_the_training_process(tmp_path):
    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 12})
    s = SamplerSettings(max_duration=2.0, seed=0)
    runs = []
    for workers in (0, 2):
        ds = _set(setup, workers=workers)
        runs.append(list(ds.batches(epoch_cut_batches(ds, s, 0, 0))))
    assert len(runs[0]) == len(runs[1]) > 1
    for a, b in zip(*runs):
        assert a["ids"] == b["ids"] and torch.equal(a["feats"], b["feats"]) and torch.equal(a["targets"], b["targets"])
    # the features are the archive's, normalised by the global CMVN
    ds = _set(setup)
    first = runs[0][0]
    raw = MatrixReader(setup / "fbank" / "train" / "feats.scp")[first["ids"][0]]
    n = int(first["feat_lens"][0])
    assert np.allclose(first["feats"][0, :n].numpy(), ds.normalise.cmvn.apply(raw), atol=1e-6)


def test_spec_augment_in_the_workers_depends_on_the_batch_alone(tmp_path):
    """train.spec_augment_in: loader. A batch's masks are a function of (seed, epoch, rank, batch index): the same
    with 0 or 2 workers and when an epoch is resumed part-way; the training process's global RNG is left as it was."""
    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 12})
    s = SamplerSettings(max_duration=2.0, seed=0)

    def epoch(workers, augment, epoch=0, skip=0):
        ds = _set(setup, workers=workers)
        ds.set_augment(augment)
        out = list(ds.batches(ds.mixed(epoch_cut_batches(ds, s, epoch, skip), epoch, skip)))
        ds.close_workers()
        return out

    aug = LoaderAugment(make_spec_augment("ours", 0.1, 0), seed=3, rank=0)
    rng = torch.get_rng_state()
    plain, here, there = epoch(0, None), epoch(0, aug), epoch(2, aug)
    assert torch.equal(torch.get_rng_state(), rng)
    assert len(plain) == len(here) == len(there) > 3
    for p, a, b in zip(plain, here, there):
        assert p["ids"] == a["ids"] == b["ids"] and torch.equal(a["feats"], b["feats"])
        assert not torch.equal(a["feats"], p["feats"]) and (a["feats"] == 0).sum() > (p["feats"] == 0).sum()
    for a, b in zip(here[2:], epoch(2, aug, skip=2)):  # resumed after 2 batches
        assert a["ids"] == b["ids"] and torch.equal(a["feats"], b["feats"])
    other_rank = epoch(0, LoaderAugment(aug.augment, seed=3, rank=1))
    assert not any(torch.equal(a["feats"], b["feats"]) for a, b in zip(here, other_rank))


def test_spec_augment_runs_in_the_workers_only_when_asked_and_without_trainer_noise():
    assert augments_in_loader(True, "loader", noise_in_trainer=False)
    assert not augments_in_loader(True, "trainer", noise_in_trainer=False)
    assert not augments_in_loader(True, "loader", noise_in_trainer=True)  # the noise goes in before the masks
    assert not augments_in_loader(False, "loader", noise_in_trainer=False)
    with pytest.raises(AsrError, match="train.spec_augment_in must be one of loader, trainer, got 'workers'"):
        augments_in_loader(True, "workers", noise_in_trainer=False)


def test_the_pipe_from_the_workers_holds_a_whole_batch(tmp_path, monkeypatch):
    """Linux: the pipe that carries the workers' batches is widened to 1 MiB, so that a worker's batch is in it before
    the trainer asks (with 64 KiB, each read of a batch waits on the worker about ten times). Fails when torch's
    DataLoader iterator no longer has the queue that ``widen_result_pipe`` reaches for."""
    import fcntl
    from pathlib import Path

    max_size = Path("/proc/sys/fs/pipe-max-size")
    if not hasattr(fcntl, "F_GETPIPE_SZ") or not max_size.is_file():
        pytest.skip("pipe sizes are Linux's")
    if int(max_size.read_text()) < loader_module.RESULT_PIPE_BYTES:
        pytest.skip(f"{max_size} is below {loader_module.RESULT_PIPE_BYTES} on this machine")
    widen, sizes = loader_module.widen_result_pipe, []
    monkeypatch.setattr(loader_module, "widen_result_pipe", lambda it: sizes.append(widen(it)))
    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 8})
    ds = _set(setup, workers=2)
    batches = list(ds.batches(epoch_cut_batches(ds, SamplerSettings(max_duration=2.0, seed=0), 0, 0)))
    ds.close_workers()
    assert batches and sizes == [loader_module.RESULT_PIPE_BYTES]
    assert not list(ds.batches(iter([]), workers=0)) and len(sizes) == 1  # no workers, no pipe


def test_a_finished_training_leaves_no_loader_workers(tmp_path):
    """fit() shuts its persistent loader workers down: left to the garbage collector with the trainer's reference
    cycles, torch's shutdown often no longer reached them and waited 5 s for each before killing it."""
    import multiprocessing

    from helpers import toy_config_yaml, toy_trainer

    setup = make_toy_ctc_setup(tmp_path / "toy", num_utts={"train": 16, "dev": 4})
    t = toy_trainer(setup, toy_config_yaml(tmp_path / "c.yaml", epochs=1), tmp_path / "exp", torch.device("cpu"))
    t.tcfg.loader.num_workers = 2
    before = set(multiprocessing.active_children())
    t.fit()
    assert len(t.train_ds._loaders) == 0 and set(multiprocessing.active_children()) <= before
    assert next(iter(t.train_ds.batches(t.epoch_cuts(1, 0))))["ids"]  # the next use starts new workers
    t.train_ds.close_workers()  # (else they wait for the trainer's garbage collection, and 5 s each there)


def test_unreadable_features_are_skipped_and_reported(tmp_path):
    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 6})
    ds = _set(setup)
    cuts = list(open_cuts(ensure_cuts(setup / "fbank" / "train")))
    victim = cuts[2]
    ark = setup / "fbank" / "train" / "feats.ark"
    data = bytearray(ark.read_bytes())
    off = int(victim.features.storage_key)
    data[off : off + 40] = b"\0" * 40  # the matrix header of one utterance destroyed
    ark.write_bytes(bytes(data))
    out = list(ds.batches(epoch_cut_batches(ds, SamplerSettings(max_duration=100.0, seed=0), 0, 0)))
    ids = [u for b in out for u in b["ids"]]
    skipped = [r for b in out for r in b["skipped"]]
    assert victim.id not in ids and len(ids) == 5
    assert [u for u, _ in skipped] == [victim.id] and str(ark) in skipped[0][1]


def _alternating(n: int) -> str:
    """A transcript of ``n`` words whose tokens never repeat back to back (W1 = A, W2 = B): needs n CTC frames."""
    return " ".join(["W1", "W2"] * (n // 2) + ["W1"] * (n % 2))


def _ctc_loss(num_frames: int, token_ids) -> torch.Tensor:
    lp = torch.randn(num_frames, 1, 5).log_softmax(-1)
    return torch.nn.functional.ctc_loss(
        lp, torch.tensor([list(token_ids)]), torch.tensor([num_frames]), torch.tensor([len(token_ids)]), reduction="sum"
    )


def test_too_long_and_ctc_infeasible_utterances_are_excluded_and_listed(tmp_path):
    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 6})
    text_path = setup / "data" / "train" / "text"
    frames = {k: int(v) for k, v in read_table(setup / "fbank" / "train" / "utt2num_frames")}
    by_len = sorted(frames, key=lambda u: (frames[u], u))
    shortest, short2, longest = by_len[0], by_len[1], by_len[-1]
    assert frames[by_len[-2]] < frames[longest]
    stack = 3
    model = build_model(20, 5, ModelConfig(num_layers=1, hidden_size=8, proj_size=0, stack=stack))
    out_frames = {u: int(model.output_lengths(torch.tensor(frames[u]))) for u in (shortest, short2)}
    text = dict(read_table(text_path))
    text[shortest] = _alternating(out_frames[shortest] + 1)  # one token more than the network outputs frames
    text[short2] = _alternating(out_frames[short2])  # exactly as many: still feasible, must be kept
    write_table(text_path, text.items())
    ds = _set(setup, max_frames=frames[longest] - 1)  # the memory budget
    n, _ = ds.stats()
    assert n == 4 and ds.write_report() == 2
    reasons = dict(read_table(setup / "excluded_train.txt"))
    assert sorted(reasons) == sorted([shortest, longest])
    assert reasons[longest] == f"too long: {frames[longest]} frames > max {frames[longest] - 1} (memory budget)"
    assert reasons[shortest].startswith(
        f"CTC infeasible: {out_frames[shortest] + 1} tokens need more than the {out_frames[shortest]} output frames"
    )
    kept = [c for c in ds.usable_cuts() if c.id == short2][0]
    ids = ds.targets.targets(kept)  # the kept boundary case really is feasible for CTC; one token more is not
    assert len(ids) == out_frames[short2] and torch.isfinite(_ctc_loss(out_frames[short2], ids))
    assert torch.isinf(_ctc_loss(out_frames[short2], ids + [2 if ids[-1] == 1 else 1]))


def test_no_exclusions_writes_an_empty_list(tmp_path, caplog):
    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 4})
    ds = _set(setup)
    with caplog.at_level(logging.WARNING):
        assert ds.stats()[0] == 4 and ds.write_report() == 0
    assert (setup / "excluded_train.txt").read_text() == ""


def test_keep_random_subset_is_seeded_and_all_when_not_smaller(tmp_path):
    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 8})

    def subset(n, seed):
        d = _set(setup)
        d.keep_random(n, seed)
        return [c.id for c in d.usable_cuts()]

    full = subset(0, 1)
    assert len(full) == 8
    assert subset(3, 1) == subset(3, 1) and len(subset(3, 1)) == 3 and set(subset(3, 1)) <= set(full)
    assert any(subset(3, s) != subset(3, 1) for s in range(2, 12))  # other seeds, other utterances
    assert subset(8, 1) == full and subset(20, 1) == full


def test_manifest_line_that_does_not_parse_names_file_and_line(tmp_path):
    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 3})
    path = ensure_cuts(setup / "fbank" / "train", setup / "data" / "train")
    assert path.name == CUTS_NAME
    lines = gzip.open(path, "rt").read().splitlines()
    bad = tmp_path / "bad.jsonl.gz"
    with gzip.open(bad, "wt") as f:
        f.write("\n".join([lines[0], lines[1][:-20], lines[2]]) + "\n")
    with pytest.raises(AsrError, match=r"bad.jsonl.gz:2: not a lhotse manifest line"):
        list(open_cuts(bad))
    with pytest.raises(AsrError, match="does not exist"):
        open_cuts(tmp_path / "none.jsonl.gz")


def test_audio_missing_where_features_exist_is_a_clear_error_and_features_alone_give_cuts(tmp_path):
    """Features copied to another machine without their audio (a GPU node): the manifest names the missing file and
    says how to train from the features alone; without wav.scp the same features give cuts."""
    setup = make_audio_ctc_setup(tmp_path, {"train": 3})
    fb, data = setup / "fbank" / "train", setup / "data" / "train"
    first = sorted(read_table(data / "wav.scp"))[0]
    (tmp_path / "wav" / f"{first[0]}.wav").unlink()
    with pytest.raises(
        AsrError, match=rf"{first[0]}\.wav: cannot read the audio of utterance {first[0]} .*leave wav.scp"
    ):
        ensure_cuts(fb, data)
    (data / "wav.scp").unlink()
    cuts = list(open_cuts(ensure_cuts(fb, data)))
    assert [c.id for c in cuts] == sorted(u for u, _ in read_table(data / "text"))
    assert all(c.recording is None and c.load_features().shape[0] == c.features.num_frames for c in cuts)


def test_cut_manifest_is_rewritten_when_the_transcripts_change(tmp_path):
    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 3})
    fb, data = setup / "fbank" / "train", setup / "data" / "train"
    path = ensure_cuts(fb, data)
    text = dict(read_table(data / "text"))
    first = sorted(text)[0]
    text[first] = "W1 W2"
    write_table(data / "text", text.items())
    assert ensure_cuts(fb, data) == path
    assert [c.supervisions[0].text for c in open_cuts(path) if c.id == first] == ["W1 W2"]


def test_freq_warp_identity_and_range():
    x = torch.arange(80.0).repeat(3, 5, 1)
    assert torch.equal(freq_warp(x, 0.0), x)
    torch.manual_seed(0)
    y = freq_warp(x, 0.1)
    assert y.shape == x.shape
    assert torch.all(y[:, :, 1:] >= y[:, :, :-1])  # monotone warp of a ramp
    ratio = y[:, 0, 40] / 40.0
    assert torch.all((ratio > 0.89) & (ratio < 1.11)) and not torch.allclose(y, x)


def test_spec_augment_is_reproducible_from_the_global_rng():
    x = torch.randn(2, 100, 80)
    lens = torch.tensor([100, 60])
    torch.manual_seed(3)
    a = spec_augment(x, lens, max_warp=0.1)
    torch.manual_seed(3)
    b = spec_augment(x, lens, max_warp=0.1)
    assert torch.equal(a, b) and not torch.equal(a, x)


@pytest.mark.parametrize("max_warp", [0.0, 0.15])
def test_spec_augment_masks_are_the_masked_fill_bit_for_bit(max_warp):
    """The masks applied as products (faster) give the fill's values and its zeros' signs (no -0.0 from x * 0)."""
    x = torch.randn(6, 90, 40)
    x[2, 50:] = 0.0
    lens = torch.tensor([90, 80, 50, 90, 30, 90])
    for seed in range(5):
        torch.manual_seed(seed)
        got = spec_augment(x, lens, max_warp=max_warp)
        torch.manual_seed(seed)
        want = spec_augment_masked_fill(x, lens, max_warp)
        assert torch.equal(got, want) and torch.equal(torch.signbit(got), torch.signbit(want))
        assert int((got == 0).sum()) > int((x == 0).sum())  # something was masked
    assert not torch.signbit(got[got == 0]).any()


@pytest.mark.parametrize("impl", ["ours", "lhotse"])
def test_both_spec_augments_are_reproducible_from_the_checkpointed_rngs_and_leave_padding(impl):
    import random

    aug = make_spec_augment(impl, 0.0, 20)
    x = torch.randn(3, 120, 40)
    x[1, 70:] = 0.0  # padding of a shorter utterance
    lens = torch.tensor([120, 70, 120])
    outs = []
    for _ in range(2):
        torch.manual_seed(5), random.seed(5), np.random.seed(5)
        outs.append(aug(x, lens))
    assert torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], x)
    masked_bins = (outs[0] == outs[0][:, :1, :]).all(dim=1).sum()  # bins constant over time: frequency masks
    assert 1 <= masked_bins <= 3 * 2 * 10
    if impl == "lhotse":  # its time warp stays inside the utterance: the padding is not warped into it
        assert float(outs[0][1, 70:].abs().max()) < 1.0


def test_unknown_spec_augment_impl_is_a_clear_error():
    with pytest.raises(AsrError, match="spec_augment_impl"):
        make_spec_augment("torchaudio", 0.0, 80)


def test_lazy_speed_perturbation_adds_resampled_copies_without_writing_anything(tmp_path):
    """train.speed_perturb: every cut also at 0.9 and 1.1, features computed in the worker; no file written."""
    setup = make_audio_ctc_setup(tmp_path, {"train": 4})
    ds = open_set(
        setup / "fbank" / "train",
        CtcTargets(setup / "lang", 3),
        setup / "fbank" / "train" / "cmvn.scp",
        loader=LoaderConfig(num_workers=2),
        data_dir=setup / "data" / "train",
        speed_perturb=[0.9, 1.0, 1.1],
        fbank=(20, 16000),
        seed=1,
    )
    files = sorted(p.name for p in tmp_path.rglob("*"))
    batches = list(ds.batches(epoch_cut_batches(ds, SamplerSettings(max_duration=100.0, seed=0), 0, 0)))
    frames = {u: int(n) for b in batches for u, n in zip(b["ids"], b["feat_lens"])}
    utts = [f"spk{i % 2}-train-{i:03d}" for i in range(4)]
    assert sorted(frames) == sorted(u + sp for u in utts for sp in ("", "_sp0.9", "_sp1.1"))
    for u in utts:  # played slower: longer; faster: shorter (within a frame of the factor)
        assert abs(frames[f"{u}_sp0.9"] - frames[u] / 0.9) <= 2
        assert abs(frames[f"{u}_sp1.1"] - frames[u] / 1.1) <= 2
    assert sorted(p.name for p in tmp_path.rglob("*")) == files  # nothing written: no audio, no features
