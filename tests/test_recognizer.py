"""Recognizer (the Python API of `asr transcribe`): exact chunked front end and network, same words as the recipe's
decode stage, word times where the words are, long recordings, any rate / channel count, clear errors.

Most tests use a tiny LSTM-CTC trained in a few seconds on a tone task (tests/tone_model.py: each "phone" is a
pure tone), through the real feature, lang, train and decode code. Tests on the digits recipe's model run only when
recipes/digits/exp/lstm_ctc has finished training and decoding.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from asrlib.errors import AsrError
from asrlib.io.tables import read_table_dict
from asrlib.app.audio_input import fbank_stream, resample_stream
from asrlib.app.recognizer import Recognizer
from asrlib.app.word_times import _match_edit, align_words, token_runs
from helpers import concatenated_recordings, count_network_calls, longest_endpointer_call
from tone_model import SR, read_texts, synth_utterance, tone_model

ROOT = Path(__file__).resolve().parents[1]
DIGITS_EXP = ROOT / "recipes" / "digits" / "exp" / "lstm_ctc"


@pytest.fixture(scope="module")
def tm(tmp_path_factory):
    torch.set_num_threads(1)
    return tone_model(tmp_path_factory)


@pytest.fixture(scope="module")
def rec(tm):
    return Recognizer.from_dir(tm.exp)


# ------------------------------------------------------------------------------------------------ front end
@pytest.mark.parametrize("orig", [44100, 8000, 22050])
def test_streamed_resampling_equals_one_shot(orig):
    from lhotse.augmentation.resample import Resample

    rng = np.random.default_rng(1)
    x = rng.normal(0, 0.1, orig * 3 + 137).astype(np.float32)
    whole = Resample(orig, SR)(torch.from_numpy(x)).numpy()
    blocks = [x[i : i + 5003] for i in range(0, len(x), 5003)]  # odd block sizes, unrelated to the period
    streamed = np.concatenate(list(resample_stream(iter(blocks), orig, SR, block_hint=orig // 3)))
    assert streamed.shape == whole.shape
    np.testing.assert_allclose(streamed, whole, atol=1e-6)


@pytest.mark.parametrize("n", [400, 401, 160 * 37 + 80, 160 * 37 + 79, 16000 * 2 + 1234])
def test_chunked_fbank_equals_whole_utterance_fbank(n):
    from asrlib.features.fbank import FbankExtractor, FbankOptions

    fb = FbankExtractor(FbankOptions(num_mel_bins=24)).fbank
    x = np.random.default_rng(n).normal(0, 0.1, n).astype(np.float32)
    whole = np.asarray(fb.extract(x, SR))
    blocks = [x[i : i + 997] for i in range(0, n, 997)]
    chunked = np.concatenate(list(fbank_stream(iter(blocks), lambda s: np.asarray(fb.extract(s, SR)), 7)))
    assert chunked.shape == whole.shape == ((n + 80) // 160, 24)
    np.testing.assert_allclose(chunked, whole, atol=1e-5)


# ------------------------------------------------------------------------------------------------ network
def _whole_log_probs(model_path: Path, x: np.ndarray, num_mel_bins: int) -> np.ndarray:
    from asrlib.features.fbank import FbankExtractor, FbankOptions
    from asrlib.models.saved import load_model

    feats = FbankExtractor(FbankOptions(num_mel_bins=num_mel_bins, sample_rate=SR)).features(x)
    return load_model(model_path).log_probs(feats)


def test_chunked_log_probs_equal_one_pass(tm, tmp_path):
    """LSTM state carried across 0.37 s chunks gives the log-probs of one pass over the whole recording — for the
    trained model (torch.nn.LSTM layers) and for an untrained peephole LSTMP (the explicit-cell layers)."""
    from asrlib.config import ModelConfig
    from asrlib.models.lstm import build_model
    from asrlib.models.saved import save_model

    rng = np.random.default_rng(3)
    x = np.concatenate([synth_utterance(["W1", "W4", "W2"], rng)[0] for _ in range(3)])
    rec = Recognizer.from_dir(tm.exp, chunk_seconds=0.37)
    np.testing.assert_allclose(rec.log_probs(x, SR), _whole_log_probs(tm.exp / "final.pt", x, 24), atol=2e-5)

    torch.manual_seed(0)
    model = build_model(24, 5, ModelConfig(num_layers=2, hidden_size=16, proj_size=8, peephole=True, stack=3))
    exp = tmp_path / "peep"
    save_model(exp / "final.pt", model.eval(), np.zeros(24), np.full(24, 0.2), info={"lang_dir": str(tm.lang)})
    rec2 = Recognizer.from_dir(exp, chunk_seconds=0.37)
    lp = rec2.log_probs(x, SR)
    assert lp.shape == (len(x) // 160 // 3, 5)  # (N + 80) // 160 fbank frames, 3 per output frame
    np.testing.assert_allclose(lp, _whole_log_probs(exp / "final.pt", x, 24), atol=2e-5)


def test_bidirectional_model_runs_in_overlapping_windows(tm, tmp_path):
    from asrlib.config import ModelConfig
    from asrlib.app.model_dir import _WholeRecordingStream
    from asrlib.models.lstm import build_model
    from asrlib.models.saved import load_model, save_model

    torch.manual_seed(0)
    model = build_model(24, 5, ModelConfig(num_layers=1, hidden_size=16, proj_size=0, stack=3, bidirectional=True))
    save_model(tmp_path / "bi" / "final.pt", model.eval(), np.zeros(24), np.ones(24), info={"lang_dir": str(tm.lang)})
    x = np.random.default_rng(0).normal(0, 0.1, 3 * SR).astype(np.float32)
    rec = Recognizer.from_dir(tmp_path / "bi", chunk_seconds=0.5)
    whole = _whole_log_probs(tmp_path / "bi" / "final.pt", x, 24)
    np.testing.assert_allclose(rec.log_probs(x, SR), whole, atol=2e-5)  # short: one pass, exact
    feats = rec._fbank(x)
    stream = _WholeRecordingStream(load_model(tmp_path / "bi" / "final.pt"), window=20, context=8)
    for i in range(0, len(feats), 50):
        assert stream.accept(feats[i : i + 50]).shape[0] == 0
    windowed = stream.finish()
    assert windowed.shape == whole.shape and np.isfinite(windowed).all()  # approximate at window edges
    assert not np.allclose(windowed, whole, atol=1e-3)  # (really windowed)


def _distance_to_a_cut(num_frames: int, window: int, context: int) -> np.ndarray:
    """Per output frame, how many frames lie between it and the nearest end of its window's input that cuts the
    recording (a window's input reaching the recording's start or end is not cut there)."""
    dist = np.full(num_frames, num_frames)
    for s in range(0, num_frames, window):
        e = min(s + window, num_frames)
        a, b = max(0, s - context), min(num_frames, e + context)
        for t in range(s, e):
            dist[t] = min(t - a if a > 0 else num_frames, b - 1 - t if b < num_frames else num_frames)
    return dist


def test_overlapping_windows_match_the_whole_utterance_away_from_the_window_edges():
    """The windows of a bidirectional model (_WholeRecordingStream) give each frame the log-probs of one pass over
    the whole recording, up to the state the network would have carried in from beyond its window's context: an
    error that decays with the frame's distance from the nearest cut (measured: 2e-3 at 8 frames, 5e-5 at 16, 1e-6
    from 23 on) and with the context. A window whose outputs were taken from the wrong place (the context offset
    dropped, off by one) is wrong by the difference of frames apart, 1e-2 and more."""
    from asrlib.app.model_dir import _WholeRecordingStream
    from asrlib.config import ModelConfig
    from asrlib.features.fbank import FbankExtractor, FbankOptions
    from asrlib.models.lstm import build_model
    from asrlib.models.saved import SavedModel

    torch.manual_seed(0)
    model = build_model(24, 5, ModelConfig(num_layers=1, hidden_size=16, proj_size=0, stack=3, bidirectional=True))
    x = np.random.default_rng(0).normal(0, 0.1, 3 * SR).astype(np.float32)
    feats = FbankExtractor(FbankOptions(num_mel_bins=24, sample_rate=SR)).features(x)
    saved = SavedModel(model.eval(), feats.mean(0), 1 / feats.std(0))  # network inputs of unit scale
    whole = saved.log_probs(feats)
    assert len(whole) == 100
    errors = {}
    calls = []
    one_pass = saved.log_probs
    saved.log_probs = lambda f: calls.append(len(f)) or one_pass(f)
    for context in (8, 16):
        calls.clear()
        stream = _WholeRecordingStream(saved, window=20, context=context)
        stream.accept(feats[:137])
        stream.accept(feats[137:])
        windowed = stream.finish()
        assert windowed.shape == whole.shape
        err = np.abs(windowed - whole).max(axis=1)
        dist = _distance_to_a_cut(len(whole), 20, context)
        assert (dist >= context).all()  # every frame has its context
        assert err.max() < 1e-2, (context, err.round(4))
        assert err[dist >= 16].max() < 5e-4, (context, err.round(5), dist)
        assert err[dist >= 24].max() < 2e-5, (context, err.round(6), dist)
        errors[context] = err.max()
        # bounded work: 5 windows, each over its 20 frames and at most `context` more on each side (3 fbank each)
        assert len(calls) == 5 and max(calls) <= (20 + 2 * context) * 3, (context, calls)
    assert errors[16] < errors[8] / 5  # more context, closer
    assert errors[8] > 1e-4  # (really windowed: the first frames' state was not carried in)


# ------------------------------------------------------------------------------------------------ decoding
@pytest.mark.parametrize("method", ["tlg", "greedy"])
def test_same_words_as_the_decode_stage(tm, tmp_path, method):
    """The recipe path (fbank archive → steps.compute_logprobs → steps.decode) and the recognizer agree on every
    test utterance; and the tone model is good enough that this is a real comparison (all correct)."""
    from steps import compute_logprobs, decode

    lp_dir, dec_dir = tmp_path / "lp", tmp_path / "dec"
    assert (
        compute_logprobs.main(
            [
                "--model",
                str(tm.exp / "final.pt"),
                "--feats",
                str(tm.fbank / "test" / "feats.scp"),
                "--out-dir",
                str(lp_dir),
                "--num-threads",
                "1",
            ]
        )
        == 0
    )
    cfg = tmp_path / "c.yaml"
    cfg.write_text("decode: {beam: 12.0}\n")
    assert (
        decode.main(
            [
                "--config",
                str(cfg),
                "--method",
                method,
                "--logprobs",
                str(lp_dir / "logprobs.scp"),
                "--lang-dir",
                str(tm.lang),
                "--out-dir",
                str(dec_dir),
            ]
        )
        == 0
    )
    stage = read_texts(dec_dir / "hyp.txt")
    rec = Recognizer.from_dir(tm.exp, method=method)
    ours = {utt: rec.transcribe_file(path).text for utt, path in read_table_dict(tm.data / "test" / "wav.scp").items()}
    assert ours == stage
    assert ours == read_texts(tm.data / "test" / "text")
    # the command line gives the same words too (keys of a wav.scp input are its utterance ids)
    from asrlib.app.cli_asr import main as asr_main

    assert (
        asr_main(
            [
                "transcribe",
                str(tm.exp),
                str(tm.data / "test" / "wav.scp"),
                "--method",
                method,
                "-q",
                "--beam",
                "12",
                "-o",
                str(tmp_path / "asr.txt"),
            ]
        )
        == 0
    )
    assert read_texts(tmp_path / "asr.txt") == stage


def test_word_times_are_where_the_words_are(rec):
    """Monotonic, inside the audio, and each word's span overlaps the tone burst(s) that make the word."""
    rng = np.random.default_rng(11)
    for _ in range(6):
        words = [f"W{int(i)}" for i in rng.integers(1, 5, size=int(rng.integers(2, 6)))]
        x, truth = synth_utterance(words, rng)
        res = rec.transcribe(x, SR)
        assert res.text == " ".join(words)
        assert res.duration == pytest.approx(len(x) / SR)
        prev = 0.0
        for w, (tw, ts, te) in zip(res.words, truth):
            assert prev <= w.start < w.end <= res.duration
            prev = w.end
            # emitted while the word's tones play (or just after: the LSTM needs to hear them)
            assert ts - 0.03 <= w.start <= te + 0.1 and w.end >= ts, (w, ts, te)
            assert 0.5 < w.confidence <= 1.0


def test_long_recording_same_words_as_its_pieces(rec):
    """A 60 s recording of 40 concatenated utterances, processed in 10 s chunks, gives the pieces' words, with
    the pieces' word times shifted by their offsets (within two 30 ms frames)."""
    rng = np.random.default_rng(5)
    pieces, total = [], 0
    while total < 60 * SR:
        words = [f"W{int(i)}" for i in rng.integers(1, 5, size=int(rng.integers(1, 5)))]
        x, _ = synth_utterance(words, rng)
        pieces.append(x)
        total += len(x)
    long = np.concatenate(pieces)
    assert len(long) / SR >= 60
    res = rec.transcribe(long, SR)
    offset, expected = 0.0, []
    for x in pieces:
        r = rec.transcribe(x, SR)
        expected += [(w.word, w.start + offset) for w in r.words]
        offset += len(x) / SR
    assert res.text.split() == [w for w, _ in expected]
    assert max(abs(w.start - t) for w, (_, t) in zip(res.words, expected)) <= 0.06 + 1e-9


def test_long_recording_is_decoded_in_bounded_segments(tm):
    """A 2-minute recording of tone utterances with pauses: segments cut at the pauses (each run from a zero state),
    never more than segment_max_seconds of features through the network at once, words and segment times in
    order, and the same words as one stream over the whole recording (the tone model does not drift)."""
    rng = np.random.default_rng(9)
    pieces, total = [], 0
    while total < 120 * SR:
        words = [f"W{int(i)}" for i in rng.integers(1, 5, size=int(rng.integers(1, 5)))]
        x, _ = synth_utterance(words, rng)
        pieces += [x, np.zeros(int(rng.uniform(0.8, 3.0) * SR), np.float32)]
        total += len(x) + len(pieces[-1])
    audio = np.concatenate(pieces)
    for method in ("blank", "energy"):
        rec = Recognizer.from_dir(tm.exp, segment=method, segment_max_seconds=8.0)
        seen, run = [], rec._run_network

        def counted(feats, run=run, seen=seen):
            feats = list(feats)
            seen.append(sum(len(f) for f in feats))
            return run(feats)

        rec._run_network = counted
        res = rec.transcribe(audio, SR)
        assert max(seen) * rec.frame_shift <= 8.0 + rec.chunk_seconds, (method, max(seen))
        assert len(res.segments) >= len(pieces) // 4, (method, len(res.segments))
        assert res.text == " ".join(s.text for s in res.segments)
        times = [t for s in res.segments for w in s.words for t in (w.start, w.end)]
        assert times == sorted(times) and times[-1] <= res.duration
        for s in res.segments:
            assert s.start <= s.words[0].start and s.words[-1].end <= s.end
        whole = Recognizer.from_dir(tm.exp, segment="none").transcribe(audio, SR)
        assert res.text == whole.text, method


def test_a_recording_within_segment_max_seconds_is_not_cut(tm):
    """Under blank and energy a recording no longer than segment_max_seconds is one segment from frame 0 to its end,
    with the log-probs of one pass over it (the decode stage's search), even with pauses longer than
    segment_min_silence inside; a longer one is still cut there."""
    rng = np.random.default_rng(5)
    pieces = []
    for _ in range(3):
        pieces += [synth_utterance(["W1", "W2"], rng)[0], np.zeros(int(1.5 * SR), np.float32)]
    audio = np.concatenate(pieces)
    seconds = len(audio) / SR
    for method in ("blank", "energy"):
        whole = Recognizer.from_dir(tm.exp, segment=method, segment_max_seconds=seconds + 1.0, segment_min_silence=0.5)
        feats = whole._fbank(audio)
        (seg,) = list(whole._segments(whole._chunks(feats)))
        one_pass = whole._run_network(whole._chunks(feats))
        assert seg[0] == 0 and seg[2] == len(one_pass)
        np.testing.assert_allclose(seg[1], one_pass, atol=1e-6)
        cut = Recognizer.from_dir(tm.exp, segment=method, segment_max_seconds=seconds / 2, segment_min_silence=0.5)
        assert len(list(cut._segments(cut._chunks(feats)))) >= 2, method


def test_endpoint_segments_are_the_endpointers_in_bounded_memory(tm):
    """decode.segment endpoint (what auto picks for a unidirectional model): the recording is cut by the streaming
    recogniser's endpointer (asrlib/decode/endpoint.py) over the torch network, every segment run from a zero state
    from its start, in calls of OFFLINE_CALLS (or a rerun from a pause); each segment starts in a pause and ends
    after its words; the same words as one stream (the tone model does not drift), as the blank planner and as the
    streaming recogniser's calls (as the audio comes)."""
    from asrlib.decode import endpoint

    rng = np.random.default_rng(11)
    pieces, bounds, total = [], [], 0
    while total < 90 * SR:
        words = [f"W{int(i)}" for i in rng.integers(1, 5, size=int(rng.integers(1, 5)))]
        x, _ = synth_utterance(words, rng)
        gap = np.zeros(int(rng.uniform(0.8, 3.0) * SR), np.float32)
        bounds.append((total / SR, (total + len(x)) / SR))
        pieces += [x, gap]
        total += len(x) + len(gap)
    audio = np.concatenate(pieces)
    rec = Recognizer.from_dir(tm.exp, segment="auto")
    assert rec.segment_method == "endpoint"
    sizes = count_network_calls(rec)
    res = rec.transcribe(audio, SR)
    # a call: at most a call's worth of frames (OFFLINE_CALLS), or a segment's rerun from the middle of its pause
    # (at most `pad` before the speech) to the end of the call that heard the speech
    calls = rec.endpoint_calls
    assert calls == endpoint.OFFLINE_CALLS
    assert max(sizes) * rec.frame_shift <= longest_endpointer_call(rec), max(sizes)
    assert len(sizes) >= len(audio) / SR / max(calls.first, calls.segment, calls.waiting)
    assert len(res.segments) >= len(bounds) // 2
    assert res.text == " ".join(s.text for s in res.segments)
    for s in res.segments:  # starts outside the utterances, holds its words
        assert not any(a + 0.05 < s.start < b - 0.05 for a, b in bounds), s.start
        assert s.start <= s.words[0].start and s.words[-1].end <= s.end
    whole = Recognizer.from_dir(tm.exp, segment="none").transcribe(audio, SR)
    assert res.text == whole.text
    assert res.text == Recognizer.from_dir(tm.exp, segment="blank").transcribe(audio, SR).text
    # chunk sizes and call sizes do not change the result
    assert Recognizer.from_dir(tm.exp, segment="endpoint", chunk_seconds=0.37).transcribe(audio, SR).text == res.text
    rec = Recognizer.from_dir(tm.exp, segment="endpoint", chunk_seconds=0.32)
    rec.endpoint_calls = endpoint.CallSizes()  # the streaming recogniser's: each chunk runs as it comes
    assert rec.transcribe(audio, SR).text == res.text


def test_endpoint_needs_a_causal_model(tm, tmp_path):
    """A bidirectional model cannot be cut as it is heard: auto gives it the blank planner, endpoint is a clear
    error."""
    from asrlib.config import ModelConfig
    from asrlib.models.lstm import build_model
    from asrlib.models.saved import save_model

    torch.manual_seed(0)
    model = build_model(24, 5, ModelConfig(num_layers=1, hidden_size=16, proj_size=0, stack=3, bidirectional=True))
    save_model(tmp_path / "bi" / "final.pt", model.eval(), np.zeros(24), np.ones(24), info={"lang_dir": str(tm.lang)})
    assert Recognizer.from_dir(tmp_path / "bi", segment="auto").segment_method == "blank"
    with pytest.raises(AsrError, match="bidirectional"):
        Recognizer.from_dir(tmp_path / "bi", segment="endpoint")


def test_segment_context_runs_the_network_over_the_neighbouring_audio(tm):
    """``segment_context``: each segment's log-probs are those of the network run over the segment plus up to that
    much of the recording on each side (its outputs there dropped): the same segments as without context, and for
    the (unidirectional) tone model, whose kept outputs depend on the left context only, exactly the rows of a run
    over [segment start - context, segment end + context) of the recording's features."""
    rng = np.random.default_rng(3)
    pieces = []
    for _ in range(10):
        words = [f"W{int(i)}" for i in rng.integers(1, 5, size=int(rng.integers(1, 4)))]
        pieces += [synth_utterance(words, rng)[0], np.zeros(int(rng.uniform(0.8, 2.0) * SR), np.float32)]
    audio = np.concatenate(pieces)
    plain = Recognizer.from_dir(tm.exp, segment="blank", segment_max_seconds=6.0)
    ctx = Recognizer.from_dir(tm.exp, segment="blank", segment_max_seconds=6.0, segment_context=0.6)
    stack, n_ctx = ctx.backend.subsampling, int(round(0.6 / ctx.frame_seconds)) * ctx.backend.subsampling
    feats = ctx._fbank(audio)

    def segments(r):
        return [(f, lp) for f, lp, _ in r._segments(r._chunks(feats))]

    without, with_ctx = segments(plain), segments(ctx)
    assert len(without) >= 5
    assert [(f, len(lp)) for f, lp in with_ctx] == [(f, len(lp)) for f, lp in without]
    changed = 0
    for (first, lp), (_, lp0) in zip(with_ctx, without):
        a = max(0, first * stack - n_ctx)
        ref = ctx._run_network(ctx._chunks(feats[a : (first + len(lp)) * stack + n_ctx]))
        off = (first * stack - a) // stack
        np.testing.assert_allclose(lp, ref[off : off + len(lp)], atol=1e-5)
        changed += first > 0 and not np.allclose(lp, lp0, atol=1e-4)
    assert changed >= 3  # the left context reached the network
    assert ctx.transcribe(audio, SR).text == plain.transcribe(audio, SR).text  # tone words are unambiguous


def test_cli_writes_segments_and_subtitles(tm, tmp_path):
    from asrlib.app.cli_asr import main as asr_main

    rng = np.random.default_rng(2)
    for k in range(2):
        parts = []
        for _ in range(3):
            x, _ = synth_utterance(["W1", "W2"], rng)
            parts += [x, np.zeros(SR, np.float32)]
        sf.write(tmp_path / f"rec{k}.wav", np.concatenate(parts), SR)
    one = tmp_path / "rec0.wav"
    assert (
        asr_main(["transcribe", str(tm.exp), str(one), "--format", "jsonl", "-q", "-o", str(tmp_path / "out.jsonl")])
        == 0
    )
    row = json.loads((tmp_path / "out.jsonl").read_text())
    assert [s["text"] for s in row["segments"]] == ["W1 W2"] * 3
    assert (
        asr_main(["transcribe", str(tm.exp), str(one), "--format", "srt", "-q", "-o", str(tmp_path / "one.srt")]) == 0
    )
    srt = (tmp_path / "one.srt").read_text()
    assert srt.count(" --> ") == 3 and srt.startswith("1\n00:00:0")
    with pytest.raises(AsrError, match="-o DIR"):
        asr_main(
            ["transcribe", str(tm.exp), str(tmp_path / "rec0.wav"), str(tmp_path / "rec1.wav"), "--format", "vtt", "-q"]
        )
    assert (
        asr_main(
            [
                "transcribe",
                str(tm.exp),
                str(tmp_path / "rec0.wav"),
                str(tmp_path / "rec1.wav"),
                "--format",
                "vtt",
                "-q",
                "-o",
                str(tmp_path / "subs"),
            ]
        )
        == 0
    )
    for k in range(2):
        assert (tmp_path / "subs" / f"rec{k}.vtt").read_text().startswith("WEBVTT\n\n00:00:")


def test_stereo_44k_file_and_integer_samples(rec, tmp_path):
    """A 16 kHz utterance upsampled to 44.1 kHz, as a stereo WAV (channels at different levels) and as int16
    samples, gives the words of the 16 kHz original. (Band-limited upsampling keeps the content identical; audio
    *recorded* at another rate has a different noise spectrum, which this tiny tone model is not robust to.)"""
    from lhotse.augmentation.resample import Resample

    x16, _ = synth_utterance(["W2", "W4", "W3"], np.random.default_rng(8))
    assert rec.transcribe(x16, SR).text == "W2 W4 W3"
    x44 = Resample(SR, 44100)(torch.from_numpy(x16)).numpy()
    stereo = np.stack([x44, 0.7 * x44], axis=1)
    path = tmp_path / "stereo.wav"
    sf.write(str(path), stereo, 44100, subtype="PCM_16")
    info = sf.info(str(path))
    assert (info.channels, info.samplerate) == (2, 44100)
    res = rec.transcribe_file(path)
    assert res.text == "W2 W4 W3"
    assert res.duration == pytest.approx(len(x44) / 44100)
    assert 0 < res.words[0].start and res.words[-1].end <= res.duration
    pcm16 = (np.clip(stereo, -1, 1) * 32767).astype(np.int16)
    assert rec.transcribe(pcm16, 44100).text == "W2 W4 W3"


def test_bad_audio_is_a_clear_error(rec, tmp_path):
    (tmp_path / "empty.wav").write_bytes(b"")
    (tmp_path / "junk.wav").write_bytes(b"this is not audio" * 10)
    sf.write(str(tmp_path / "nosamples.wav"), np.zeros(0, np.float32), SR)
    sf.write(str(tmp_path / "tiny.wav"), np.zeros(100, np.float32), SR)
    cases = {
        "empty.wav": "empty file",
        "junk.wav": "cannot read audio",
        "nosamples.wav": "no audio samples",
        "tiny.wav": "too short",
        "missing.wav": "no such file",
    }
    for name, msg in cases.items():
        with pytest.raises(AsrError, match=msg) as e:
            rec.transcribe_file(tmp_path / name)
        assert name in str(e.value)
    bad = np.zeros(SR, np.float32)
    bad[100] = np.nan
    with pytest.raises(AsrError, match="NaN"):
        rec.transcribe(bad, SR)
    with pytest.raises(AsrError, match="no samples"):
        rec.transcribe(np.zeros(0), SR)
    with pytest.raises(AsrError, match="shape"):
        rec.transcribe(np.zeros((2, 3, 4)), SR)
    with pytest.raises(AsrError, match=r"looks like \[channels, samples\]"):
        rec.transcribe(np.zeros((2, SR)), SR)


# ------------------------------------------------------------------------------------------------ model dirs
def test_model_dir_problems_are_clear_errors(tm, tmp_path):
    from asrlib.app.model_dir import open_model_dir, package_model

    pkg = package_model(tm.exp, tm.lang, tmp_path / "pkg")
    moved = tmp_path / "elsewhere" / "model"
    shutil.move(str(pkg), str(moved))  # self-contained: works after a move
    assert Recognizer.from_dir(moved).transcribe(synth_utterance(["W3"], np.random.default_rng(0))[0], SR).text == "W3"
    with pytest.raises(AsrError, match="already exists"):
        package_model(tm.exp, tm.lang, moved)

    (moved / "lang" / "tokens.txt").unlink()
    with pytest.raises(AsrError, match="missing lang/tokens.txt"):
        open_model_dir(moved)
    meta = json.loads((moved / "model.json").read_text())
    shutil.copy(tm.lang / "tokens.txt", moved / "lang" / "tokens.txt")
    (moved / "model.json").write_text(json.dumps({**meta, "format_version": 99, "asrlib_version": "9.0"}))
    with pytest.raises(AsrError, match="format version 99, made by a newer asrlib"):
        open_model_dir(moved)
    (moved / "model.json").write_text(json.dumps({**meta, "type": "onnx"}))
    with pytest.raises(AsrError, match="model type 'onnx' is not supported"):
        open_model_dir(moved)
    (moved / "model.json").write_text(json.dumps(meta))
    with open(moved / "final.pt", "ab") as f:
        f.write(b"x")
    with pytest.raises(AsrError, match="final.pt has .* bytes, model.json says"):
        open_model_dir(moved)
    with pytest.raises(AsrError, match="no model.json and no final.pt"):
        open_model_dir(tmp_path)
    (moved / "lang" / "TLG.fst").unlink()
    (moved / "model.json").write_text(json.dumps({**meta, "files": {}}))
    with pytest.raises(AsrError, match="no TLG.fst"):
        Recognizer.from_dir(moved)


def test_a_model_dirs_file_table_and_token_count_are_checked(tm, tmp_path):
    """model.json's "files" entries must each be {"size": int, "sha256": str}; packaging refuses a lang dir whose
    token count is not the model's output size, more tokens or fewer."""
    from asrlib.app.model_dir import open_model_dir, package_model

    pkg = package_model(tm.exp, tm.lang, tmp_path / "pkg")
    meta = json.loads((pkg / "model.json").read_text())
    name = next(iter(meta["files"]))
    for bad in ({"size": "12", "sha256": "ab"}, {"size": 12, "sha256": 5}):
        (pkg / "model.json").write_text(json.dumps({**meta, "files": {**meta["files"], name: bad}}))
        with pytest.raises(AsrError, match='"files" must map names to'):
            open_model_dir(pkg)
    tokens = (tm.lang / "tokens.txt").read_text().splitlines()
    for k, lines in (("more", tokens + [f"EXTRA {len(tokens)}"]), ("fewer", tokens[:-1])):
        lang = tmp_path / f"lang_{k}"
        shutil.copytree(tm.lang, lang)
        (lang / "tokens.txt").write_text("\n".join(lines) + "\n")
        with pytest.raises(AsrError, match="this lang dir is not the one the model was trained with"):
            package_model(tm.exp, lang, tmp_path / f"pkg_{k}")


def test_experiment_dir_finds_relative_lang_dir(tm, tmp_path, monkeypatch):
    """final.pt records lang_dir as given to steps.train (relative to the recipe dir): found from a parent."""
    from asrlib.models.saved import load_model, save_model

    recipe = tmp_path / "recipe"
    shutil.copytree(tm.lang, recipe / "data" / "lang")
    m = load_model(tm.exp / "final.pt")
    save_model(recipe / "exp" / "m" / "final.pt", m.model, m.cmvn_mean, m.cmvn_inv_std, info={"lang_dir": "data/lang"})
    monkeypatch.chdir(tmp_path)
    rec = Recognizer.from_dir(recipe / "exp" / "m")
    assert rec.model_dir.lang_dir.resolve() == (recipe / "data" / "lang").resolve()
    shutil.rmtree(recipe / "data")
    with pytest.raises(AsrError, match="'data/lang'.* is not found; package the model"):
        Recognizer.from_dir(recipe / "exp" / "m")


def test_experiment_dir_outside_the_recipe_finds_the_resolved_lang_dir(tm, tmp_path, monkeypatch):
    """A run with a relative --data and an --exp elsewhere (`run.sh --data data --exp /scratch/e`): the lang dir
    that steps.train resolved is used, and the relative one when the resolved one is gone."""
    from asrlib.models.saved import load_model, save_model

    recipe, exp = tmp_path / "recipe", tmp_path / "scratch" / "e"
    shutil.copytree(tm.lang, recipe / "data" / "lang")
    m = load_model(tm.exp / "final.pt")
    info = {"lang_dir": "data/lang", "lang_dir_abs": str(recipe / "data" / "lang")}
    save_model(exp / "final.pt", m.model, m.cmvn_mean, m.cmvn_inv_std, info=info)
    monkeypatch.chdir(tmp_path)
    assert Recognizer.from_dir(exp).model_dir.lang_dir == recipe / "data" / "lang"
    shutil.copytree(tm.lang, tmp_path / "data" / "lang")
    shutil.rmtree(recipe / "data")
    assert Recognizer.from_dir(exp).model_dir.lang_dir.resolve() == (tmp_path / "data" / "lang").resolve()


def test_experiment_dir_decodes_with_its_decode_stage_settings(tm, tmp_path):
    """An experiment dir uses the settings of its newest TLG decode stage after training (the recipe's tuned
    acoustic scale / blank penalty), so `asr transcribe EXP` gives the decode stage's words; greedy stages and
    stages older than final.pt do not count."""
    import os

    from asrlib.app.model_dir import open_model_dir

    exp = tmp_path / "exp"
    exp.mkdir()
    shutil.copy(tm.exp / "final.pt", exp / "final.pt")
    (exp / "lang").symlink_to(tm.lang)
    assert open_model_dir(exp).decode_config().acoustic_scale == 1.0  # no decode stage: defaults

    def stage(name, **fp):
        d = exp / name
        d.mkdir()
        (d / ".decode.done").write_text(json.dumps({"_fingerprint": fp}))
        return d / ".decode.done"

    old = stage("decode_dev_tlg", method="tlg", beam=7.0, acoustic_scale=3.0, blank_penalty=2.0, max_active=100)
    t = (exp / "final.pt").stat().st_mtime
    os.utime(old, (t - 60, t - 60))  # decoded before this model existed
    assert open_model_dir(exp).decode_config().acoustic_scale == 1.0
    new = stage(
        "decode_test_tlg", method="tlg", beam=9.0, acoustic_scale=2.5, blank_penalty=0.7, max_active=500, num_threads=1
    )
    stage("decode_test_greedy", method="greedy", beam=1.0, acoustic_scale=9.0, blank_penalty=0.0, max_active=1)
    os.utime(exp / "decode_test_greedy" / ".decode.done", (t + 120, t + 120))
    md = open_model_dir(exp)
    c = md.decode_config()
    assert (c.beam, c.acoustic_scale, c.blank_penalty, c.max_active) == (9.0, 2.5, 0.7, 500)
    assert md.meta["decode_source"] == str(new)
    assert Recognizer.from_dir(exp, acoustic_scale=1.5).decode_config.acoustic_scale == 1.5  # an override wins


# ------------------------------------------------------------------------------------------------ alignment
def test_alignment_of_words_to_emitted_tokens():
    prons = {"A": [[1]], "B": [[2]], "X": [[3, 4], [3]]}
    assert token_runs([0, 1, 1, 0, 1, 2, 2, 0, 3]) == [(1, 1, 2), (1, 4, 4), (2, 5, 6), (3, 8, 8)]
    # exact: pronunciation variants chosen by the tokens
    assert align_words(["A", "X", "B"], prons, [(1, 0, 0), (3, 2, 2), (2, 4, 4)]) == [(0, 1), (1, 2), (2, 3)]
    assert align_words(["A", "X", "B"], prons, [(1, 0, 0), (3, 2, 2), (4, 3, 3), (2, 5, 5)]) == [(0, 1), (1, 3), (3, 4)]
    # with edits (greedy phones that the lexicon match had to repair)
    assert _match_edit(["A", "B"], prons, [7, 1, 9, 9, 2, 8]) == [(1, 2), (4, 5)]
    assert _match_edit(["A", "X", "B"], prons, [1, 2]) == [(0, 1), None, (1, 2)]
    assert _match_edit(["A", "X", "B"], prons, [1, 3, 5, 4, 2]) == [(0, 1), (1, 4), (4, 5)]


def test_greedy_long_recordings_are_split_at_blanks(tm):
    rec = Recognizer(Recognizer.from_dir(tm.exp).model_dir, method="greedy", max_greedy_segment=0.3)  # 10 frames
    toks = np.array([0, 1, 1, 0, 0, 0, 2, 0, 3, 3, 3, 3, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 1])
    pieces = rec._greedy_segments(toks)
    assert pieces[0][0] == 0 and pieces[-1][1] == len(toks)
    assert all(b - a <= 10 for a, b in pieces) and all(p[1] == q[0] for p, q in zip(pieces, pieces[1:]))
    assert pieces[0] == (0, 4)  # the middle of the longest blank run in the first 10 frames


# ------------------------------------------------------------------------------------------------ digits recipe
def _digits_ready(method: str) -> Path:
    hyp = DIGITS_EXP / f"decode_test_{method}" / "hyp.txt"
    if not (DIGITS_EXP / ".train.done").is_file() or not hyp.is_file():
        pytest.skip(
            "the digits recipe has not been trained and decoded (run `make run`); "
            f"needs {DIGITS_EXP}/.train.done and {hyp}"
        )
    if hyp.stat().st_mtime < (DIGITS_EXP / "final.pt").stat().st_mtime:
        pytest.skip(f"{hyp} is older than final.pt (decode stage not rerun after training)")
    return hyp


def test_digits_model_same_words_as_decode_stage():
    """One stream per utterance (segment none) is exactly what the decode stage searches."""
    hyp = read_table_dict(_digits_ready("tlg"))
    torch.set_num_threads(1)
    rec = Recognizer.from_dir(DIGITS_EXP, segment="none")
    wavs = read_table_dict(ROOT / "recipes" / "digits" / "data" / "test" / "wav.scp")
    assert len(hyp) >= 0.9 * len(wavs)
    diff = []
    for utt, path in wavs.items():
        if utt not in hyp:
            continue
        res = rec.transcribe_file(path)
        if res.text != hyp[utt]:
            diff.append((utt, res.text, hyp[utt]))
        ends = [0.0] + [t for w in res.words for t in (w.start, w.end)]
        assert ends == sorted(ends) and ends[-1] <= res.duration
    assert diff == []


def test_digits_model_60s_recordings_vs_pieces():
    """The test set cut into consecutive >= 60 s concatenations of its utterances. (1) The pieces' log-probs searched
    as ONE recording give exactly the pieces' words: the long search loses nothing. (2) One stream over a whole
    recording (segment none) carries the LSTM state and the online CMN's running mean across utterances, and loses
    accuracy. (3) The default segmentation (auto: the endpointer, on this unidirectional model), on the recipe's
    model trained on utterances joined in twos, is within issue 31's bound, 0.3 absolute of the pieces, and below
    one stream. Measured with bench/long_form.py on the `make run` model (2026-12-01, docs/long-recordings.md): 3.18
    against 3.09 here (the blank planner 3.28); on a test set 20 times larger +0.20 [+0.05, +0.37] (blank +0.33).
    The model `make run` trains is the same from run to run on one machine (test TLG 3.46 on 2026-11-28, -29, 12-01
    and 12-02 afternoon), so this is a fixed figure there; another machine's float rounding may train another model,
    whose gap on these 1099 words can differ by more than the bound (docs/long-recordings.md, "Where it stands"): a
    fresh machine's on 2026-12-02 (test TLG 2.28) gave 2.09 against 1.91 here, +0.23 [+0.09, +0.38] on the larger."""
    from asrlib.score import score

    _digits_ready("tlg")
    torch.set_num_threads(1)
    rec = Recognizer.from_dir(DIGITS_EXP)
    one_stream = Recognizer.from_dir(DIGITS_EXP, segment="none")
    data = ROOT / "recipes" / "digits" / "data" / "test"
    refs = read_table_dict(data / "text")
    groups, sr = concatenated_recordings(data, 60.0)
    ref, hyp_pieces, hyp_long, hyp_one = {}, {}, {}, {}
    for i, group in enumerate(groups):
        lps, words = [], []
        for utt, x in group:
            lps.append(one_stream.log_probs(x, sr))
            words += one_stream.transcribe(x, sr).text.split()
        joined = one_stream.decode_log_probs(np.concatenate(lps), sum(len(x) for _, x in group) / sr)
        assert joined.text.split() == words
        audio = np.concatenate([x for _, x in group])
        long = rec.transcribe(audio, sr)
        assert long.duration >= 60 and len(long.segments) >= len(group) // 2
        ends = [t for s in long.segments for t in (s.start, s.end)]
        assert ends == sorted(ends) and ends[-1] <= long.duration
        ref[f"r{i}"] = " ".join(refs[utt] for utt, _ in group)
        hyp_pieces[f"r{i}"], hyp_long[f"r{i}"] = " ".join(words), long.text
        hyp_one[f"r{i}"] = one_stream.transcribe(audio, sr).text
    assert len(groups) >= 2
    wer_pieces, wer_long, wer_one = (score(ref, h).wer for h in (hyp_pieces, hyp_long, hyp_one))
    assert rec.segment_method == "endpoint"
    assert wer_long <= wer_pieces + 0.3, (wer_long, wer_pieces, wer_one)
    assert wer_long < wer_one, (wer_long, wer_pieces, wer_one)


def test_utterance_cmn_model_through_compute_logprobs_and_the_recognizer(tm, tmp_path):
    """A model trained with features.cmvn: utterance records it; steps.compute_logprobs and the recognizer both
    apply that normalisation (then the model's global CMVN)."""
    from asrlib.config import ModelConfig
    from asrlib.features.cmvn import utterance_cmn
    from asrlib.kaldi_io import MatrixReader, write_matrices
    from asrlib.models.lstm import build_model
    from asrlib.models.saved import load_model, save_model
    from steps.compute_logprobs import main as compute_logprobs

    torch.manual_seed(0)
    model = build_model(24, 5, ModelConfig(num_layers=1, hidden_size=16, proj_size=0, stack=3))
    exp = tmp_path / "utt"
    save_model(
        exp / "final.pt", model.eval(), np.zeros(24), np.ones(24), info={"lang_dir": str(tm.lang), "cmvn": "utterance"}
    )
    rng = np.random.default_rng(0)
    raw = {k: (rng.normal(0, 1, (60, 24)) + rng.normal(0, 3, 24)).astype(np.float32) for k in ("a", "b")}
    write_matrices(tmp_path / "fb" / "feats.ark", sorted(raw.items()))
    assert (
        compute_logprobs(
            [
                "--model",
                str(exp / "final.pt"),
                "--feats",
                str(tmp_path / "fb" / "feats.scp"),
                "--out-dir",
                str(tmp_path / "lp"),
                "--num-threads",
                "1",
            ]
        )
        == 0
    )
    saved = load_model(exp / "final.pt")
    assert saved.cmn == "utterance"
    out = MatrixReader(tmp_path / "lp" / "logprobs.scp")
    for k, x in raw.items():
        np.testing.assert_allclose(out[k], saved.log_probs(utterance_cmn(x)), atol=1e-5)
        assert not np.allclose(out[k], saved.log_probs(x), atol=1e-3)
    # the recognizer collects the recording's frames and normalises them at the end: the same log-probs
    audio = np.random.default_rng(1).normal(0, 0.1, 2 * SR).astype(np.float32) + 0.05
    rec = Recognizer.from_dir(exp, chunk_seconds=0.3)
    feats = rec._fbank(audio)
    whole = saved.log_probs(utterance_cmn(feats))
    np.testing.assert_allclose(rec.log_probs(audio, SR), whole, atol=2e-5)
    assert not np.allclose(whole, saved.log_probs(feats), atol=1e-3)


def test_online_cmn_model_streams_in_the_recognizer_as_in_compute_logprobs(tm, tmp_path):
    """A model trained with features.cmvn: online records the mode and its prior weight; steps.compute_logprobs
    applies it over whole utterances, the recognizer chunk by chunk (running mean carried): the same log-probs."""
    from asrlib.config import ModelConfig
    from asrlib.features.cmvn import online_cmn
    from asrlib.kaldi_io import MatrixReader, write_matrices
    from asrlib.models.lstm import build_model
    from asrlib.models.saved import load_model, save_model
    from steps.compute_logprobs import main as compute_logprobs

    torch.manual_seed(0)
    model = build_model(24, 5, ModelConfig(num_layers=1, hidden_size=16, proj_size=0, stack=3))
    exp = tmp_path / "online"
    save_model(
        exp / "final.pt",
        model.eval(),
        np.full(24, 1.0),
        np.full(24, 0.5),
        info={"lang_dir": str(tm.lang), "cmvn": "online", "online_prior_frames": 40.0},
    )
    saved = load_model(exp / "final.pt")
    assert (saved.cmn, saved.online_prior) == ("online", 40.0)
    rng = np.random.default_rng(0)
    raw = {k: (rng.normal(0, 1, (60, 24)) + rng.normal(0, 3, 24)).astype(np.float32) for k in ("a", "b")}
    write_matrices(tmp_path / "fb" / "feats.ark", sorted(raw.items()))
    assert (
        compute_logprobs(
            [
                "--model",
                str(exp / "final.pt"),
                "--feats",
                str(tmp_path / "fb" / "feats.scp"),
                "--out-dir",
                str(tmp_path / "lp"),
                "--num-threads",
                "1",
            ]
        )
        == 0
    )
    out = MatrixReader(tmp_path / "lp" / "logprobs.scp")
    for k, x in raw.items():
        z = online_cmn((x - 1.0) * 0.5, 40.0)[0]
        with torch.no_grad():
            ref = saved.model(torch.from_numpy(z)[None], torch.tensor([60]))[0][0].numpy()
        np.testing.assert_allclose(out[k], ref, atol=1e-5)
    audio = np.random.default_rng(1).normal(0, 0.1, 2 * SR).astype(np.float32) + 0.05
    rec = Recognizer.from_dir(exp, chunk_seconds=0.3)  # the unidirectional stream, chunk by chunk
    whole = saved.log_probs(rec._fbank(audio))
    np.testing.assert_allclose(rec.log_probs(audio, SR), whole, atol=2e-5)
    with torch.no_grad():  # and the running mean really is applied: global CMVN alone gives other log-probs
        plain = saved.model(torch.from_numpy((rec._fbank(audio) - 1.0) * 0.5)[None], torch.tensor([200]))[0][0]
    assert not np.allclose(whole, plain.numpy()[: len(whole)], atol=1e-3)
