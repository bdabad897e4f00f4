"""The synthetic digits corpus: determinism, speaker disjointness, manifests vs. data dirs, resuming."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import soundfile as sf

from asrlib.data.kaldi_dir import read_data_dir, validate_data_dir
from asrlib.errors import AsrError
from asrlib.io.tables import read_table_dict
from local.digits import SPLITS, WORDS, main, prepare_digits, split_counts

COUNTS = {"train": 12, "dev": 4, "test": 4}


def _wavs(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted((root / "wav").rglob("*.wav"))}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("digits") / "data"
    prepare_digits(out, seed=3, noise_fraction=0.5, nj=2, counts=COUNTS)
    return out


def test_same_seed_gives_identical_wavs_whatever_nj(corpus, tmp_path):
    again = tmp_path / "again"
    prepare_digits(again, seed=3, noise_fraction=0.5, nj=1, counts=COUNTS)
    a, b = _wavs(corpus), _wavs(again)
    assert len(a) == sum(COUNTS.values())
    assert a == b
    other = tmp_path / "other"
    prepare_digits(other, seed=4, noise_fraction=0.5, nj=2, counts={"dev": 4})
    assert set(_wavs(other).values()).isdisjoint(a.values())


def test_speakers_disjoint_and_both_engines_in_each_split(corpus):
    spk = {s: set(read_table_dict(corpus / s / "utt2spk").values()) for s in SPLITS}
    assert spk["train"].isdisjoint(spk["dev"]) and spk["train"].isdisjoint(spk["test"])
    assert spk["dev"].isdisjoint(spk["test"])
    rows = [ln.split() for ln in (corpus / "speakers.txt").read_text().splitlines() if not ln.startswith("#")]
    voices = {s: {(r[2], r[4] if r[2] == "espeak" else r[3]) for r in rows if r[0] == s} for s in SPLITS}
    for s in SPLITS:
        assert {e for e, _ in voices[s]} == {"espeak", "flite"}, s
    # the timbre (espeak variant / flite voice) of a dev or test speaker is never heard in training
    assert voices["train"].isdisjoint(voices["test"]) and voices["train"].isdisjoint(voices["dev"])
    assert sum(int(r[5]) for r in rows) == sum(COUNTS.values())


def test_data_dirs_valid_and_utt_ids_prefixed_by_speaker(corpus):
    for s in SPLITS:
        validate_data_dir(corpus / s)
        d = read_data_dir(corpus / s)
        assert len(d.utterances) == COUNTS[s]
        for utt, spk in d.utt2spk.items():
            assert utt.startswith(spk + "-")
            words = d.text[utt].split()
            assert 1 <= len(words) <= 7 and set(words) <= set(WORDS)
    assert (corpus / ".digits.done").is_file()


def test_manifests_parse_and_agree_with_data_dirs(corpus):
    from lhotse import CutSet, RecordingSet, SupervisionSet

    for s in SPLITS:
        m = corpus / "manifests"
        cuts = CutSet.from_file(m / f"digits_cuts_{s}.jsonl.gz")
        recs = RecordingSet.from_file(m / f"digits_recordings_{s}.jsonl.gz")
        sups = SupervisionSet.from_file(m / f"digits_supervisions_{s}.jsonl.gz")
        d = read_data_dir(corpus / s)
        assert sorted(c.id for c in cuts) == d.utterances == sorted(recs.ids) == sorted(sups.ids)
        noisy = 0
        for c in cuts:
            sup = c.supervisions[0]
            assert sup.text == d.text[c.id] and sup.speaker == d.utt2spk[c.id]
            assert c.recording.sources[0].source == d.wav[c.id]
            info = sf.info(d.wav[c.id])
            assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
            assert info.frames == c.recording.num_samples
            noisy += sup.custom["noise"] != "none"
        assert noisy == round(COUNTS[s] * 0.5)
        assert c.load_audio().shape == (1, c.recording.num_samples)


def test_resume_regenerates_only_missing_wavs(corpus, tmp_path):
    out = tmp_path / "resume"
    counts = {"dev": 4}
    prepare_digits(out, seed=3, noise_fraction=0.5, nj=1, counts=counts)
    wavs = sorted((out / "wav" / "dev").glob("*.wav"))
    original = wavs[0].read_bytes()
    wavs[0].unlink()
    os.utime(wavs[1], (1, 1))
    (out / ".digits.done").unlink()
    (out / ".digits.dev.done").unlink()
    prepare_digits(out, seed=3, noise_fraction=0.5, nj=1, counts=counts)
    assert wavs[0].read_bytes() == original
    assert wavs[1].stat().st_mtime == 1  # the complete wav was not synthesised again
    assert not list((out / "wav" / "dev").glob(".*.tmp"))
    assert _wavs(out) == {k: v for k, v in _wavs(corpus).items() if k.startswith("wav/dev/")}


def test_rerun_with_other_settings_is_refused(corpus):
    with pytest.raises(AsrError, match="other settings"):
        prepare_digits(corpus, seed=99, noise_fraction=0.5, nj=1, counts=COUNTS)
    cuts = prepare_digits(corpus, seed=3, noise_fraction=0.5, nj=1, counts=COUNTS)  # complete: skipped
    assert {s: len(c) for s, c in cuts.items()} == COUNTS


def test_bad_arguments_are_clear_errors(tmp_path):
    with pytest.raises(AsrError, match="noise-fraction"):
        prepare_digits(tmp_path, noise_fraction=1.5, counts={"dev": 2})
    with pytest.raises(AsrError, match="counts"):
        prepare_digits(tmp_path, counts={"valid": 2})


def test_train_scale_scales_train_alone_and_keeps_dev_and_test(corpus, tmp_path):
    assert split_counts(1.0) == {"train": 3000, "dev": 300, "test": 300}
    assert split_counts(0.5) == {"train": 1500, "dev": 150, "test": 150}
    assert split_counts(1.0, 1.5) == {"train": 4500, "dev": 300, "test": 300}
    assert split_counts(0.1, 1.5) == {"train": 450, "dev": 30, "test": 30}
    with pytest.raises(AsrError, match="train-scale"):
        split_counts(1.0, 0.0)
    bigger = tmp_path / "bigger"  # more training utterances: the dev set is the same, wav for wav
    prepare_digits(bigger, seed=3, noise_fraction=0.5, nj=2, counts={"train": 15, "dev": 4})
    dev = {k: v for k, v in _wavs(corpus).items() if k.startswith("wav/dev/")}
    assert dev and dev == {k: v for k, v in _wavs(bigger).items() if k.startswith("wav/dev/")}
    assert (bigger / "dev" / "text").read_text() == (corpus / "dev" / "text").read_text()


def test_cli_synthesises_only_the_splits_asked_for(tmp_path):
    """A larger test set of the same test voices (what bench/long_form.py's intervals need): --splits test."""
    out = tmp_path / "big"
    args = ["--out-dir", str(out), "--size", "0.01", "--seed", "5", "--nj", "1", "--splits", "test"]
    assert main(args) == 0
    assert sorted(p.name for p in (out / "wav").iterdir()) == ["test"]
    assert len((out / "test" / "text").read_text().splitlines()) == 3  # 300 x 0.01
    assert not (out / "train").exists() and not (out / "dev").exists()


def test_train_flite_share_changes_train_alone(corpus, tmp_path):
    """data.train_flite_share: more of the training set spoken by flite; dev and test stay wav for wav."""
    counts = {"train": 20, "dev": 4}
    more = tmp_path / "more"
    prepare_digits(more, seed=3, noise_fraction=0.5, nj=2, counts=counts, train_flite_share=0.6)
    base = tmp_path / "base"
    prepare_digits(base, seed=3, noise_fraction=0.5, nj=2, counts=counts)
    flite = lambda d: sum(u.startswith("flite") for u in read_table_dict(d / "train" / "text"))  # noqa: E731
    assert (flite(base), flite(more)) == (5, 12)  # 0.25 and 0.6 of 20
    dev = lambda d: {k: v for k, v in _wavs(d).items() if k.startswith("wav/dev/")}  # noqa: E731
    assert dev(more) and dev(more) == dev(base)
    with pytest.raises(AsrError, match="settings|train_flite_share"):  # the same folder, another share
        prepare_digits(more, seed=3, noise_fraction=0.5, nj=2, counts=counts)
    with pytest.raises(AsrError, match="train-flite-share"):
        prepare_digits(tmp_path / "bad", counts=counts, train_flite_share=1.0)


def test_cli_takes_data_overrides_of_the_config(tmp_path):
    """`--set data.KEY=V` (what run.sh --set passes to stage 1) changes what is synthesised, not silently nothing."""
    out = tmp_path / "o"
    cfg = Path(__file__).resolve().parents[1] / "recipes" / "digits" / "config.yaml"
    args = ["--config", str(cfg), "--set", "data.size=0.01", "--set", "data.train_scale=1.0", "--out-dir", str(out)]
    assert main([*args, "--nj", "1", "--splits", "dev"]) == 0
    assert len((out / "dev" / "text").read_text().splitlines()) == 3  # 300 x 0.01
    with pytest.raises(AsrError, match="--set needs --config"):
        main(["--set", "data.size=0.01", "--out-dir", str(tmp_path / "x")])  # --set without --config


def _flite_rows(out: Path, split: str) -> dict:
    rows = [r.split() for r in (out / "speakers.txt").read_text().splitlines()[1:]]
    return {r[1]: r for r in rows if r[0] == split and r[2] == "flite"}


def test_train_flite_shifts_and_f0_change_train_alone(tmp_path):
    """data.train_flite_shifts / train_flite_f0: other pseudo-talkers and pitches for the training flite voices;
    dev and test stay wav for wav, a folder made with other settings is refused, bad values are named."""
    counts = {"train": 48, "dev": 4}  # 12 flite utterances: every flite speaker speaks (round robin)
    base, other = tmp_path / "base", tmp_path / "other"
    prepare_digits(base, seed=3, noise_fraction=0.0, nj=2, counts=counts)
    prepare_digits(other, seed=3, noise_fraction=0.0, nj=2, counts=counts, train_flite_shifts=[0, 1000])
    variants = lambda d: {r[4].strip("-") for r in _flite_rows(d, "train").values()}  # noqa: E731
    assert variants(base) == {"", "down250", "up250", "up500"}
    assert variants(other) == {"", "up1000"}
    dev = lambda d: {k: v for k, v in _wavs(d).items() if k.startswith("wav/dev/")}  # noqa: E731
    assert dev(other) and dev(other) == dev(base)
    assert _flite_rows(other, "dev") == _flite_rows(base, "dev")
    with pytest.raises(AsrError, match="settings|train_flite_shifts"):
        prepare_digits(other, seed=3, noise_fraction=0.0, nj=2, counts=counts)
    for bad in ([], [0, 0], [2000]):
        with pytest.raises(AsrError, match="train_flite_shifts"):
            prepare_digits(tmp_path / "bad", counts=counts, train_flite_shifts=bad)

    higher = tmp_path / "higher"
    prepare_digits(higher, seed=3, noise_fraction=0.0, nj=2, counts=counts, train_flite_f0=[1.9, 2.0])
    assert dev(higher) == dev(base)
    wav = lambda d, u: sf.read(d / "wav" / "train" / f"{u}.wav")[0]  # noqa: E731
    flite_utts = [u for u in read_table_dict(base / "train" / "text") if u.startswith("flite")]
    assert flite_utts and all(len(wav(base, u)) != len(wav(higher, u)) or (wav(base, u) != wav(higher, u)).any()
                              for u in flite_utts)  # fmt: skip
    espeak = [u for u in read_table_dict(base / "train" / "text") if u.startswith("espeak")]
    assert all((wav(base, u) == wav(higher, u)).all() for u in espeak)  # espeak utterances do not change
    with pytest.raises(AsrError, match="train_flite_f0"):
        prepare_digits(tmp_path / "bad2", counts=counts, train_flite_f0=[2.0, 1.0])
