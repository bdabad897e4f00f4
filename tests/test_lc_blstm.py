"""The latency-controlled BLSTM: streaming equals the whole utterance, the look-ahead is bounded, and the computed
algorithmic latency is what a click streamed through the model measures."""

import numpy as np
import pytest
import torch

from asrlib.config import ModelConfig
from asrlib.models.latency import algorithmic_latency_ms, latency_parts_ms
from asrlib.models.lc_blstm import LcStream
from asrlib.models.lstm import build_model

N, M, S = 4, 3, 4


def _lc_model(feat_dim=10, layers=3, chunk=N, right=M, stack=S, proj=0):
    torch.manual_seed(0)
    cfg = ModelConfig(
        num_layers=layers,
        hidden_size=12,
        proj_size=proj,
        peephole=False,
        bidirectional=True,
        stack=stack,
        chunk_frames=chunk,
        right_context=right,
    )
    return build_model(feat_dim, 7, cfg).eval()


def _stream(model, feats, sizes):
    s = LcStream(model)
    out, i, k = [], 0, 0
    while i < len(feats):
        n = sizes[k % len(sizes)]
        out.append(s.accept(feats[i : i + n]))
        i, k = i + n, k + 1
    out.append(s.finish())
    return torch.cat(out)


@pytest.mark.parametrize("right,proj", [(3, 0), (0, 0), (6, 5)])
def test_streaming_equals_whole_utterance(right, proj):
    model = _lc_model(right=right, proj=proj)
    for t in (3, 5, 37, 100, 101, 131):  # shorter than a stack, a chunk, a window; ends inside chunks and stacks
        x = torch.randn(t, 10)
        with torch.no_grad():
            whole, lens = model(x[None], torch.tensor([t]))
        got = _stream(model, x, [1, 7, 2, 16, 5])
        assert got.shape == whole[0, : lens[0]].shape if t >= S else got.shape[0] == 0
        if t >= S:
            assert torch.allclose(got, whole[0], atol=1e-5), (t, (got - whole[0]).abs().max())


def test_batch_padding_does_not_change_outputs():
    model = _lc_model()
    xs = [torch.randn(t, 10) for t in (40, 97, 61, 16)]
    lens = torch.tensor([len(x) for x in xs])
    with torch.no_grad():
        y, out_lens = model(torch.nn.utils.rnn.pad_sequence(xs, batch_first=True), lens)
        for i, x in enumerate(xs):
            one, _ = model(x[None], lens[i : i + 1])
            assert torch.allclose(y[i, : out_lens[i]], one[0], atol=1e-5)


def test_look_ahead_is_chunk_plus_right_context():
    """Changing one stacked frame f changes the outputs of the chunks whose window holds f, and of every later
    chunk (the forward state), and of nothing earlier; a plain BLSTM changes every output."""
    model = _lc_model()
    x = torch.randn(1, 30 * S, 10)
    with torch.no_grad():
        base, _ = model(x, torch.tensor([x.shape[1]]))
        for f in (0, 9, 13, 22):
            x2 = x.clone()
            x2[0, f * S : (f + 1) * S] += 3.0
            moved = (model(x2, torch.tensor([x.shape[1]]))[0] - base).abs().amax(-1)[0] > 1e-6
            first = int(moved.nonzero()[0])
            # the earliest chunk whose window [c N, (c + 1) N + M) holds f
            c = max(0, -(-(f - N - M + 1) // N))
            assert first == c * N, (f, first)
            assert bool(moved[c * N :].any()) and not bool(moved[: c * N].any())
        plain = build_model(
            10, 7, ModelConfig(num_layers=2, hidden_size=12, proj_size=0, peephole=False, bidirectional=True, stack=S)
        ).eval()
        x2 = x.clone()
        x2[0, -S:] += 3.0
        d = (plain(x2, torch.tensor([x.shape[1]]))[0] - plain(x, torch.tensor([x.shape[1]]))[0]).abs().amax(-1)
        assert bool((d[0] > 0).all())  # every frame moves (by little at the start of a random untrained BLSTM)


def test_config_checks():
    with pytest.raises(ValueError, match="bidirectional"):
        build_model(10, 7, ModelConfig(bidirectional=False, peephole=False, chunk_frames=4))
    with pytest.raises(ValueError, match="right_context"):
        build_model(10, 7, ModelConfig(bidirectional=True, peephole=False, right_context=2))


def test_set_chunking_runs_the_weights_at_another_latency():
    """A model re-chunked to (N', M') computes what a model built with (N', M') and the same weights does, and
    streams and reports latency as one."""
    model = _lc_model()
    other = _lc_model(chunk=2, right=1)
    other.load_state_dict(model.state_dict())
    x = torch.randn(1, 37 * S, 10)
    before, _ = model(x, torch.tensor([x.shape[1]]))
    model.set_chunking(2, 1)
    got, _ = model(x, torch.tensor([x.shape[1]]))
    want, _ = other(x, torch.tensor([x.shape[1]]))
    assert torch.allclose(got, want, atol=1e-6)
    assert not torch.allclose(got, before, atol=1e-3)  # the look-ahead did change
    assert algorithmic_latency_ms(model.cfg) == algorithmic_latency_ms(other.cfg) == 2 * 40 + 1 * 40 + 7.5
    with torch.no_grad():
        streamed = _stream(model, x[0].numpy(), [7] * 40)
    assert (streamed - want[0]).abs().max() < 1e-5
    with pytest.raises(ValueError, match="right_context"):
        model.set_chunking(4, -1)
    with pytest.raises(ValueError, match="LC-BLSTM"):
        build_model(10, 7, ModelConfig(bidirectional=True, peephole=False)).set_chunking(4, 3)


def test_latency_figures():
    lc = ModelConfig(bidirectional=True, peephole=False, stack=4, chunk_frames=4, right_context=3)
    assert latency_parts_ms(lc) == {
        "chunk": 160.0,
        "right_context": 120.0,
        "output_delay": 0.0,
        "feature_window": 7.5,
        "total": 287.5,
    }
    assert algorithmic_latency_ms(ModelConfig(bidirectional=False, stack=3)) == 37.5
    assert algorithmic_latency_ms(ModelConfig(bidirectional=True, stack=3)) is None


def _stream_audio(model, samples, sr, piece):
    """Feed ``samples`` in pieces of ``piece`` samples through the online fbank and an LcStream: the log-probs and
    the input time (ms) at which each output frame came out."""
    knf = pytest.importorskip("kaldi_native_fbank")
    from asrlib.export.streaming import fbank_options

    fb = knf.OnlineFbank(fbank_options(sr, model.feat_dim))
    s, used, outs, times = LcStream(model), 0, [], []
    for i in range(0, len(samples), piece):
        fb.accept_waveform(float(sr), samples[i : i + piece])
        ready = fb.num_frames_ready
        if ready > used:
            y = s.accept(np.stack([fb.get_frame(k) for k in range(used, ready)]))
            used = ready
            outs.append(y)
            times += [1000.0 * min(i + piece, len(samples)) / sr] * len(y)
    return torch.cat(outs), np.array(times)


def test_click_measures_the_computed_latency():
    """A click in quiet noise: its output frame's posterior moves, and comes out of the stream the computed latency
    after the start of that frame's slot (1 ms pieces of audio); no frame comes out later than that, frames at a
    chunk's start exactly that late, and nothing emitted before the click moves."""
    sr, bins = 16000, 23
    model = _lc_model(feat_dim=bins, layers=2)
    latency = algorithmic_latency_ms(model.cfg)
    rng = np.random.default_rng(0)
    quiet = (rng.standard_normal(int(1.5 * sr)) * 1e-3).astype(np.float32)
    out_ms = S * 10.0
    j = 3 * N  # a chunk's first frame: the worst case
    t_click = j * out_ms + 1.0  # ms, 1 ms into the frame's slot
    click = quiet.copy()
    click[int(t_click * sr / 1000)] = 0.5
    piece = sr // 1000
    y0, times = _stream_audio(model, quiet, sr, piece)
    y1, times1 = _stream_audio(model, click, sr, piece)
    assert np.array_equal(times, times1)
    moved = (y1 - y0).abs().amax(-1) > 1e-4
    assert bool(moved[j]), "the click's frame did not hear it"
    assert not bool(moved[torch.from_numpy(times <= t_click)].any())
    delay = times - np.arange(len(times)) * out_ms  # each frame's emission after its slot's start
    assert delay[j] == pytest.approx(latency, abs=1.0)
    assert delay.max() <= latency + 1.0
    assert np.allclose(delay[::N], latency, atol=1.0)
    measured = times[j] - t_click  # from the click itself: 1 ms less, as it was 1 ms into the slot
    assert measured == pytest.approx(latency - 1.0, abs=1.0)


def test_recogniser_backend_streams_a_saved_lc_model(tmp_path):
    """`asr transcribe`'s torch backend runs a saved LC-BLSTM chunk by chunk: its stream's output, fed in uneven
    pieces of raw fbank, equals the saved model's whole-utterance log-probs (global CMVN applied)."""
    from asrlib.app.model_dir import TorchBackend
    from asrlib.models.saved import load_model, save_model

    model = _lc_model()
    rng = np.random.default_rng(1)
    mean, inv_std = rng.standard_normal(10).astype(np.float32), (1 + rng.random(10)).astype(np.float32)
    save_model(tmp_path / "final.pt", model, mean, inv_std, info={})
    feats = rng.standard_normal((203, 10)).astype(np.float32)
    whole = load_model(tmp_path / "final.pt").log_probs(feats)
    stream = TorchBackend(tmp_path / "final.pt", device="cpu").stream()
    parts, i = [], 0
    for n in [13, 1, 40, 7, 29] * 20:
        if i >= len(feats):
            break
        parts.append(stream.accept(feats[i : i + n]))
        i += n
    parts.append(stream.finish())
    got = np.concatenate(parts)
    assert got.shape == whole.shape
    assert np.allclose(got, whole, atol=1e-5)
    assert len(parts[0]) == 0  # 13 frames: not yet a chunk with its right context


def test_onnx_chunk_model_streams_as_lc_stream(tmp_path):
    """The exported fixed-size chunk model (CMVN folded in), fed raw fbank in uneven pieces through ONNX Runtime,
    equals LcStream on the normalised frames, the last short window included."""
    pytest.importorskip("onnxruntime")
    from asrlib.export.lc_onnx import LcOnnxStream, export_lc_onnx

    with pytest.raises(ValueError, match="proj_size"):
        export_lc_onnx(_lc_model(proj=5), np.zeros(10), np.ones(10), tmp_path / "p.onnx")
    model = _lc_model()
    rng = np.random.default_rng(2)
    mean, inv_std = rng.standard_normal(10).astype(np.float32), (1 + rng.random(10)).astype(np.float32)
    path = export_lc_onnx(model, mean, inv_std, tmp_path / "lc.onnx")
    assert not model.training  # the export leaves the model in eval mode (no dropout in what runs next)
    for t in (30, 64, 203):
        f = rng.standard_normal((t, 10)).astype(np.float32)
        s = LcStream(model)
        ref = torch.cat([s.accept((f - mean) * inv_std), s.finish()]).numpy()
        o = LcOnnxStream(path, N, M, S, 10)
        got = np.concatenate([o.accept(f[i : i + 9]) for i in range(0, t, 9)] + [o.finish()])
        assert got.shape == ref.shape
        assert np.allclose(got, ref, atol=1e-5)
