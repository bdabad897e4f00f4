"""The unidirectional LSTM with a look-ahead convolution (model.lookahead = K): its output for a frame hears exactly
K output frames of the future, a stream that waits K frames gets the whole utterance's log-probs, padding changes
nothing, its latency is K frames more than the plain LSTM's, and the exports that cannot run it say so."""

import pytest
import torch

from asrlib.config import ModelConfig
from asrlib.errors import AsrError
from asrlib.models.latency import algorithmic_latency_ms, latency_parts_ms
from asrlib.models.lstm import LookAhead, build_model

K, S, D = 3, 4, 10


def _model(lookahead=K, proj=0, peephole=False):
    torch.manual_seed(0)
    cfg = ModelConfig(
        num_layers=2, hidden_size=12, proj_size=proj, peephole=peephole, stack=S, lookahead=lookahead, dropout=0.0
    )
    model = build_model(D, 7, cfg).eval()
    if model.lookahead is not None:
        with torch.no_grad():  # trained weights: every offset matters (it starts as the identity)
            model.lookahead.weight.normal_()
    return model


@pytest.mark.parametrize("proj,peephole", [(0, False), (5, True)])
def test_an_output_frame_hears_exactly_k_frames_ahead(proj, peephole):
    model = _model(proj=proj, peephole=peephole)
    x = torch.randn(1, 30 * S, D)
    f = 17 * S + 2  # the 10 ms frame changed: in output frame 17
    y = x.clone()
    y[0, f] += 5.0
    with torch.no_grad():
        a, _ = model(x, torch.tensor([x.shape[1]]))
        b, _ = model(y, torch.tensor([x.shape[1]]))
    moved = (a - b)[0].abs().amax(-1) > 1e-6
    first = int(moved.nonzero()[0])
    assert first == f // S - K  # frame j hears the 10 ms frames up to (j + 1 + K) S - 1
    assert bool(moved[first:].all())


def test_a_stream_that_waits_k_frames_gets_the_whole_utterances_log_probs():
    model = _model()
    x = torch.randn(1, 41 * S + 3, D)
    with torch.no_grad():
        whole, _ = model(x, torch.tensor([x.shape[1]]))
        for p in (K + 1, 9, 20, 33):  # what has arrived: p output frames; out: the frames with K after them
            part, _ = model(x[:, : p * S], torch.tensor([p * S]))
            assert torch.allclose(part[0, : p - K], whole[0, : p - K], atol=1e-5), p


def test_padding_in_a_batch_changes_nothing():
    model = _model()
    xs = [torch.randn(t, D) for t in (40, 97, 61, 16)]
    lens = torch.tensor([len(x) for x in xs])
    with torch.no_grad():
        y, out_lens = model(torch.nn.utils.rnn.pad_sequence(xs, batch_first=True, padding_value=7.0), lens)
        for i, x in enumerate(xs):
            one, _ = model(x[None], lens[i : i + 1])
            assert torch.allclose(y[i, : out_lens[i]], one[0], atol=1e-5)


def test_it_starts_as_the_identity_and_learns_the_future():
    la = LookAhead(4, 2)
    x = torch.randn(2, 9, 4)
    assert torch.equal(la(x, torch.tensor([9, 9])), x)
    la(x, torch.tensor([9, 9])).sum().backward()
    assert bool((la.weight.grad[1:] != 0).all())  # the future offsets get gradient from the start


def test_latency_is_k_frames_more_than_the_plain_lstm():
    plain = ModelConfig(bidirectional=False, stack=4)
    ahead = ModelConfig(bidirectional=False, stack=4, lookahead=6)
    assert algorithmic_latency_ms(plain) == 47.5
    assert latency_parts_ms(ahead)["right_context"] == 240.0
    assert algorithmic_latency_ms(ahead) == 287.5  # as the LC-BLSTM with N = 4, M = 3


def test_a_bidirectional_or_negative_look_ahead_is_refused():
    for cfg in (ModelConfig(bidirectional=True, lookahead=2), ModelConfig(lookahead=-1)):
        with pytest.raises(ValueError, match="model.lookahead"):
            build_model(D, 7, cfg)


def test_the_streaming_export_refuses_it():
    import numpy as np

    from asrlib.export.onnx_model import ScanAcousticModel

    with pytest.raises(AsrError, match="look-ahead"):
        ScanAcousticModel.from_model(_model(), np.zeros(D, np.float32), np.ones(D, np.float32))


@pytest.mark.parametrize("chunk", [1, 3])
def test_its_onnx_chunk_whole_and_sherpa_models_give_the_torch_log_probs(tmp_path, chunk):
    """Exported as a chunk model with M = K and no backward direction (asrlib.export.lc_onnx): streamed in windows
    (N = 1: the model's own latency; N = 3) and as a whole utterance, it gives the torch model's log-probs; its
    sherpa-onnx streaming form gives the chunk model's."""
    pytest.importorskip("onnxruntime")
    import numpy as np

    from asrlib.export.lc_onnx import LcExport, export_lc, verify_lc, verify_sherpa_online

    model = _model()
    with pytest.raises(ValueError, match="look-ahead"):
        LcExport(_model(lookahead=0), np.zeros(D), np.ones(D))
    rng = np.random.default_rng(1)
    mean, inv_std = rng.standard_normal(D).astype(np.float32), (1 + rng.random(D)).astype(np.float32)
    core = LcExport(model, mean, inv_std, chunk_frames=chunk).fold_search(2.0, 1.0)
    assert (core.n, core.m) == (chunk, K)
    paths = {sig: export_lc(core, tmp_path / f"{sig}.onnx", sig) for sig in ("chunk", "whole", "sherpa_online")}
    assert verify_lc(paths["chunk"], paths["whole"], model, mean, inv_std, lengths=(45, 131)) < 1e-4
    assert verify_sherpa_online(paths["sherpa_online"], paths["chunk"]) < 1e-4


def test_stage_7_exports_a_streaming_bundle_that_gives_the_whole_utterances_words(tmp_path_factory):
    """Through the real steps.export_mobile (tone task, K = 2, chunk model of N = 2 frames): the fp32 chunk and whole
    models follow torch, the look-ahead filters are not pruned, bundle.json states N, K, no backward direction and
    the latency at N, and the bundle's streaming recogniser gives the whole-utterance words and log-probs for any
    audio chunk size."""
    pytest.importorskip("onnxruntime")
    import json

    import numpy as np
    import yaml
    from test_lc_bundle import _quiet_main
    from tone_model import SR, tone_model, utterance_audio

    from asrlib.export import prune
    from asrlib.export.streaming import StreamingRecognizer, recognize_whole
    from steps import export_mobile, train

    tm = tone_model(tmp_path_factory)
    root = tmp_path_factory.mktemp("tone_lookahead")
    cfg = yaml.safe_load((tm.root / "config.yaml").read_text())
    cfg["model"].update(bidirectional=False, peephole=False, proj_size=0, lookahead=2, hidden_size=24)
    cfg["export"] = {"rank_ratio": 0.25, "sparsity": 0.3, "finetune_epochs": 1, "fp16": False, "chunk_frames": 2}
    (root / "config.yaml").write_text(yaml.safe_dump(cfg))
    common = ["--config", str(root / "config.yaml"), "--data-dir", str(tm.data), "--feats-dir", str(tm.fbank)]
    common += ["--lang-dir", str(tm.lang)]
    assert _quiet_main(train.main, common + ["--exp-dir", str(root / "exp")]) == 0
    out = root / "mobile"
    assert (
        _quiet_main(export_mobile.main, common + ["--model", str(root / "exp" / "final.pt"), "--out-dir", str(out)])
        == 0
    )
    report = json.loads((out / "export.json").read_text())
    assert max(report["max_abs_diff_vs_torch"].values()) < 1e-4
    trained = prune.load_compressed(root / "exp" / "final.pt").model.lookahead.weight
    pruned = prune.load_compressed(out / "pruned.pt").model.lookahead.weight
    assert bool((pruned != 0).all()) and not torch.equal(pruned, trained)  # fine-tuned, not pruned
    lc = json.loads((out / "bundle" / "bundle.json").read_text())["streaming"]["lc_blstm"]
    stack = cfg["model"]["stack"]
    assert (lc["chunk_frames"], lc["right_context"], lc["backward"]) == (2, 2, False)
    assert lc["latency_ms"]["total"] == (2 + 2) * stack * 10 + 7.5
    rec = StreamingRecognizer(out / "bundle")
    for utt, x in utterance_audio(tm, "test")[:3]:
        whole_words, whole_lp = recognize_whole(out / "bundle", x, SR)
        for chunk in (160 * 7, len(x)):
            s = rec.new_stream()
            for i in range(0, len(x), chunk):
                s.accept_waveform(SR, x[i : i + chunk])
            assert s.finish() == whole_words, (utt, chunk)
            assert np.abs(s.all_logprobs() - whole_lp).max() < 1e-4


def test_a_click_streamed_through_its_chunk_model_comes_out_the_computed_latency_late(tmp_path):
    """Quiet noise with one click, fed in 1 ms pieces through the online fbank and the exported chunk model (N = 1:
    the model's own latency): the click's output frame moves, nothing emitted before the click does, and each frame
    comes out (1 + K) S x 10 ms + 7.5 ms after the start of its slot."""
    pytest.importorskip("onnxruntime")
    knf = pytest.importorskip("kaldi_native_fbank")
    import numpy as np

    from asrlib.export.lc_onnx import LcExport, LcOnnxStream, export_lc
    from asrlib.export.streaming import fbank_options

    sr, bins = 16000, 23
    torch.manual_seed(0)
    cfg = ModelConfig(num_layers=2, hidden_size=12, proj_size=0, peephole=False, stack=S, lookahead=K)
    model = build_model(bins, 7, cfg).eval()
    with torch.no_grad():
        model.lookahead.weight.normal_()
    path = export_lc(LcExport(model, np.zeros(bins), np.ones(bins), chunk_frames=1), tmp_path / "c.onnx", "chunk")
    latency = algorithmic_latency_ms(cfg)
    assert latency == (1 + K) * S * 10 + 7.5

    def stream(samples):
        fb, s, used, outs, times = knf.OnlineFbank(fbank_options(sr, bins)), LcOnnxStream(path), 0, [], []
        for i in range(0, len(samples), sr // 1000):
            fb.accept_waveform(float(sr), samples[i : i + sr // 1000])
            if fb.num_frames_ready > used:
                y = s.accept(np.stack([fb.get_frame(k) for k in range(used, fb.num_frames_ready)]))
                used = fb.num_frames_ready
                outs.append(y)
                times += [1000.0 * min(i + sr // 1000, len(samples)) / sr] * len(y)
        return np.concatenate(outs), np.array(times)

    quiet = (np.random.default_rng(0).standard_normal(int(1.2 * sr)) * 1e-3).astype(np.float32)
    j = 9
    t_click = j * S * 10 + 1.0  # ms, 1 ms into output frame j's slot
    click = quiet.copy()
    click[int(t_click * sr / 1000)] = 0.5
    y0, times = stream(quiet)
    y1, times1 = stream(click)
    assert np.array_equal(times, times1)
    moved = np.abs(y1 - y0).max(-1) > 1e-4
    assert moved[j] and not moved[times <= t_click].any()
    delay = times - np.arange(len(times)) * S * 10  # each frame's emission after its slot's start
    assert np.allclose(delay, latency, atol=1.0)
