"""Noise from a corpus mixed into the training cuts by lhotse (train.noise_cuts, asrlib/train/noise_mix.py): a folder
of audio at any rate or a lhotse manifest; the mix of a batch depends only on (seed, epoch, batch index), not on the
loader workers; ids and targets are kept, the features are those of the mixed audio; a killed run with noise mixing
resumes bit-identically; an unreadable noise file is an error naming it."""

import numpy as np
import pytest
import torch

from asrlib.config import LoaderConfig
from asrlib.data.noise_corpus import open_noise_corpus
from asrlib.errors import AsrError
from asrlib.train.loader import CtcTargets, SamplerSettings, epoch_cut_batches, open_set
from asrlib.train.noise_mix import NoiseMix
from helpers import final_params as _params
from helpers import make_audio_ctc_setup, toy_config_yaml, write_noise_dir
from helpers import train_step as _train


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return make_audio_ctc_setup(tmp_path_factory.mktemp("audio"))


def _open(setup, noise=None, workers=0):
    return open_set(
        setup / "fbank" / "train",
        CtcTargets(setup / "lang", 3),
        setup / "fbank" / "train" / "cmvn.scp",
        loader=LoaderConfig(num_workers=workers),
        data_dir=setup / "data" / "train",
        fbank=(20, 16000),
        noise_mix=noise,
    )


def _epoch(ds, epoch=0):
    s = SamplerSettings(max_duration=4.0, seed=0)
    out = {}
    for b in ds.batches(ds.mixed(epoch_cut_batches(ds, s, epoch, 0), epoch, 0)):
        assert not b["skipped"], b["skipped"]
        for u, x, n in zip(b["ids"], b["feats"], b["feat_lens"]):
            out[u] = x[: int(n)].clone()
    return out


def test_noise_corpus_from_a_folder_or_a_manifest(tmp_path):
    from lhotse import RecordingSet

    folder = write_noise_dir(tmp_path / "noise", (16000, 8000))
    cuts = open_noise_corpus(folder, 16000)
    assert len(cuts) == 2 and {c.sampling_rate for c in cuts} == {16000}
    assert all(c.load_audio().shape[1] == 48000 for c in cuts)  # the 8 kHz file resampled lazily, nothing written
    assert sorted(p.name for p in folder.iterdir()) == ["noise0_16000.wav", "noise1_8000.wav"]
    RecordingSet.from_dir(folder, "*.wav").to_file(tmp_path / "rec.jsonl.gz")
    assert len(open_noise_corpus(tmp_path / "rec.jsonl.gz", 16000)) == 2
    (folder / "broken.wav").write_bytes(b"RIFF not audio at all")
    with pytest.raises(AsrError, match="broken.wav"):
        open_noise_corpus(folder, 16000)
    with pytest.raises(AsrError, match="does not exist"):
        open_noise_corpus(tmp_path / "nowhere", 16000)
    (tmp_path / "junk.jsonl").write_text("{not json\n")
    with pytest.raises(AsrError, match="junk.jsonl"):
        open_noise_corpus(tmp_path / "junk.jsonl", 16000)


def test_mixed_batches_keep_ids_change_features_and_do_not_depend_on_workers(setup, tmp_path):
    folder = write_noise_dir(tmp_path / "noise")
    clean = _epoch(_open(setup))
    mixed = _epoch(_open(setup, NoiseMix(folder, 16000, 1.0, 0.0, 0.0, seed=1)))
    mixed2 = _epoch(_open(setup, NoiseMix(folder, 16000, 1.0, 0.0, 0.0, seed=1), workers=2))
    assert mixed.keys() == clean.keys() and len(clean) == 12
    for u in clean:
        assert abs(len(mixed[u]) - len(clean[u])) <= 1  # computed from the mixed audio: the same length
        n = min(len(mixed[u]), len(clean[u]))
        # noise at 0 dB SNR (white, or brown: its energy in the low bins) raises most frames' mean log-mel energy
        assert float((mixed[u][:n].mean(1) - clean[u][:n].mean(1)).median()) > 0.15
        assert torch.equal(mixed[u], mixed2[u])  # the same mix with 2 workers
    other_epoch = _epoch(_open(setup, NoiseMix(folder, 16000, 1.0, 0.0, 0.0, seed=1)), epoch=1)
    assert any(not torch.equal(other_epoch[u], mixed[u]) for u in clean)
    # prob 0: nothing mixed, the stored features as they are
    none = _epoch(_open(setup, NoiseMix(folder, 16000, 0.0, 0.0, 0.0, seed=1)))
    assert all(torch.equal(none[u], clean[u]) for u in clean)
    half = _epoch(_open(setup, NoiseMix(folder, 16000, 0.5, 10.0, 20.0, seed=1)))
    changed = sum(not torch.equal(half[u], clean[u]) for u in clean)
    assert 0 < changed < len(clean)
    with pytest.raises(AsrError, match="noise_snr_min <= train.noise_snr_max"):
        NoiseMix(folder, 16000, 0.5, 20.0, 10.0, seed=1)


def test_killed_run_with_noise_mixing_resumes_exactly(tmp_path, setup):
    folder = write_noise_dir(tmp_path / "noise")
    cfg = toy_config_yaml(tmp_path / "c.yaml", noise_cuts=str(folder), noise_cuts_prob=0.7, batch_seconds=3.0)
    ref = _train(setup, cfg, tmp_path / "ref")
    assert ref.returncode == 0, ref.stderr
    killed = _train(setup, cfg, tmp_path / "res", "--set", "train.kill_after_steps=4")
    assert killed.returncode == -9, killed.stderr
    resumed = _train(setup, cfg, tmp_path / "res")
    assert resumed.returncode == 0 and "resumed from" in resumed.stderr, resumed.stderr
    a, b = _params(tmp_path / "ref" / "final.pt"), _params(tmp_path / "res" / "final.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    clean = _train(setup, toy_config_yaml(tmp_path / "c0.yaml", batch_seconds=3.0), tmp_path / "clean")
    assert clean.returncode == 0, clean.stderr
    c = _params(tmp_path / "clean" / "final.pt")
    assert any(not torch.equal(a[k], c[k]) for k in a)  # the noise reached the training batches
    assert np.isfinite([float(v.abs().sum()) for v in a.values()]).all()
