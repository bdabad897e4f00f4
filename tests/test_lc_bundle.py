"""A latency-controlled BLSTM's mobile bundle: the int8 chunk and whole-utterance ONNX models follow the PyTorch model,
and the bundle's streaming recogniser (chunk by chunk, forward state carried, right context fed to the backward
direction) gives the words of whole-utterance decoding for any audio chunk size, with and without endpointing."""

from __future__ import annotations

import contextlib
import io
import json
import logging

import numpy as np
import pytest
import torch
import yaml

from asrlib.export.streaming import EndpointRules, StreamingRecognizer, recognize_whole
from test_lc_blstm import M, N, _lc_model
from tone_model import SR, read_texts, tone_model, utterance_audio

pytest.importorskip("onnxruntime")


def test_int8_chunk_model_streams_close_to_the_torch_model(tmp_path):
    """fp32: chunk model streamed and whole model equal PyTorch (verify_lc, two lengths); int8: every matrix product
    quantized, and the chunk model streamed in uneven pieces stays close to the whole-utterance PyTorch log-probs
    (same best token in every frame) at two input lengths; the int8 whole-utterance model gives the same output
    (frames past the input's end are zeros in every layer: int8 ranges depend on the real frames only)."""
    from asrlib.export.lc_onnx import LcExport, export_lc, verify_lc
    from asrlib.export.quantize import quantize_int8
    from asrlib.export.runtime import LcChunkOnnxModel, OnnxAcousticModel
    from asrlib.models.lc_blstm import LcStream

    with pytest.raises(ValueError, match="proj_size"):
        LcExport(_lc_model(proj=5), np.zeros(10), np.ones(10))
    model = _lc_model()
    rng = np.random.default_rng(2)
    mean, inv_std = rng.standard_normal(10).astype(np.float32), (1 + rng.random(10)).astype(np.float32)
    core = LcExport(model, mean, inv_std).fold_search(2.0, 1.0)  # the runtime takes the search out again
    chunk = export_lc(core, tmp_path / "chunk.onnx", "chunk")
    whole = export_lc(core, tmp_path / "whole.onnx", "whole")
    assert verify_lc(chunk, whole, model, mean, inv_std, lengths=(45, 131)) < 1e-4
    for p in (chunk, whole):
        q = quantize_int8(p, tmp_path / f"{p.stem}.int8.onnx")
        assert q["float_matmuls"] == [] and q["ops"]["DynamicQuantizeLSTM"] == 3 * 3  # fwd, right context, bwd
    cm = LcChunkOnnxModel(tmp_path / "chunk.int8.onnx")
    assert (cm.n, cm.m, cm.stack) == (N, M, 4)
    wm = OnnxAcousticModel(tmp_path / "whole.int8.onnx")
    for t in (37, 203):  # ends inside a chunk's window; several chunks
        f = (mean + rng.standard_normal((t, 10)) / inv_std).astype(np.float32)
        s = LcStream(model)
        ref = torch.cat([s.accept((f - mean) * inv_std), s.finish()]).numpy()
        st = cm.stream()
        got = np.concatenate([st.accept(f[i : i + 9]) for i in range(0, t, 9)] + [st.finish()])
        assert got.shape == ref.shape == (t // 4, 7)
        assert np.abs(got - ref).max() < 0.02 and (got.argmax(1) == ref.argmax(1)).all()
        assert np.abs(wm.log_probs(f) - got).max() < 1e-5  # the same int8 arithmetic, window by window


def _quiet_main(main, argv):
    """Run a step's ``main`` without its stdout, and give the root logger its handlers back."""
    root = logging.getLogger()
    before = list(root.handlers)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return main(argv)
    finally:
        for h in list(root.handlers):
            if h not in before:
                root.removeHandler(h)
                h.close()


@pytest.fixture(scope="module")
def lc_bundle(tmp_path_factory):
    """An LC-BLSTM (chunks of 3 output frames, 2 of right context) trained on the tone task, through the real
    ``steps.export_mobile`` (a folded search; pruning with a fine-tuning epoch, low rank asked for but skipped)."""
    from steps import export_mobile, train

    tm = tone_model(tmp_path_factory)
    root = tmp_path_factory.getbasetemp() / "tone_lc"
    out = root / "mobile"
    if not (out / ".export.done").is_file():
        cfg = yaml.safe_load((tm.root / "config.yaml").read_text())
        cfg["model"].update(bidirectional=True, proj_size=0, chunk_frames=3, right_context=2, hidden_size=24)
        cfg["decode"] = {"acoustic_scale": 1.5, "blank_penalty": 0.5}
        cfg["export"] = {"rank_ratio": 0.25, "sparsity": 0.3, "finetune_epochs": 1, "finetune_lr": 0.002, "fp16": False}
        root.mkdir(parents=True, exist_ok=True)
        (root / "config.yaml").write_text(yaml.safe_dump(cfg))
        common = ["--config", str(root / "config.yaml"), "--data-dir", str(tm.data), "--feats-dir", str(tm.fbank)]
        common += ["--lang-dir", str(tm.lang)]
        assert _quiet_main(train.main, common + ["--exp-dir", str(root / "exp")]) == 0
        assert (
            _quiet_main(export_mobile.main, common + ["--model", str(root / "exp" / "final.pt"), "--out-dir", str(out)])
            == 0
        )
    return tm, out


def test_lc_bundle_streams_as_the_whole_utterance(lc_bundle):
    """The bundle holds the int8 chunk model (streaming) and the whole-utterance one (sherpa-onnx's contract); the
    streaming recogniser, fed 70 ms (not a multiple of a chunk), 250 ms or all at once, gives the words and the
    log-probs of the whole-utterance model, and sherpa-onnx on the bundle the same words."""
    tm, out = lc_bundle
    info = json.loads((out / "bundle" / "bundle.json").read_text())
    assert info["streaming"]["lc_blstm"]["chunk_frames"] == 3 and info["streaming"]["lc_blstm"]["right_context"] == 2
    readme = (out / "bundle" / "README.md").read_text()  # says how to call the chunk model, not an LSTM's
    assert "`valid` (1,)" in readme and "window of 15 fbank" in readme and "No look-ahead" not in readme
    report = json.loads((out / "export.json").read_text())
    assert max(report["max_abs_diff_vs_torch"].values()) < 1e-4  # fp32 chunk and whole models, trained and pruned
    assert report["int8_ops_pruned_chunk"]["float_matmuls"] == [] and report["int8_ops_pruned"]["float_matmuls"] == []
    assert abs(report["sparsity"] - 0.3) < 0.01 and report["params"]["pruned"] == report["params"]["baseline"]
    wers = report["dev_wer_int8"]  # no low rank for an LC-BLSTM; pruned (fine-tuned) chosen on dev, as any model
    assert info["model"] == ("pruned" if wers["pruned"] <= wers["int8"] + 0.3 else "int8") == report["bundle"]["model"]
    rec = StreamingRecognizer(out / "bundle")
    assert rec.acoustic_scale == 1.5 and rec.blank_penalty == 0.5
    refs = read_texts(tm.data / "test" / "text")
    sherpa = None
    with contextlib.suppress(ImportError):
        from asrlib.export.bundle import SherpaRecognizer

        sherpa = SherpaRecognizer(out / "bundle")
    correct = 0
    for utt, x in utterance_audio(tm, "test")[:5]:
        whole_words, whole_lp = recognize_whole(out / "bundle", x, SR)
        for chunk in (160 * 7, 4000, len(x)):
            s = rec.new_stream()
            for i in range(0, len(x), chunk):
                s.accept_waveform(SR, x[i : i + chunk])
            assert s.finish() == whole_words, (utt, chunk)
            lp = s.all_logprobs()
            assert lp.shape == whole_lp.shape and np.abs(lp - whole_lp).max() < 1e-4
        if sherpa is not None:
            assert sherpa.recognize(x, SR) == whole_words, utt
        correct += whole_words == refs[utt].split()
    assert correct >= 3  # trained: the bundle really recognises


def test_sherpa_onnx_feeds_the_chunk_model_exactly_its_window(tmp_path):
    """sherpa-onnx's WeNet CTC contract feeds ``(chunk_size - 1) · subsampling + right_context + 1`` fbank frames
    per call: with the metadata the export writes, that is the LC window of N + M output frames, no more (a longer
    one only delays every chunk) and no less."""
    import onnxruntime as ort

    from asrlib.export.lc_onnx import LcExport, export_lc

    model = _lc_model()
    online = export_lc(LcExport(model, np.zeros(10), np.ones(10)), tmp_path / "online.onnx", "sherpa_online")
    meta = ort.InferenceSession(str(online)).get_modelmeta().custom_metadata_map
    n, s = int(meta["chunk_frames"]), int(meta["subsampling_factor"])
    assert (n, s) == (N, 4)
    assert (n - 1) * s + int(meta["right_context"]) + 1 == (N + M) * 4


def test_sherpa_onnx_streams_the_lc_bundle(lc_bundle, tmp_path):
    """sherpa-onnx's streaming recogniser (OnlineRecognizer, the chunk model in its WeNet CTC contract, the bundle's
    TLG): the model equals the chunk model window for window (fp32, checked by the export), and its words are the
    same for any chunk size and those of whole-utterance decoding (its end: a tail of zeros, not a short window)."""
    pytest.importorskip("sherpa_onnx")
    from asrlib.export.sherpa_online import SherpaOnlineRecognizer

    tm, out = lc_bundle
    report = json.loads((out / "export.json").read_text())
    assert report["max_abs_diff_sherpa_online_vs_chunk"] < 1e-4
    rec = SherpaOnlineRecognizer(out / "bundle")
    same = 0
    for utt, x in utterance_audio(tm, "test")[:5]:
        words = rec.recognize(x, SR, 160 * 7)
        assert words == rec.recognize(x, SR, 4000) == rec.recognize(x, SR), utt
        same += words == recognize_whole(out / "bundle", x, SR)[0]
    assert same >= 4
    from steps import recognize_mobile  # the same engine from the command line, 320 ms pieces

    hyp = tmp_path / "hyp.txt"
    scp = tm.data / "test" / "wav.scp"
    assert (
        recognize_mobile.main(
            ["--bundle", str(out / "bundle"), "--engine", "sherpa-streaming", "--wav-scp", str(scp), "-o", str(hyp)]
        )
        == 0
    )
    got = dict(line.split(" ", 1) if " " in line else (line, "") for line in hyp.read_text().splitlines())
    for utt, x in utterance_audio(tm, "test"):
        assert got[utt].strip() == " ".join(rec.recognize(x, SR, 5120)), utt


def test_lc_bundle_endpointing(lc_bundle):
    """Endpointing on an LC-BLSTM, whose output lags its input by up to a chunk and its right context: three test
    utterances with 1 s pauses give three segments, each with the words of its utterance recognised alone, the same
    segments for every chunk size; the lagging network's last chunks come at the end of the input."""
    tm, out = lc_bundle
    pieces = utterance_audio(tm, "test")[:3]
    rng = np.random.default_rng(1)
    pause = lambda sec: rng.normal(0, 0.003, int(sec * SR)).astype(np.float32)  # noqa: E731
    x = np.concatenate([pause(1.0)] + [p for _, u in pieces for p in (u, pause(1.0))])
    rec = StreamingRecognizer(out / "bundle", endpoint=EndpointRules(min_silence=0.6, pad=2.0, max_segment=20.0))
    runs = {}
    for chunk in (160 * 7, 4800, len(x)):
        s = rec.new_stream()
        for i in range(0, len(x), chunk):
            s.accept_waveform(SR, x[i : i + chunk])
        runs[chunk] = (s.finish(), s.segments)
    words, segments = runs[len(x)]
    assert all(r == (words, segments) for r in runs.values())
    assert len(segments) == len(pieces)
    for seg, (utt, u) in zip(segments, pieces):
        assert seg.words == StreamingRecognizer(out / "bundle").recognize(u, SR), utt
    short = StreamingRecognizer(out / "bundle", endpoint=EndpointRules(0.6, 2.0, max_segment=1.0))
    s = short.new_stream()
    s.accept_waveform(SR, x)
    s.finish()
    assert len(s.segments) > len(pieces) and all(g.end - g.start <= 1.0 + 1e-6 for g in s.segments)


def test_transcribe_an_lc_bundle(lc_bundle, tmp_path):
    """`asr transcribe BUNDLE` on an LC bundle: the chunk model run by the offline recogniser (not causal for the
    endpointer: segment auto picks the blank planner) gives the words of the bundle's streaming recogniser."""
    from asrlib.app.cli_asr import main

    tm, out = lc_bundle
    rec = StreamingRecognizer(out / "bundle")
    scp = tm.data / "test" / "wav.scp"
    assert main(["transcribe", str(out / "bundle"), str(scp), "-q", "-o", str(tmp_path / "asr.txt")]) == 0
    got = {
        k: v.strip() for k, _, v in (line.partition(" ") for line in (tmp_path / "asr.txt").read_text().splitlines())
    }
    for utt, x in utterance_audio(tm, "test"):
        assert got[utt] == " ".join(rec.recognize(x, SR)), utt


def test_a_bundle_exported_at_another_latency_streams_at_it(lc_bundle, tmp_path):
    """bench/streaming_accuracy.py --bundle-sweep: the trained LC-BLSTM (N = 3, M = 2) exported through stage 7 at
    N = 2, M = 1. bundle.json states the setting and its latency, and the bundle's streaming recogniser follows the
    torch model run at that setting rather than as trained."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from streaming_accuracy import bundle_at

    from asrlib.export.streaming import compute_fbank
    from asrlib.models.saved import load_model

    tm, out = lc_bundle
    root = out.parent
    b = bundle_at(root / "exp" / "final.pt", (2, 1), root / "config.yaml", tm.data, tm.fbank, tm.lang, tmp_path)
    lc = json.loads((b / "bundle.json").read_text())["streaming"]["lc_blstm"]
    saved = load_model(root / "exp" / "final.pt")
    assert (saved.model.cfg.chunk_frames, saved.model.cfg.right_context) == (3, 2)
    assert (lc["chunk_frames"], lc["right_context"]) == (2, 1)
    assert lc["latency_ms"]["total"] == (2 + 1) * saved.model.stack * 10 + 7.5
    rec = StreamingRecognizer(b)
    x = utterance_audio(tm, "dev")[0][1]
    s = rec.new_stream()
    for i in range(0, len(x), SR // 10):
        s.accept_waveform(SR, x[i : i + SR // 10])
    s.finish()
    got = s.all_logprobs()
    fbank = compute_fbank(x, SR, rec.bundle.feat_dim)
    as_trained = saved.log_probs(fbank)
    saved.model.set_chunking(2, 1)
    at_21 = saved.log_probs(fbank)
    assert np.abs(got - at_21).mean() < 0.5 * np.abs(got - as_trained).mean()
