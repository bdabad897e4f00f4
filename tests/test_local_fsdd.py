"""FSDD preparation: leave-one-speaker-out folds (dev = next speaker), the dataset's own 0-4 split, malformed and
unreadable files listed, speed perturbation only in train, per-speaker report — on fixtures and the real data."""

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asrlib.data.validate import clean_data_dir
from asrlib.errors import AsrError
from asrlib.io.tables import read_table_dict
from local.fsdd import WORDS, folds, prepare_fsdd, rotation_table

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "fsdd" / "recordings"
SPEAKERS = ("alice", "bob", "carol")


def _fixture(d: Path, indices=range(12)) -> Path:
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for spk in SPEAKERS:
        for digit in range(10):
            for i in indices:
                sf.write(
                    str(d / f"{digit}_{spk}_{i}.wav"),
                    (rng.standard_normal(1600) * 2000).astype(np.int16),
                    8000,
                    subtype="PCM_16",
                )
    return d


def _spk(d: Path) -> set:
    return {s.split("-")[-1] for s in read_table_dict(d / "utt2spk").values()}


def test_folds_rotate_dev_to_the_next_speaker():
    f = folds(["carol", "alice", "bob"])
    assert f == {
        "loso_alice": (["carol"], "bob", "alice"),
        "loso_bob": (["alice"], "carol", "bob"),
        "loso_carol": (["bob"], "alice", "carol"),
    }
    with pytest.raises(AsrError, match="at least 3 speakers"):
        folds(["alice", "bob"])


def test_fixture_folds_splits_and_exclusions(tmp_path):
    corpus = _fixture(tmp_path / "recordings")
    for bad in ("bad.wav", "3_alice.wav", "x_bob_1.wav"):
        sf.write(str(corpus / bad), np.zeros(100, np.int16), 8000)
    (corpus / "4_bob_99.wav").write_bytes(b"not audio at all")
    out = tmp_path / "data"
    fold_dirs = prepare_fsdd(corpus, out, sample_rate=8000)
    assert set(fold_dirs) == {"loso_alice", "loso_bob", "loso_carol", "split04"}
    excl = read_table_dict(out / "excluded.txt")
    assert set(excl) == {"bad.wav", "3_alice.wav", "x_bob_1.wav", "4_bob_99.wav"}
    assert excl["3_alice.wav"].startswith("malformed-name") and excl["4_bob_99.wav"].startswith("unreadable")
    d = out / "loso_alice"
    assert (_spk(d / "train"), _spk(d / "dev"), _spk(d / "test")) == ({"carol"}, {"bob"}, {"alice"})
    text = read_table_dict(d / "test" / "text")
    assert len(text) == 120 and text["alice-7_alice_3"] == "SEVEN"
    assert set(text.values()) == set(WORDS)
    # the dataset's own split: indices 0-4 test, 5-9 dev, the rest train; every speaker in each
    idx = lambda s: {int(u.rsplit("_", 1)[1]) for u in read_table_dict(out / s / "text")}  # noqa: E731
    assert (idx("test"), idx("dev"), idx("train")) == (set(range(5)), set(range(5, 10)), {10, 11})
    assert _spk(out / "test") == set(SPEAKERS)
    rep = clean_data_dir(out / "test", set(WORDS), expected_sample_rate=8000, min_duration=0.1)
    assert rep.num_kept == 150 and not rep.excluded


def test_speed_perturbation_only_in_train(tmp_path):
    corpus = _fixture(tmp_path / "recordings", indices=[0])
    out = tmp_path / "data"
    prepare_fsdd(corpus, out, speed_perturb=[0.9, 1.0, 1.1], sample_rate=8000)
    d = out / "loso_bob"
    train = read_table_dict(d / "train" / "utt2spk")
    assert len(train) == 30 and {"alice", "sp0.9-alice", "sp1.1-alice"} == set(train.values())  # dev carol
    assert not any(u.startswith("sp") for u in read_table_dict(d / "test" / "text"))
    assert not any(u.startswith("sp") for u in read_table_dict(d / "dev" / "text"))


def test_wrong_sample_rate_is_listed(tmp_path):
    corpus = _fixture(tmp_path / "recordings", indices=[0])
    with pytest.raises(AsrError, match="no usable FSDD recording"):
        prepare_fsdd(corpus, tmp_path / "data", sample_rate=16000)
    excl = read_table_dict(tmp_path / "data" / "excluded.txt")
    assert len(excl) == 30 and excl["0_alice_0.wav"].startswith("format: 8000 Hz")


def test_report_tables(tmp_path):
    corpus = _fixture(tmp_path / "recordings", indices=range(11))
    out = tmp_path / "data"
    prepare_fsdd(corpus, out, sample_rate=8000)
    exp = tmp_path / "exp"
    for fold in ("loso_alice", "loso_bob", "loso_carol", "split04"):
        d = out if fold == "split04" else out / fold
        ref = read_table_dict(d / "test" / "text")
        hyp = dict(ref)
        for u in sorted(hyp)[: {"loso_alice": 6, "loso_bob": 0, "loso_carol": 22, "split04": 3}[fold]]:
            hyp[u] = "ZERO" if ref[u] != "ZERO" else "ONE"
        p = exp / fold / "decode_test_tlg" / "hyp.txt"
        p.parent.mkdir(parents=True)
        p.write_text("".join(f"{u} {t}\n" for u, t in sorted(hyp.items())))
    text, numbers = rotation_table(out, exp, "tlg")
    assert numbers["loso"] == pytest.approx({"alice": 100 * (1 - 6 / 110), "bob": 100.0, "carol": 80.0})
    assert numbers["loso_mean"] == pytest.approx((94.545454 + 100 + 80) / 3) and numbers["loso_min"] == 80.0
    assert numbers["split04_all"] == pytest.approx(100 * (1 - 3 / 150))
    assert "| alice | bob | carol | 110 | 94.55 |" in text


@pytest.mark.skipif(not REAL.is_dir(), reason=f"real FSDD data not found at {REAL} (../shared/data)")
def test_real_fsdd(tmp_path):
    out = tmp_path / "data"
    fold_dirs = prepare_fsdd(REAL, out, sample_rate=8000)
    assert len(fold_dirs) == 6 and not (out / "excluded.txt").read_text()
    assert len(read_table_dict(out / "all" / "text")) == 2500
    assert len(read_table_dict(out / "test" / "text")) == 250
    for spk in ("george", "jackson", "lucas", "nicolas", "yweweler"):
        d = out / f"loso_{spk}"
        assert _spk(d / "test") == {spk} and len(read_table_dict(d / "train" / "text")) == 1500
    rep = clean_data_dir(out / "loso_lucas" / "test", set(WORDS), expected_sample_rate=8000, min_duration=0.1)
    assert rep.num_kept == 500, rep.summary()


def test_level_normalisation(tmp_path):
    corpus = _fixture(tmp_path / "recordings", indices=[0])
    x, sr = sf.read(str(corpus / "3_carol_0.wav"), dtype="int16")
    sf.write(str(corpus / "3_carol_0.wav"), (x // 16).astype(np.int16), sr)  # 24 dB quieter
    out = tmp_path / "data"
    prepare_fsdd(corpus, out, sample_rate=8000, level_db=-25.0)
    wav = read_table_dict(out / "all" / "wav.scp")
    assert Path(wav["carol-3_carol_0"]).parent == out / "wav_level"
    for utt in ("carol-3_carol_0", "alice-3_alice_0"):
        y, _ = sf.read(wav[utt])
        assert 20 * np.log10(np.sqrt(np.mean(y**2))) == pytest.approx(-25.0, abs=0.1)
    with pytest.raises(AsrError, match="level_db"):
        prepare_fsdd(corpus, tmp_path / "d2", sample_rate=8000, level_db=3.0)


def test_loso4_family(tmp_path):
    corpus = _fixture(tmp_path / "recordings", indices=range(7))
    out = tmp_path / "data"
    fold_dirs = prepare_fsdd(corpus, out, sample_rate=8000, families=["loso4"])
    assert set(fold_dirs) == {"loso4_alice", "loso4_bob", "loso4_carol"}
    d = out / "loso4_alice"
    assert (_spk(d / "train"), _spk(d / "dev"), _spk(d / "test")) == ({"bob", "carol"}, {"bob", "carol"}, {"alice"})
    idx = lambda s: {int(u.rsplit("_", 1)[1]) for u in read_table_dict(d / s / "text")}  # noqa: E731
    assert idx("train") == {5, 6} and idx("dev") == set(range(5))
    with pytest.raises(AsrError, match="fold families"):
        prepare_fsdd(corpus, tmp_path / "d2", sample_rate=8000, families=["loso5"])
