"""Fbank extraction into Kaldi archives (vs lhotse), parallel jobs, exclusions, CMVN, step CLIs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
from lhotse import Fbank, FbankConfig

from asrlib.features.cmvn import Cmvn, accumulate_cmvn_stats, load_cmvn
from asrlib.features.fbank import compute_fbank, compute_fbank_job
from asrlib.errors import AsrError
from asrlib.io.tables import read_table, read_table_dict
from asrlib.kaldi_io import MatrixReader

SR = 16000


def _signal(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    x = 0.4 * np.sin(2 * np.pi * (200 + 300 * seed) * t) + 0.02 * rng.standard_normal(len(t))
    return x.astype(np.float32)


@pytest.fixture()
def data_dir(tmp_path):
    """5 good utterances (PCM16), one missing file, one float WAV with a NaN sample, one 8 kHz file."""
    d = tmp_path / "data"
    (d / "wav").mkdir(parents=True)
    rows = []
    for i, dur in enumerate([1.23, 0.5, 2.0, 0.81, 1.0]):
        p = d / "wav" / f"good{i}.wav"
        sf.write(p, _signal(dur, i), SR, subtype="PCM_16")
        rows.append(f"good{i} {p}\n")
    nan = _signal(1.0, 9)
    nan[5000] = np.nan
    sf.write(d / "wav" / "nan.wav", nan, SR, subtype="FLOAT")
    sf.write(d / "wav" / "rate.wav", _signal(1.0, 3)[:8000], 8000, subtype="PCM_16")
    rows += [
        f"missing {d / 'wav' / 'missing.wav'}\n",
        f"nanutt {d / 'wav' / 'nan.wav'}\n",
        f"rate8k {d / 'wav' / 'rate.wav'}\n",
    ]
    (d / "wav.scp").write_text("".join(rows))
    return d


def _all_feats(out_dir):
    return dict(MatrixReader(out_dir / "feats.scp"))


def test_fbank_matches_lhotse_and_excludes_bad_audio(data_dir, tmp_path):
    out1 = tmp_path / "fb1"
    res = compute_fbank(data_dir, out1, nj=1, show_progress=False, compress=False)
    assert (res.num_utts, res.num_excluded) == (5, 3)
    feats = _all_feats(out1)
    assert list(feats) == [f"good{i}" for i in range(5)]  # feats.scp sorted by utterance id
    lhotse_fbank = Fbank(FbankConfig(num_filters=80))
    frames = read_table_dict(out1 / "utt2num_frames")
    for i, dur in enumerate([1.23, 0.5, 2.0, 0.81, 1.0]):
        f = feats[f"good{i}"]
        assert f.shape == (round(dur * 100), 80) and f.dtype == np.float32 and np.isfinite(f).all()
        assert int(frames[f"good{i}"]) == len(f)
        audio, _ = sf.read(data_dir / "wav" / f"good{i}.wav", dtype="float32")
        assert np.array_equal(f, lhotse_fbank.extract(audio, SR))  # exactly lhotse's features
    excluded = dict(read_table(out1 / "excluded.txt"))
    assert set(excluded) == {"missing", "nanutt", "rate8k"}
    assert "cannot read audio" in excluded["missing"]
    assert "NaN/Inf" in excluded["nanutt"]
    assert "sample rate 8000" in excluded["rate8k"]

    out2 = tmp_path / "fb2"  # two jobs give identical archives' content
    compute_fbank(data_dir, out2, nj=2, show_progress=False, compress=False)
    feats2 = _all_feats(out2)
    assert list(feats2) == list(feats)
    assert all(feats2[k].tobytes() == feats[k].tobytes() for k in feats)
    assert (out2 / "feats.2.scp").is_file()
    assert (out2 / "excluded.txt").read_text() == (out1 / "excluded.txt").read_text()

    mtime = (out2 / "feats.1.ark").stat().st_mtime_ns  # a rerun reuses finished jobs ...
    (out2 / ".job.2.json").unlink()  # ... and redoes unfinished ones
    compute_fbank(data_dir, out2, nj=2, show_progress=False, compress=False)
    assert (out2 / "feats.1.ark").stat().st_mtime_ns == mtime and (out2 / ".job.2.json").is_file()
    compute_fbank(data_dir, out2, nj=1, show_progress=False, compress=False)  # fewer jobs: stale job files removed
    assert not (out2 / "feats.2.ark").exists() and _all_feats(out2).keys() == feats.keys()


def test_fbank_jobs_run_alone_then_merged_equal_one_run(data_dir, tmp_path):
    whole, split = tmp_path / "whole", tmp_path / "split"
    compute_fbank(data_dir, whole, nj=3, show_progress=False)
    for job in (3, 1, 2, 4):  # as separate cluster jobs, in any order
        compute_fbank_job(data_dir, split, job, nj=4)
    assert all((split / f".job.{j}.json").is_file() for j in (1, 2, 3, 4))
    mtimes = {p.name: p.stat().st_mtime_ns for p in split.glob("feats.*.ark")}
    compute_fbank(data_dir, split, nj=4, show_progress=False)  # the merge reuses every job
    assert {p.name: p.stat().st_mtime_ns for p in split.glob("feats.*.ark")} == mtimes
    a, b = _all_feats(whole), _all_feats(split)
    assert list(a) == list(b) and all(a[k].tobytes() == b[k].tobytes() for k in a)
    assert (split / "excluded.txt").read_text() == (whole / "excluded.txt").read_text()
    few = tmp_path / "few"  # more jobs than utterances: the jobs past the split write an empty marker, kept
    compute_fbank_job(data_dir, few, 9, nj=9)
    compute_fbank(data_dir, few, nj=9, show_progress=False)
    assert json.loads((few / ".job.9.json").read_text())["num_utts"] == 0 and _all_feats(few).keys() == a.keys()
    with pytest.raises(AsrError, match="job must be in 1..2"):
        compute_fbank_job(data_dir, few, 3, nj=2)


def test_fbank_segments_and_errors(data_dir, tmp_path):
    (data_dir / "segments").write_text("seg_a good2 0.0 0.75\nseg_b good2 0.5 -1\n")
    out = tmp_path / "fb"
    compute_fbank(data_dir, out, nj=2, show_progress=False, compress=False)
    feats = _all_feats(out)
    audio, _ = sf.read(data_dir / "wav" / "good2.wav", dtype="float32")
    ref = Fbank(FbankConfig(num_filters=80))
    assert np.array_equal(feats["seg_a"], ref.extract(audio[:12000], SR))
    assert np.array_equal(feats["seg_b"], ref.extract(audio[8000:], SR))
    (data_dir / "segments").write_text("seg_a nosuchrec 0 1\n")
    with pytest.raises(AsrError, match="not in"):
        compute_fbank(data_dir, out, nj=1, show_progress=False)
    (data_dir / "segments").unlink()
    (data_dir / "wav.scp").write_text("u1 sox x.wav -t wav - |\n")
    with pytest.raises(AsrError, match="plain file paths"):
        compute_fbank(data_dir, out, nj=1, show_progress=False)
    (data_dir / "wav.scp").write_text(f"u1 {tmp_path / 'none.wav'}\n")
    with pytest.raises(AsrError, match="all 1 utterances .* excluded"):
        compute_fbank(data_dir, tmp_path / "fb3", nj=1, show_progress=False)
    assert "u1 cannot read audio" in (tmp_path / "fb3" / "excluded.txt").read_text()


def test_cmvn_normalises_to_zero_mean_unit_variance(data_dir, tmp_path):
    out = tmp_path / "fb"
    compute_fbank(data_dir, out, nj=1, show_progress=False, compress=False)
    from steps.compute_cmvn import main as cmvn_main

    assert cmvn_main(["--feats", str(out / "feats.scp"), "--out-dir", str(out)]) == 0
    stats = MatrixReader(out / "cmvn.scp", double=True)["global"]
    all_feats = np.concatenate(list(_all_feats(out).values()))
    assert stats.shape == (2, 81) and stats[0, -1] == len(all_feats) and stats[1, -1] == 0
    assert np.array_equal(stats, accumulate_cmvn_stats(out / "feats.scp", show_progress=False))
    assert np.allclose(stats[0, :-1], all_feats.astype(np.float64).sum(0))
    normed = load_cmvn(out / "cmvn.scp").apply(all_feats)
    assert normed.dtype == np.float32
    assert np.abs(normed.mean(0)).max() < 1e-4 and np.abs(normed.std(0) - 1).max() < 1e-3
    const = Cmvn.from_stats(np.array([[2.0, 4.0, 2.0], [2.0, 10.0, 0.0]]))  # dim 0 constant: floored
    assert const[1] == 1 and np.allclose(const[0].inv_std, [1e5, 1.0]) and np.allclose(const[0].mean, [1, 2])
    with pytest.raises(AsrError):
        const[0].apply(np.zeros((3, 5), np.float32))


def test_steps_compute_fbank_done_marker(data_dir, tmp_path, capsys):
    from steps.compute_fbank import main

    cfg = tmp_path / "config.yaml"
    cfg.write_text("features:\n  num_mel_bins: 40\n  nj: 2\n")
    out = tmp_path / "fb"
    args = ["--data-dir", str(data_dir), "--out-dir", str(out), "--config", str(cfg), "--nj", "1"]
    assert main(args) == 0
    done = json.loads((out / ".done").read_text())
    assert done["num_utts"] == 5 and done["nj"] == 1 and done["settings"]["num_mel_bins"] == 40
    assert MatrixReader(out / "feats.scp")["good0"].shape == (123, 40)
    capsys.readouterr()
    assert main(args) == 0 and "skipping" in capsys.readouterr().out
    with pytest.raises(AsrError, match="delete"):
        main(args + ["--set", "features.num_mel_bins=80"])


def test_the_step_runs_the_jobs_of_one_dir_side_by_side_then_merges(data_dir, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from asrlib.cli import env_with_root

    root = Path(__file__).resolve().parents[1]
    cfg = tmp_path / "config.yaml"
    cfg.write_text("features:\n  num_mel_bins: 40\n")
    out = tmp_path / "fb"
    args = [sys.executable, "-m", "steps.compute_fbank", "--config", str(cfg), "--data-dir", str(data_dir)]
    args += ["--out-dir", str(out), "--nj", "2"]
    env = env_with_root(root)
    jobs = [subprocess.Popen([*args, "--job", j], env=env, stderr=subprocess.PIPE, text=True) for j in "12"]
    errs = [p.communicate()[1] for p in jobs]  # neither refuses the other (each locks only its own job)
    assert [p.returncode for p in jobs] == [0, 0], errs
    assert not (out / ".done").exists() and (out / ".job.2.json").is_file()
    r = subprocess.run(args, env=env, capture_output=True, text=True)
    assert r.returncode == 0 and json.loads((out / ".done").read_text())["num_utts"] == 5, r.stderr
    assert "fbank job 1 of 2 already complete" in (out / "log" / "compute_fbank.log").read_text()


def test_dither_is_seeded_per_utterance(data_dir, tmp_path):
    a = compute_fbank(data_dir, tmp_path / "a", nj=1, dither=0.01, show_progress=False, compress=False)
    compute_fbank(data_dir, tmp_path / "b", nj=2, dither=0.01, show_progress=False, compress=False)
    compute_fbank(data_dir, tmp_path / "c", nj=1, dither=0.0, show_progress=False, compress=False)
    fa, fb, fc = (_all_feats(tmp_path / d) for d in "abc")
    assert a.num_utts == 5
    assert all(np.array_equal(fa[k], fb[k]) for k in fa)  # same noise whatever nj is
    assert not any(np.array_equal(fa[k], fc[k]) for k in fa)  # but dither does change the features


def test_speaker_cmn_removes_each_speakers_mean(data_dir, tmp_path, capsys):
    """features.cmvn: speaker — Kaldi's compute-cmvn-stats --spk2utt + apply-cmvn --utt2spk (means only): stats
    per speaker in Kaldi's format, each utterance minus its own speaker's mean, the global stats over the result."""
    from asrlib.features.cmvn import compute_speaker_cmvn, open_features
    from asrlib.kaldi_io import write_matrices
    from steps.compute_cmvn import main as cmvn_main

    rng = np.random.default_rng(0)
    fb = tmp_path / "fb"  # speaker b: speaker a's features shifted by a constant (another channel/gain)
    base = {f"u{i}": rng.normal(0, 1, (20 + 5 * i, 4)).astype(np.float32) for i in range(4)}
    offset = np.array([3.0, -2.0, 0.5, 7.0], np.float32)
    write_matrices(fb / "feats.ark", [*base.items(), *((f"v{i}", m + offset) for i, m in enumerate(base.values()))])
    u2s = tmp_path / "utt2spk"
    u2s.write_text("".join(f"u{i} a\nv{i} b\n" for i in range(4)))
    stats = compute_speaker_cmvn(fb / "feats.scp", u2s, show_progress=False)
    assert sorted(stats) == ["a", "b"] and stats["a"].shape == (2, 5) and stats["a"][0, -1] == 110
    on_disk = MatrixReader(fb / "cmvn_spk.scp", double=True)
    assert np.array_equal(on_disk["b"], stats["b"]) and read_table(fb / "utt2spk")[0] == ("u0", "a")
    assert np.allclose(stats["b"][0, :-1] - stats["a"][0, :-1], 110 * offset, atol=1e-3)
    raw, normed = open_features(fb / "feats.scp"), open_features(fb / "feats.scp", cmn="speaker")
    assert np.array_equal(raw["v1"], base["u1"] + offset)  # raw reader: untouched
    for i in range(4):  # the channel offset is gone
        assert np.allclose(normed[f"u{i}"], normed[f"v{i}"], atol=1e-4) and normed[f"u{i}"].dtype == np.float32
    for spk in "uv":
        assert np.abs(np.concatenate([normed[f"{spk}{i}"] for i in range(4)]).mean(0)).max() < 1e-5
    # the step: train = speaker stats + global over the speaker-normalised features; a rerun is skipped
    (fb / "cmvn_spk.scp").unlink()
    args = ["--feats", str(fb / "feats.scp"), "--utt2spk", str(u2s), "--out-dir", str(fb)]
    assert cmvn_main(args) == 0 and (fb / "cmvn_spk.scp").is_file()
    glob = MatrixReader(fb / "cmvn.scp", double=True)["global"]
    assert np.abs(glob[0, :-1] / glob[0, -1]).max() < 1e-5  # mean of the normalised features: 0
    assert np.array_equal(glob, accumulate_cmvn_stats(fb / "feats.scp", False, cmn="speaker"))
    capsys.readouterr()
    assert cmvn_main(args) == 0 and "skipping" in capsys.readouterr().out
    assert cmvn_main(args[:2] + ["--out-dir", str(fb)]) == 0 and "recomputing" in capsys.readouterr().out  # mode
    # bad input: an utterance without a speaker; a feature dir without speaker stats
    u2s.write_text("u0 a\n")
    with pytest.raises(AsrError, match="no speaker for 7 utterance"):
        compute_speaker_cmvn(fb / "feats.scp", u2s, show_progress=False)
    (fb / "cmvn_spk.scp").unlink()
    with pytest.raises(AsrError, match="no per-speaker CMVN statistics .*compute_cmvn"):
        open_features(fb / "feats.scp", cmn="speaker")
    from asrlib.features.cmvn import check_cmvn_mode

    assert [check_cmvn_mode(m) for m in ("global", "speaker", "utterance", "online")] == [
        "",
        "speaker",
        "utterance",
        "online",
    ]
    with pytest.raises(AsrError, match="features.cmvn must be one of"):
        check_cmvn_mode("sliding")


def test_utterance_cmn(tmp_path, capsys):
    """features.cmvn: utterance — each recording minus its own mean (no statistics files); the global stats over
    the result, computed by steps.compute_cmvn --cmn utterance."""
    from asrlib.features.cmvn import open_features, utterance_cmn
    from asrlib.kaldi_io import write_matrices
    from steps.compute_cmvn import main as cmvn_main

    rng = np.random.default_rng(1)
    x = (rng.normal(0, 1, (30, 4)) + np.array([5.0, -3.0, 0.0, 9.0])).astype(np.float32)
    u = utterance_cmn(x)
    assert u.dtype == np.float32 and np.abs(u.mean(0)).max() < 1e-5 and np.allclose(x - u, x.mean(0), atol=1e-4)
    assert utterance_cmn(x[:0]).shape == (0, 4)
    write_matrices(tmp_path / "fb" / "feats.ark", [("a", x), ("b", x[:12] * 2)])
    assert np.array_equal(open_features(tmp_path / "fb" / "feats.scp", "utterance")["a"], u)
    with pytest.raises(AsrError, match="no mean normalisation 'sliding'"):
        open_features(tmp_path / "fb" / "feats.scp", "sliding")
    args = ["--feats", str(tmp_path / "fb" / "feats.scp"), "--cmn", "utterance", "--out-dir", str(tmp_path / "u")]
    assert cmvn_main(args) == 0
    glob = MatrixReader(tmp_path / "u" / "cmvn.scp", double=True)["global"]
    assert glob[0, -1] == 42 and np.abs(glob[0, :-1]).max() < 1e-3  # every utterance's mean removed
    sq = sum((utterance_cmn(m).astype(np.float64) ** 2).sum(0) for m in (x, x[:12] * 2))
    assert np.allclose(glob[1, :-1], sq, rtol=1e-5)
    capsys.readouterr()
    assert cmvn_main(args[:2] + ["--out-dir", str(tmp_path / "u")]) == 0
    assert "recomputing" in capsys.readouterr().out  # global only is another mode


def test_online_cmn_is_bit_for_bit_a_float64_running_sum_in_frame_order():
    """The trained models depend on these bits (a training batch's features go through it): online_cmn equals a
    plain float64 running sum taken frame by frame, divided and subtracted in float64, for whole utterances and
    chunks (a pairwise or float32 sum, which torch or numpy might pick for speed, would differ in the last bits)."""
    from asrlib.features.cmvn import online_cmn

    rng = np.random.default_rng(5)
    for frames in (1, 2, 33, 318, 1000):
        z = (rng.normal(0, 3, (frames, 80)) + rng.normal(0, 2, 80)).astype(np.float32)
        running, want = np.zeros(80, np.float64), np.empty_like(z)
        for t in range(frames):
            running = running + z[t].astype(np.float64)
            want[t] = (z[t].astype(np.float64) - running / (0.0 + (t + 1) + 50.0)).astype(np.float32)
        got, (s, n) = online_cmn(z, 50.0)
        assert got.dtype == np.float32 and np.array_equal(got, want) and np.array_equal(s, running) and n == frames
        half = frames // 2
        first, state = online_cmn(z[:half], 50.0)
        assert np.array_equal(np.concatenate([first, online_cmn(z[half:], 50.0, state)[0]]), want)


def test_online_cmn_is_causal_with_a_prior_and_chunks_exactly(tmp_path):
    """features.cmvn: online — after the global CMVN, frame t minus the running mean of frames 0..t that starts
    from the training mean (0) with the weight of P frames; chunked == whole; the config checks it."""
    from asrlib.config import load_config
    from asrlib.features.cmvn import Cmvn, online_cmn

    rng = np.random.default_rng(2)
    z = (rng.normal(0, 1, (40, 3)) + np.array([2.0, -1.0, 0.5])).astype(np.float32)
    out, (s, n) = online_cmn(z, 10.0)
    t = 17
    assert np.allclose(out[t], z[t] - z[: t + 1].astype(np.float64).sum(0) / (t + 1 + 10.0), atol=1e-6)
    assert n == 40 and np.allclose(s, z.astype(np.float64).sum(0))
    assert np.allclose(online_cmn(z, 0.0)[0][0], 0.0)  # no prior: the first frame is its own mean
    assert np.array_equal(online_cmn(z[:17], 10.0)[0], out[:17])  # causal: later frames change nothing
    state, parts = None, []
    for a, b in ((0, 5), (5, 6), (6, 40)):
        part, state = online_cmn(z[a:b], 10.0, state)
        parts.append(part)
    assert np.array_equal(np.concatenate(parts), out)
    assert online_cmn(z[:0], 10.0)[0].shape == (0, 3)
    cm = Cmvn(np.full(3, 1.0, np.float32), np.full(3, 0.5, np.float32), online_prior=10.0)
    assert np.allclose(cm.apply(z), online_cmn((z - 1.0) * 0.5, 10.0)[0], atol=1e-6)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("features: {cmvn: online, online_prior_frames: 20}\n")
    assert load_config(cfg).features.online_prior_frames == 20.0
    for bad, why in (
        ("features: {cmvn: sliding}", "features.cmvn must be one of"),
        ("features: {cmvn: online}\ntrain: {init: ce}", "GMM-HMM .* has no online CMN"),
        ("features: {cmvn: online, online_prior_frames: -1}", "must be >= 0"),
    ):
        cfg.write_text(bad + "\n")
        with pytest.raises(AsrError, match=why):
            load_config(cfg)


def test_fbank_defaults_are_the_configs():
    """One source of truth for the feature settings: compute_fbank's and FbankOptions' defaults are the config's
    (``features.*``, ``data.sample_rate``), ``features.compress`` included."""
    import dataclasses
    import inspect

    from asrlib.config import DataConfig, FeatureConfig
    from asrlib.features.fbank import FbankOptions

    config = {f.name: f.default for f in dataclasses.fields(FeatureConfig)}
    config["sample_rate"] = DataConfig.sample_rate
    params = inspect.signature(compute_fbank).parameters.values()
    defaults = {p.name: p.default for p in params if p.name in config}
    assert sorted(defaults) == ["compress", "dither", "nj", "num_mel_bins", "sample_rate"]
    assert defaults == {k: config[k] for k in defaults}
    options = dataclasses.asdict(FbankOptions())
    assert sorted(options) == ["compress", "dither", "num_mel_bins", "sample_rate"]
    assert options == {k: config[k] for k in options}


def test_compressed_features_are_a_quarter_of_float32_and_close(data_dir, tmp_path):
    """features.compress: Kaldi compressed matrices, read back by the same readers, within the quantisation step."""
    compute_fbank(data_dir, tmp_path / "f32", nj=1, show_progress=False, compress=False)
    compute_fbank(data_dir, tmp_path / "cm", nj=1, show_progress=False, compress=True)
    full, comp = _all_feats(tmp_path / "f32"), _all_feats(tmp_path / "cm")
    assert list(full) == list(comp)
    for k in full:
        assert comp[k].dtype == np.float32 and comp[k].shape == full[k].shape
        span = full[k].max(axis=0) - full[k].min(axis=0)  # per-column range: the 8-bit quantiser's scale
        assert (np.abs(comp[k] - full[k]) <= span / 64 + 1e-3).all()
    size = {d: sum(p.stat().st_size for p in (tmp_path / d).glob("feats.*.ark")) for d in ("f32", "cm")}
    assert size["cm"] <= 0.35 * size["f32"]
