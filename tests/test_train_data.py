"""Training-data helpers: CTC feasibility, batching, augmentation; utterances too long for the memory budget or with
more tokens than the network has output frames are excluded, listed with the reason and counted in the log."""

import logging

import torch

from asrlib.config import ModelConfig
from asrlib.io.tables import read_table, write_table
from asrlib.models.lstm import build_model
from helpers import make_toy_ctc_setup
from asrlib.train.data import CtcDataset, Utterance, ctc_min_frames, freq_warp, make_batches, spec_augment


def test_ctc_min_frames_counts_blanks_between_repeats():
    assert ctc_min_frames([1, 2, 3]) == 3
    assert ctc_min_frames([1, 1, 2, 2, 2]) == 5 + 3


def test_batches_respect_budget_and_depend_only_on_seed_and_epoch():
    utts = [Utterance(f"u{i}", 50 + 7 * i, [1]) for i in range(40)]
    b = make_batches(utts, 1000, seed=1, epoch=0)
    assert sorted(u for x in b for u in x) == sorted(u.utt for u in utts)
    by = {u.utt: u.num_frames for u in utts}
    assert all(len(x) == 1 or max(by[u] for u in x) * len(x) <= 1000 for x in b)
    assert b == make_batches(utts, 1000, seed=1, epoch=0)
    assert b != make_batches(utts, 1000, seed=1, epoch=1)


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


def _alternating(n: int) -> str:
    """A transcript of ``n`` words whose tokens never repeat back to back (W1 = A, W2 = B): needs n CTC frames."""
    return " ".join(["W1", "W2"] * (n // 2) + ["W1"] * (n % 2))


def _ctc_loss(num_frames: int, token_ids) -> torch.Tensor:
    lp = torch.randn(num_frames, 1, 5).log_softmax(-1)
    return torch.nn.functional.ctc_loss(
        lp, torch.tensor([list(token_ids)]), torch.tensor([num_frames]), torch.tensor([len(token_ids)]), reduction="sum"
    )


def test_too_long_and_ctc_infeasible_utterances_are_excluded_listed_and_counted(tmp_path, caplog):
    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 6})
    feats, text_path = setup / "fbank" / "train" / "feats.scp", setup / "data" / "train" / "text"
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
    excluded = tmp_path / "excluded.txt"
    with caplog.at_level(logging.WARNING, logger="asrlib.train.data"):
        ds = CtcDataset(
            feats,
            text_path,
            setup / "lang",
            setup / "fbank" / "train" / "cmvn.scp",
            stack,
            excluded_path=excluded,
            max_frames=frames[longest] - 1,
        )  # the memory budget
    reasons = dict(read_table(excluded))
    assert sorted(reasons) == sorted([shortest, longest])
    assert reasons[longest] == f"too long: {frames[longest]} frames > max {frames[longest] - 1} (memory budget)"
    assert reasons[shortest].startswith(
        f"CTC infeasible: {out_frames[shortest] + 1} tokens need more than the {out_frames[shortest]} output frames"
    )
    assert sorted(u.utt for u in ds.utts) == sorted(set(frames) - {shortest, longest})
    assert any(f"excluded 2 of 6 utterances of {text_path}" in r.getMessage() for r in caplog.records)
    # the kept boundary case really is feasible for CTC on the network's output; one token more is not
    kept = ds.by_id[short2].token_ids
    assert len(kept) == out_frames[short2] and torch.isfinite(_ctc_loss(out_frames[short2], kept))
    assert torch.isinf(_ctc_loss(out_frames[short2], kept + [2 if kept[-1] == 1 else 1]))


def test_no_exclusions_writes_an_empty_list_and_logs_nothing(tmp_path, caplog):
    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 4})
    excluded = tmp_path / "excluded.txt"
    with caplog.at_level(logging.WARNING, logger="asrlib.train.data"):
        ds = CtcDataset(
            setup / "fbank" / "train" / "feats.scp",
            setup / "data" / "train" / "text",
            setup / "lang",
            setup / "fbank" / "train" / "cmvn.scp",
            3,
            excluded_path=excluded,
        )
    assert len(ds.utts) == 4 and excluded.is_file() and excluded.read_text() == ""
    assert not [r for r in caplog.records if "excluded" in r.getMessage()]


def test_keep_random_subset_is_seeded_and_all_when_not_smaller(tmp_path):
    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 8})

    def ds():
        return CtcDataset(
            setup / "fbank" / "train" / "feats.scp",
            setup / "data" / "train" / "text",
            setup / "lang",
            setup / "fbank" / "train" / "cmvn.scp",
            3,
        )

    full = [u.utt for u in ds().utts]
    subsets = []
    for seed in (1, 1, 2):
        d = ds()
        d.keep_random(3, seed)
        assert len(d.utts) == 3 and set(d.by_id) == {u.utt for u in d.utts} <= set(full)
        subsets.append([u.utt for u in d.utts])
    assert subsets[0] == subsets[1]  # the same seed, the same utterances
    assert any(_subset(ds, 3, s) != subsets[0] for s in range(2, 12))  # other seeds, other utterances
    for n in (0, 8, 20):  # 0 = all; not smaller than the set = all
        d = ds()
        d.keep_random(n, 1)
        assert [u.utt for u in d.utts] == full


def _subset(make, n, seed):
    d = make()
    d.keep_random(n, seed)
    return [u.utt for u in d.utts]


def test_preload_keeps_the_same_normalised_features_and_reads_no_archive_after(tmp_path):
    import numpy as np

    setup = make_toy_ctc_setup(tmp_path / "toy", {"train": 6})
    fb = setup / "fbank" / "train"

    def dataset():
        return CtcDataset(
            fb / "feats.scp", setup / "data" / "train" / "text", setup / "lang", fb / "cmvn.scp", 3, online_prior=50.0
        )

    ref, ds = dataset(), dataset()
    mb = ds.total_frames() * 20 * 4 / 2**20
    assert not ds.preload(mb / 2) and not ds.preload(0)  # too big for the budget / switched off: streamed
    assert ds.preload(mb * 2)

    class NoReads:
        def __getitem__(self, key):
            raise AssertionError(f"archive read for {key} after preload")

    ds.reader = NoReads()
    for u in ref.utts:
        assert np.array_equal(ds.features(u.utt), ref.features(u.utt))
