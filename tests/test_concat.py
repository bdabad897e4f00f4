"""Training cuts joined end to end (train.concat_prob, asrlib/train/concat.py): a batch is joined whole or not at
all; a joined cut's features are its parts' features one after the other and its targets their targets in order; no
audio is lost or repeated; the joins of a batch depend only on (seed, epoch, batch index), not on the loader
workers; dev batches and CE training are not joined; a training run with joins trains another model."""

import pytest
import torch

from asrlib.config import LoaderConfig
from asrlib.errors import AsrError
from asrlib.train.concat import ConcatCuts
from asrlib.train.loader import CtcTargets, SamplerSettings, epoch_cut_batches, open_set
from helpers import final_params, make_toy_ctc_setup, toy_config_yaml, train_step


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return make_toy_ctc_setup(tmp_path_factory.mktemp("toy"))


def _open(setup, prob=0.0, max_cuts=2, workers=0, targets=None):
    return open_set(
        setup / "fbank" / "train",
        targets or CtcTargets(setup / "lang", 3),
        setup / "fbank" / "train" / "cmvn.scp",
        loader=LoaderConfig(num_workers=workers),
        data_dir=setup / "data" / "train",
        concat=ConcatCuts(prob, max_cuts, seed=3) if prob else None,
    )


def _close(a, b):
    return torch.allclose(a, b, atol=1e-4)


def _epoch(ds, epoch=0, workers=None):
    """(id, features, targets) of every cut of an epoch's batches, as the trainer gets them."""
    s = SamplerSettings(max_duration=6.0, seed=0)
    out = []
    for b in ds.batches(ds.mixed(epoch_cut_batches(ds, s, epoch, 0), epoch, 0), workers):
        assert not b["skipped"], b["skipped"]
        ends = torch.cumsum(b["target_lens"], 0)
        for k, (u, x, n) in enumerate(zip(b["ids"], b["feats"], b["feat_lens"])):
            out.append((u, x[: int(n)].clone(), b["targets"][int(ends[k] - b["target_lens"][k]) : int(ends[k])]))
    return out


def test_joined_cuts_are_their_parts_in_order(setup):
    single = {u: (x, t) for u, x, t in _epoch(_open(setup))}
    joined = _epoch(_open(setup, prob=1.0, max_cuts=3))
    assert len(joined) < len(single)
    used = 0
    for u, x, t in joined:
        assert u in single  # a joined cut keeps its first part's id
        parts, at = [], 0
        while at < len(x):  # peel the parts off: each is a whole single cut (lhotse mixes the stored log-mel
            # tracks with silence: equal up to float rounding)
            nxt = [v for v, (y, _) in single.items() if len(y) <= len(x) - at and _close(y, x[at : at + len(y)])]
            assert nxt, f"{u}: frames {at}- are no single cut's"
            parts.append(nxt[0])
            at += len(single[nxt[0]][0])
        assert parts[0] == u and 1 <= len(parts) <= 3
        assert torch.equal(t, torch.cat([single[v][1] for v in parts]))
        used += len(parts)
    assert used == len(single)  # every cut once: the audio of the epoch is kept
    assert any(len(x) > max(len(y) for y, _ in single.values()) for _, x, _ in joined)


def test_a_joins_features_are_lhotses_mix_bit_for_bit_read_faster(setup):
    """joined_features mixes a join's tracks as lhotse's MixedCut.load_features does (the same bits, so training
    takes the same path), with the feature extractor built once; a cut that is not a plain join (a single cut, a
    track with an SNR) is left to lhotse."""
    import numpy as np

    from asrlib.train import concat
    from asrlib.train.loader import load_features

    cuts = list(_open(setup).cuts)[:4]
    two, three = cuts[0].append(cuts[1]), cuts[0].append(cuts[2]).append(cuts[3])
    overlapping = cuts[0].mix(cuts[1], offset_other_by=cuts[0].duration / 2)
    concat._extractor.cache_clear()
    for join in (two, three, overlapping):
        ours = concat.joined_features(join)
        assert ours is not None and np.array_equal(ours, join.load_features())
        assert np.array_equal(load_features(join, None), ours)
    assert concat._extractor.cache_info().misses == 1  # one extractor for all of them
    parts = np.concatenate([c.load_features() for c in (cuts[0], cuts[2], cuts[3])])
    assert np.allclose(concat.joined_features(three), parts, atol=1e-3)  # the parts one after the other
    noisy = cuts[0].mix(cuts[1], offset_other_by=cuts[0].duration, snr=10)
    assert concat.joined_features(cuts[0]) is None and concat.joined_features(noisy) is None
    assert np.array_equal(load_features(noisy, None), noisy.load_features())


def test_joins_depend_on_seed_epoch_batch_not_on_workers(setup):
    a = _epoch(_open(setup, prob=0.5))
    b = _epoch(_open(setup, prob=0.5, workers=2))
    assert [u for u, _, _ in a] == [u for u, _, _ in b]
    assert all(torch.equal(x, y) for (_, x, _), (_, y, _) in zip(a, b))
    n_single = len(_epoch(_open(setup)))
    assert n_single / 2 <= len(a) < n_single  # prob 0.5: some joined, not all
    # the same batch index of the same epoch and seed joins alike; another seed differs somewhere
    cuts = list(next(iter(epoch_cut_batches(_open(setup), SamplerSettings(max_duration=20.0, seed=0), 0, 0))))
    ids = lambda cs: [c.id for c in cs]  # noqa: E731
    assert ids(ConcatCuts(0.5, 2, 1)(cuts, 0, 5)) == ids(ConcatCuts(0.5, 2, 1)(cuts, 0, 5))
    assert any(ids(ConcatCuts(0.5, 2, s)(cuts, 0, 5)) != ids(ConcatCuts(0.5, 2, 1)(cuts, 0, 5)) for s in range(2, 9))
    assert ids(ConcatCuts(0.0, 2, 1)(cuts, 0, 5)) == ids(cuts)


def test_a_batch_is_joined_whole_or_not_at_all(setup):
    """So that a joined batch pads no more than a plain one: every cut of a joined batch is in a run of concat_max
    (the last run may be shorter), and about concat_prob of the batches are joined."""
    ds = _open(setup)
    s = SamplerSettings(max_duration=6.0, seed=0)
    plain = [list(b) for e in range(6) for b in epoch_cut_batches(ds, s, e, 0)]
    cc = ConcatCuts(0.5, 2, seed=1)
    joined_batches = 0
    for i, cuts in enumerate(plain):
        out = list(cc(cuts, 0, i))
        n = len(cuts)
        assert len(out) in (n, (n + 1) // 2), (n, len(out))
        joined_batches += len(out) < n
        assert max(c.duration for c in out) <= 2 * max(c.duration for c in cuts) + 1e-6
    assert 0.3 * len(plain) <= joined_batches <= 0.7 * len(plain), (joined_batches, len(plain))


def test_joining_is_part_of_what_a_training_stage_computed():
    from asrlib.config import RecipeConfig
    from asrlib.train.trainer import train_fingerprint

    cfg = RecipeConfig()
    cfg.train.concat_prob = 0.5
    assert train_fingerprint(cfg) != train_fingerprint(RecipeConfig())  # a changed setting retrains


def test_bad_settings_and_ce_targets_are_errors(setup):
    with pytest.raises(AsrError, match="concat_prob"):
        ConcatCuts(1.5, 2, 0)
    with pytest.raises(AsrError, match="concat_max"):
        ConcatCuts(0.5, 1, 0)

    class FrameTargets:  # not CtcTargets: CE's frame targets cannot follow a joined cut
        pass

    with pytest.raises(AsrError, match="CTC training only"):
        _open(setup, prob=0.5, targets=FrameTargets())


def test_training_with_joined_cuts(setup, tmp_path):
    cfg = toy_config_yaml(tmp_path / "c.yaml", batch_seconds=4.0)
    joined = train_step(setup, cfg, tmp_path / "joined", "--set", "train.concat_prob=1.0")
    assert joined.returncode == 0, joined.stderr
    plain = train_step(setup, cfg, tmp_path / "plain")
    assert plain.returncode == 0, plain.stderr
    a, b = final_params(tmp_path / "joined" / "final.pt"), final_params(tmp_path / "plain" / "final.pt")
    assert any(not torch.equal(a[k], b[k]) for k in a)
