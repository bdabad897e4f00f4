"""Training-data helpers: CTC feasibility, batching, augmentation."""
import torch

from asrlib.train.data import Utterance, ctc_min_frames, freq_warp, make_batches, spec_augment


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
