"""Parts of the training data path that a training run does not show on its own: the frequency warp's factors, the
noise augmentation's contiguous noise segment, per-speaker mean removal in the loader, the adaptation batches'
padded-frame budget, the loader's pipe widening where the platform has no fcntl, and the removal of
learners' stale checkpoint parts."""

import sys

import numpy as np
import torch

from asrlib.features.cmvn import Cmvn
from asrlib.train import augment, loader
from asrlib.train.noise_aug import NoiseAugment
from asrlib.train.speaker_adapt import pack_by_length


def test_freq_warp_stretches_and_compresses_within_max_warp():
    """On a ramp along the mel axis (bin j holds j) the warped bin j holds j x alpha, alpha the utterance's factor:
    every factor lies in [1 - max_warp, 1 + max_warp], and over 400 utterances both sides of 1 are drawn."""
    torch.manual_seed(0)
    d, max_warp = 40, 0.2
    x = torch.arange(d, dtype=torch.float32).expand(400, 3, d).contiguous()
    y = augment.freq_warp(x, max_warp)
    alpha = y[:, 0, 1:20] / torch.arange(1, 20, dtype=torch.float32)  # bins whose source stays inside the axis
    assert torch.allclose(alpha, alpha[:, :1].expand_as(alpha), atol=1e-5)  # one factor per utterance
    a = alpha[:, 0]
    assert (a >= 1 - max_warp - 1e-6).all() and (a <= 1 + max_warp + 1e-6).all()
    assert a.min() < 1 - 0.9 * max_warp and a.max() > 1 + 0.9 * max_warp  # the whole range, both ways


def test_noise_is_a_contiguous_stretch_of_the_bank():
    """Each noisy utterance gets frames t0, t0 + 1, ... of one bank noise (wrapping at its end), at one gain: 60 dB
    above the utterance the output is that stretch plus the gain, so a bank that rises 0.1 a frame shows it as
    steps of 0.1 (one step back at the wrap)."""
    t_bank, d = 50, 4
    bank = (0.1 * torch.arange(t_bank, dtype=torch.float32)).view(1, t_bank, 1).expand(1, t_bank, d).contiguous()
    cmvn = Cmvn(np.zeros(d, np.float32), np.ones(d, np.float32))
    aug = NoiseAugment(cmvn, 16000, d, prob=1.0, snr_min=-60.0, snr_max=-60.0, bank=bank)
    torch.manual_seed(3)
    x = torch.randn(6, 30, d)
    out = aug(x, torch.full((6,), 30))
    steps = torch.diff(out[:, :, 0], dim=1)
    wraps = (steps + 0.1 * (t_bank - 1)).abs() < 1e-3
    assert ((steps - 0.1).abs() < 1e-3).logical_or(wraps).all(), steps
    assert wraps.sum(dim=1).le(1).all()  # at most one wrap in 30 frames of a 50-frame noise


def test_speaker_mean_is_subtracted_before_the_global_cmvn(tmp_path):
    norm = loader.Normaliser(Cmvn(np.full(3, 1.0, np.float32), np.full(3, 2.0, np.float32)))
    norm.cmn = "speaker"
    norm.speaker_mean = {"spk": np.array([4.0, -2.0, 0.5], np.float32)}
    norm.utt2spk = {"u1": "spk"}
    cut = type("Cut", (), {"id": "u1", "supervisions": []})()
    feats = np.array([[5.0, 1.0, 2.5], [3.0, -4.0, 0.5]], np.float32)
    want = (feats - norm.speaker_mean["spk"] - 1.0) * 2.0
    np.testing.assert_allclose(norm(cut, feats), want, rtol=1e-6)


def test_adaptation_batches_keep_the_padded_frame_budget():
    """Longest x count <= the budget in every batch (one utterance over it alone is its own batch), every index
    once, lengths sorted within a batch."""
    lengths = [300, 120, 80, 80, 410, 95, 260, 50, 700, 130]
    batches = pack_by_length(lengths, max_padded_frames=500, seed=1)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert max(lengths[i] for i in b) * len(b) <= 500 or len(b) == 1, b
    assert len(batches) == 6  # shortest first, greedily: [50 80 80 95] [120 130] [260] [300] [410] [700]


def test_a_result_pipe_it_cannot_reach_is_left_and_its_size_unknown(monkeypatch):
    """No DataLoader worker queue on the iterator (one without workers), or no fcntl (off POSIX): size 0."""
    assert loader.widen_result_pipe(object(), 1 << 20) == 0
    monkeypatch.setitem(sys.modules, "fcntl", None)  # import fcntl raises ImportError
    assert loader.widen_result_pipe(object(), 1 << 20) == 0


def test_stale_learner_parts_of_checkpoints_are_removed(tmp_path):
    """After a checkpoint, rank 0 removes the learners' parts of steps no kept checkpoint names, and only those."""
    from asrlib.train.checkpoint import remove_rank_files, rank_file

    parts = {(s, r): rank_file(tmp_path, s, r) for s in (3, 6, 9) for r in (0, 1)}
    for p in parts.values():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
    remove_rank_files(tmp_path, [6, 9])
    assert {k for k, p in parts.items() if p.exists()} == {(6, 0), (6, 1), (9, 0), (9, 1)}
    remove_rank_files(tmp_path / "no-such-dir", [1])  # no parts written yet: nothing to do, no error
