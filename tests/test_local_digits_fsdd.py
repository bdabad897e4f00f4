"""digits+FSDD mixing: lhotse CutSet.mux with weights gives the expected synthetic share, repeats get their own ids,
dev/test stay FSDD-only; the rotation report gets the synthetic-voices column."""

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asrlib.data.corpus import write_tables
from asrlib.errors import AsrError
from asrlib.io.tables import read_table_dict
from local.digits_fsdd import mix_train


def _dir(root: Path, name: str, spk: str, n: int, word: str) -> Path:
    (root / "wav").mkdir(parents=True, exist_ok=True)
    wav, text, u2s = {}, {}, {}
    for i in range(n):
        p = root / "wav" / f"{name}{i}.wav"
        sf.write(str(p), (np.random.default_rng(i).standard_normal(800) * 1000).astype(np.int16), 8000)
        utt = f"{spk}-{i:03d}"
        wav[utt], text[utt], u2s[utt] = str(p), word, spk
    write_tables(root / name, wav, text, u2s)
    return root / name


@pytest.mark.parametrize("weights,share", [([0.75, 0.25], 0.25), ([0.5, 0.5], 0.5), ([1.0, 0.0], 0.0)])
def test_mix_weights_set_the_synthetic_share(tmp_path, weights, share):
    fsdd = _dir(tmp_path, "fsdd", "alice", 300, "SEVEN")
    synth = _dir(tmp_path, "synth", "espeak_en_m1", 40, "OH ONE")
    counts = mix_train(fsdd, synth, tmp_path / "mix", weights, 8000, seed=3)
    assert counts["fsdd"] == 300  # every FSDD utterance, once
    total = counts["fsdd"] + counts["synthetic"]
    assert counts["synthetic"] / total == pytest.approx(share, abs=0.06)
    text = read_table_dict(tmp_path / "mix" / "text")
    assert len(text) == total
    if share >= 0.5:  # 300 synthetic draws from 40 utterances: repeats, each with its own id and the same audio
        wav = read_table_dict(tmp_path / "mix" / "wav.scp")
        assert wav["espeak_en_m1-000_repeat1"] == wav["espeak_en_m1-000"]
        assert read_table_dict(tmp_path / "mix" / "utt2spk")["espeak_en_m1-000_repeat1"] == "espeak_en_m1"


def test_bad_weights(tmp_path):
    fsdd = _dir(tmp_path, "fsdd", "alice", 3, "SEVEN")
    with pytest.raises(AsrError, match="mix_weights"):
        mix_train(fsdd, fsdd, tmp_path / "m", [0.0, 1.0], 8000)


REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "fsdd" / "recordings"


@pytest.mark.skipif(not REAL.is_dir(), reason=f"real FSDD data not found at {REAL} (../shared/data)")
def test_real_fsdd_with_synthetic_digits(tmp_path):
    """The recipe's stage 1 on the real FSDD recordings (a tiny synthetic corpus: size 0.02 = 60 train utterances):
    every fold keeps all its FSDD training utterances, gets about the configured synthetic share, dev/test stay
    FSDD-only and speaker-disjoint, and test_synth holds only synthetic voices never heard in training."""
    from asrlib.config import DataConfig
    from asrlib.data.validate import clean_data_dir
    from local.digits_fsdd import prepare_digits_fsdd
    from local.fsdd import WORDS

    data = DataConfig(
        corpus="digits_fsdd", size=0.02, sample_rate=8000, mix_weights=[0.75, 0.25], level_db=-25.0, min_duration=0.1
    )
    out = tmp_path / "data"
    folds = prepare_digits_fsdd(REAL, out, data, nj=2)
    assert sorted(folds) == ["loso_george", "loso_jackson", "loso_lucas", "loso_nicolas", "loso_yweweler", "split04"]
    synth_test_voices = set(read_table_dict(out / "digits" / "test" / "utt2spk").values())
    synth_train_voices = set(read_table_dict(out / "digits" / "train" / "utt2spk").values())
    assert synth_test_voices and not synth_test_voices & synth_train_voices
    fsdd_speakers = {"george", "jackson", "lucas", "nicolas", "yweweler"}
    fsdd_folds = read_table_dict(out / "fsdd" / "folds.txt")
    for fold, d in folds.items():
        u2s = read_table_dict(d / "train" / "utt2spk")
        n_fsdd = len(read_table_dict(Path(fsdd_folds[fold]) / "train" / "text"))
        n_real = sum(1 for u in u2s if not u.startswith(("espeak", "flite")))
        assert n_real == n_fsdd, fold  # every FSDD training utterance, once
        assert (len(u2s) - n_real) / len(u2s) == pytest.approx(0.25, abs=0.05), fold
        test_spk = {s.split("-")[-1] for s in read_table_dict(d / "test" / "utt2spk").values()}
        dev_spk = {s.split("-")[-1] for s in read_table_dict(d / "dev" / "utt2spk").values()}
        assert test_spk <= fsdd_speakers and dev_spk <= fsdd_speakers
        if fold.startswith("loso_"):
            train_spk = {s.split("-")[-1] for s in u2s.values()}
            assert test_spk == {fold[5:]} and not test_spk & train_spk and not test_spk & dev_spk
        assert set(read_table_dict(d / "test_synth" / "utt2spk").values()) == synth_test_voices
    rep = clean_data_dir(folds["loso_nicolas"] / "train", set(WORDS), expected_sample_rate=8000, min_duration=0.1)
    assert rep.num_kept == len(read_table_dict(folds["loso_nicolas"] / "train" / "text")), rep.summary()
