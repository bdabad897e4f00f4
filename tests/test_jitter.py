"""Training cuts with their ends moved (train.boundary_jitter, asrlib/train/jitter.py): a moved cut is its own
frames, cut short or extended at each end by copies of its own outermost frames, never below what its CTC targets
need; the moves of a batch depend only on (seed, epoch, batch index), not on the loader workers; dev batches and CE
training are not moved; the setting is part of what a training stage computed; a killed run resumes exactly."""

import numpy as np
import pytest
import torch

from asrlib.config import LoaderConfig
from asrlib.errors import AsrError
from asrlib.train.batch_plan import BatchPlan
from asrlib.train.jitter import EDGE_FRAMES, BoundaryJitter, move_ends
from asrlib.train.loader import CtcTargets, SamplerSettings, epoch_cut_batches, open_set
from helpers import final_params, make_toy_ctc_setup, toy_config_yaml, train_step


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return make_toy_ctc_setup(tmp_path_factory.mktemp("toy"))


def _open(setup, seconds=0.0, workers=0, targets=None):
    return open_set(
        setup / "fbank" / "train",
        targets or CtcTargets(setup / "lang", 3),
        setup / "fbank" / "train" / "cmvn.scp",  # global CMVN only: frame by frame, so moved frames stay comparable
        loader=LoaderConfig(num_workers=workers),
        data_dir=setup / "data" / "train",
        jitter=BoundaryJitter(seconds, seed=3) if seconds else None,
    )


def _epoch(ds, epoch=0, workers=None):
    """{id: features} of an epoch's cuts, as the trainer gets them."""
    s = SamplerSettings(max_duration=6.0, seed=0)
    out = {}
    for b in ds.batches(ds.mixed(epoch_cut_batches(ds, s, epoch, 0), epoch, 0), workers):
        assert not b["skipped"], b["skipped"]
        for u, x, n in zip(b["ids"], b["feats"], b["feat_lens"]):
            out[u] = x[: int(n)].clone()
    return out


def test_move_ends_cuts_short_or_extends_with_the_cuts_own_edge_frames():
    f = np.arange(60, dtype=np.float32).reshape(20, 3)
    x = move_ends(f, -4, -3, min_frames=1)
    assert np.array_equal(x, f[4:17])
    x = move_ends(f, 7, 2, min_frames=1)
    assert len(x) == 29 and np.array_equal(x[7:27], f)
    assert np.array_equal(x[:7], np.concatenate([f[:EDGE_FRAMES], f[:2]]))  # the first frames, repeated
    assert np.array_equal(x[27:], f[-EDGE_FRAMES:][:2])
    assert np.array_equal(move_ends(f, -9, -8, min_frames=4), f)  # 3 frames left < 4: not moved
    assert np.array_equal(move_ends(f, -9, -7, min_frames=4), f[9:13])
    assert np.array_equal(move_ends(f, 0, 0, min_frames=1), f)


def test_moved_cuts_are_their_own_frames_within_the_bound(setup):
    plain = _epoch(_open(setup))
    moved = _epoch(_open(setup, seconds=0.05))  # up to 5 frames at each end
    assert moved.keys() == plain.keys()
    changed = 0
    for u, x in moved.items():
        y = plain[u]
        assert abs(len(x) - len(y)) <= 10
        # the frames the cut kept appear in it, in order: find the original's first kept frame
        starts = [s for s in range(-5, 6) if _kept_at(x, y, s)]
        assert starts, f"{u}: the moved cut is not its own frames"
        changed += len(x) != len(y) or not torch.equal(x, y)
    assert changed >= len(plain) // 2


def _kept_at(x, y, s):
    """``x`` = ``y`` moved by ``s`` frames at the start (> 0: added): the overlap is equal."""
    a, b = (x[s:], y) if s >= 0 else (x, y[-s:])
    n = min(len(a), len(b))
    return n > 5 and torch.allclose(a[: n - 5], b[: n - 5], atol=1e-5)


def test_moves_depend_on_seed_epoch_batch_not_on_workers(setup):
    a = _epoch(_open(setup, seconds=0.05))
    b = _epoch(_open(setup, seconds=0.05, workers=2))
    assert a.keys() == b.keys() and all(torch.equal(a[u], b[u]) for u in a)
    assert any(not torch.equal(a[u], x) for u, x in _epoch(_open(setup, seconds=0.05), epoch=1).items())
    cuts = list(next(iter(epoch_cut_batches(_open(setup), SamplerSettings(max_duration=20.0, seed=0), 0, 0))))
    m = BoundaryJitter(0.1, 1)(cuts, 0, 5)
    assert isinstance(m, BatchPlan) and m.seed is None and [c.id for c in m.cuts] == [c.id for c in cuts]
    assert m.moves == BoundaryJitter(0.1, 1)(cuts, 0, 5).moves
    assert all(-10 <= s <= 10 and -10 <= e <= 10 for s, e in m.moves)
    assert any(BoundaryJitter(0.1, k)(cuts, 0, 5).moves != m.moves for k in range(2, 6))
    many = [mv for i in range(20) for mv in BoundaryJitter(0.1, 1, "extend")(cuts, 0, i).moves]
    assert all(0 <= s <= 10 and 0 <= e <= 10 for s, e in many) and any(s > 0 for s, _ in many)
    many = [mv for i in range(20) for mv in BoundaryJitter(0.1, 1, "trim")(cuts, 0, i).moves]
    assert all(-10 <= s <= 0 and -10 <= e <= 0 for s, e in many) and any(s < 0 for s, _ in many)


def test_jitter_is_part_of_what_a_training_stage_computed():
    from asrlib.config import RecipeConfig
    from asrlib.train.trainer import train_fingerprint

    cfg = RecipeConfig()
    cfg.train.boundary_jitter = 0.2
    assert train_fingerprint(cfg) != train_fingerprint(RecipeConfig())


def test_bad_settings_and_ce_targets_are_errors(setup):
    with pytest.raises(AsrError, match="boundary_jitter"):
        BoundaryJitter(1.5, 0)
    with pytest.raises(AsrError, match="boundary_jitter_mode"):
        BoundaryJitter(0.1, 0, "sideways")

    class FrameTargets:  # not CtcTargets: CE's frame targets cannot follow a moved cut
        pass

    with pytest.raises(AsrError, match="CTC training only"):
        _open(setup, seconds=0.1, targets=FrameTargets())


def test_training_with_moved_ends_resumes_exactly(setup, tmp_path):
    cfg = toy_config_yaml(tmp_path / "c.yaml", batch_seconds=4.0)
    moved = ("--set", "train.boundary_jitter=0.1")
    ref = train_step(setup, cfg, tmp_path / "ref", *moved)
    assert ref.returncode == 0, ref.stderr
    killed = train_step(setup, cfg, tmp_path / "res", *moved, "--set", "train.kill_after_steps=4")
    assert killed.returncode == -9, killed.stderr
    resumed = train_step(setup, cfg, tmp_path / "res", *moved)
    assert resumed.returncode == 0 and "resumed from" in resumed.stderr, resumed.stderr
    a, b = final_params(tmp_path / "ref" / "final.pt"), final_params(tmp_path / "res" / "final.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    plain = train_step(setup, cfg, tmp_path / "plain")
    assert plain.returncode == 0, plain.stderr
    c = final_params(tmp_path / "plain" / "final.pt")
    assert any(not torch.equal(a[k], c[k]) for k in a)  # the moves reached the training batches
