"""ONNX export of the LSTM(P) model: numerically equal to PyTorch on two lengths (offline and streaming signatures,
peepholes on/off, low-rank bottleneck, CMVN folded; the ``ops``, ``lstm`` and ``hybrid`` recurrences), int8 really
quantized (Scan body and LSTM nodes included) with chunked int8 equal to whole-utterance int8, fp16, clear
errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from asrlib.config import ModelConfig
from asrlib.export import prune
from asrlib.export.onnx_model import (
    OnnxAcousticModel,
    ScanAcousticModel,
    export_onnx,
    ort_session,
    torch_reference,
    verify_onnx,
)
from asrlib.export.quantize import convert_fp16_weights, op_report, quantize_int8
from asrlib.errors import AsrError
from asrlib.models.lstm import build_model

FEAT = 24


def _model(peephole: bool, num_layers: int = 2, seed: int = 0):
    torch.manual_seed(seed)
    m = build_model(
        FEAT,
        9,
        ModelConfig(num_layers=num_layers, hidden_size=48, proj_size=16, peephole=peephole, stack=3, dropout=0.0),
    ).eval()
    rng = np.random.default_rng(seed)
    return m, rng.normal(5, 2, FEAT).astype(np.float32), (1 / rng.uniform(0.5, 3, FEAT)).astype(np.float32)


@pytest.fixture(scope="module")
def peephole_lowrank(tmp_path_factory):
    """Peephole LSTMP with a rank-20 input bottleneck on layer 0: offline + streaming exports."""
    d = tmp_path_factory.mktemp("onnx_peep")
    m, mean, inv = _model(True)
    prune.low_rank_factorize(m, ranks=[20, None])
    core = ScanAcousticModel.from_model(m, mean, inv, frame_local=False)  # layer 0 input transform hoisted
    return (m, mean, inv, export_onnx(core, d / "off.onnx"), export_onnx(core, d / "str.onnx", streaming=True), d)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """nn.LSTM(proj_size) layers (no peepholes), the digits recipe's kind; frame-local (the default)."""
    d = tmp_path_factory.mktemp("onnx_plain")
    m, mean, inv = _model(False, num_layers=3, seed=1)
    return m, mean, inv, export_onnx(ScanAcousticModel.from_model(m, mean, inv), d / "off.onnx"), d


def _no_proj_model(peephole: bool, ranks, seed: int):
    torch.manual_seed(seed)
    m = build_model(
        FEAT, 9, ModelConfig(num_layers=3, hidden_size=20, proj_size=0, peephole=peephole, stack=3, dropout=0.0)
    ).eval()
    prune.low_rank_factorize(m, ranks=ranks)
    rng = np.random.default_rng(seed)
    return m, rng.normal(5, 2, FEAT).astype(np.float32), (1 / rng.uniform(0.5, 3, FEAT)).astype(np.float32)


@pytest.fixture(scope="module")
def lstm_nodes(tmp_path_factory):
    """No recurrent projection, so ONNX LSTM nodes: {recurrence: (model, mean, inv, offline, streaming)} for
    ``hybrid`` (the default; bottlenecks on layers 0 and 1: layer 1's is folded) and ``lstm`` (with peepholes)."""
    d = tmp_path_factory.mktemp("onnx_lstm")
    out = {}
    for rec, peephole, ranks in (("hybrid", False, [10, 8, None]), ("lstm", True, [10, None, 8])):
        m, mean, inv = _no_proj_model(peephole, ranks, seed=3)
        core = ScanAcousticModel.from_model(m, mean, inv, recurrence="auto" if rec == "hybrid" else rec)
        assert core.recurrence == rec
        out[rec] = (
            m,
            mean,
            inv,
            export_onnx(core, d / f"{rec}.onnx"),
            export_onnx(core, d / f"{rec}.str.onnx", streaming=True),
            core,
        )
    return out


def test_offline_matches_torch_on_two_lengths(peephole_lowrank, plain):
    for m, mean, inv, path, *_ in (peephole_lowrank, plain):
        assert verify_onnx(path, m, mean, inv, lengths=(40, 301)) <= 1e-4


def test_int8_lstm_nodes_declare_the_contrib_opset_beside_other_domains(lstm_nodes, tmp_path):
    """DynamicQuantizeLSTM is a com.microsoft op: the int8 model imports that opset once, whatever other domains
    (here one that sorts after it) the float model imports."""
    import onnx

    _, _, _, path, _, _ = next(iter(lstm_nodes.values()))
    model = onnx.load(str(path))
    model.opset_import.append(onnx.helper.make_opsetid("pkg.other", 1))
    onnx.save(model, str(tmp_path / "extra.onnx"))
    quantize_int8(tmp_path / "extra.onnx", tmp_path / "extra.int8.onnx")
    domains = [o.domain for o in onnx.load(str(tmp_path / "extra.int8.onnx")).opset_import]
    assert domains.count("com.microsoft") == 1 and "pkg.other" in domains


def test_lstm_node_recurrences_match_torch(lstm_nodes):
    for rec, (m, mean, inv, path, spath, core) in lstm_nodes.items():
        assert verify_onnx(path, m, mean, inv, lengths=(40, 301)) <= 1e-4, rec
        assert verify_onnx(spath, m, mean, inv, lengths=(33, 150)) <= 1e-4, rec
        assert OnnxAcousticModel(path).meta["recurrence"] == rec
        x = (mean + np.random.default_rng(4).normal(0, 1, (2, 47, FEAT)) / inv).astype(np.float32)
        with torch.no_grad():  # the module itself (torch ops where the export has LSTM nodes) agrees too
            eager = core(torch.from_numpy(x), torch.tensor([47, 47]))[0].numpy()
        assert np.abs(eager - torch_reference(m, mean, inv, x, np.array([47, 47]))).max() <= 1e-4
    scan_body = lambda rep: [x for x in rep["float_matmuls"] if not x.startswith("main_graph/")]  # noqa: E731
    hyb = op_report(lstm_nodes["hybrid"][3])
    assert hyb["ops"]["LSTM"] == 3 and len([x for x in scan_body(hyb) if "(LSTM)" in x]) == 1  # layer 0 per frame
    per_frame = op_report(lstm_nodes["lstm"][3])
    assert per_frame["ops"]["LSTM"] == 3 and all(not x.startswith("main_graph/") for x in per_frame["float_matmuls"])


def test_lstm_nodes_int8_chunked_equals_whole_utterance(lstm_nodes):
    """int8 activation scales per frame (layer 0) or constant (upper layers, output): any chunking gives exactly
    the whole-utterance int8 log-probs."""
    rng = np.random.default_rng(6)
    for rec, (m, mean, inv, path, spath, _) in lstm_nodes.items():
        rep = quantize_int8(path, path.with_suffix(".int8.onnx"))
        assert rep["ops"]["DynamicQuantizeLSTM"] == 3 and "LSTM" not in rep["ops"], rec
        assert rep["float_matmuls"] == [] and rep["float_weights"] == 0, rec
        quantize_int8(spath, spath.with_suffix(".int8.onnx"))
        x = (mean + rng.normal(0, 1, (1, 201, FEAT)) / inv).astype(np.float32)
        fp = OnnxAcousticModel(path).log_probs(x[0])
        q8 = OnnxAcousticModel(path.with_suffix(".int8.onnx")).log_probs(x[0])
        assert 0 < np.abs(q8 - fp).max() < 0.1, rec  # really int8 (not bit-equal), and close
        f16 = OnnxAcousticModel(convert_fp16_weights(path, path.with_suffix(".f16.onnx"))).log_probs(x[0])
        assert np.abs(f16 - fp).max() < 1e-2, rec
        pc = quantize_int8(path, path.with_suffix(".pc.onnx"), per_channel=True)
        assert pc["ops"]["DynamicQuantizeLSTM"] == 3 and pc["float_matmuls"] == [], rec
        assert 0 < np.abs(OnnxAcousticModel(path.with_suffix(".pc.onnx")).log_probs(x[0]) - fp).max() < 0.1, rec
        sess = ort_session(spath.with_suffix(".int8.onnx"))
        h, c = np.zeros((3, 1, 20), np.float32), np.zeros((3, 1, 20), np.float32)
        outs = []
        for a, b in ((0, 30), (30, 33), (33, 99), (99, 201)):
            lp, h, c = sess.run(None, {"x": x[:, a:b], "h": h, "c": c})
            outs.append(lp[0])
        assert np.array_equal(np.concatenate(outs), q8), rec


def test_streaming_signature_matches_torch_and_carries_state(peephole_lowrank):
    m, mean, inv, _, spath, _ = peephole_lowrank
    assert verify_onnx(spath, m, mean, inv, lengths=(33, 150)) <= 1e-4
    sess = ort_session(spath)
    rng = np.random.default_rng(3)
    x = (mean + rng.normal(0, 1, (1, 99, FEAT)) / inv).astype(np.float32)
    ref = torch_reference(m, mean, inv, x, np.array([99]))[0]
    h = np.zeros((2, 1, 16), np.float32)
    c = np.zeros((2, 1, 48), np.float32)
    outs = []
    for a, b in ((0, 30), (30, 33), (33, 99)):  # chunk lengths 30, 3, 66 (multiples of the stack)
        lp, h, c = sess.run(None, {"x": x[:, a:b], "h": h, "c": c})
        outs.append(lp[0])
    assert np.abs(np.concatenate(outs) - ref).max() <= 1e-4


def test_online_cmn_is_in_both_graphs_and_streams_exactly(tmp_path):
    """features.cmvn: online: the causal running mean (CumSum) after the folded global CMVN, offline equal to the
    PyTorch reference; the streaming model carries the running sum and count with (h, c): chunked == whole, in
    fp32 and int8; a model with a different prior weight differs (the prior is really in the graph)."""
    from asrlib.export.runtime import StreamingOnnxModel

    m, mean, inv = _no_proj_model(False, [10, 8, None], seed=3)
    core = ScanAcousticModel.from_model(m, mean, inv, online_prior=30.0)
    off, st = export_onnx(core, tmp_path / "on.onnx"), export_onnx(core, tmp_path / "on.str.onnx", streaming=True)
    assert verify_onnx(off, m, mean, inv, lengths=(40, 301), online_prior=30.0) <= 1e-4
    assert verify_onnx(st, m, mean, inv, lengths=(33, 150), online_prior=30.0) <= 1e-4
    with pytest.raises(AsrError, match="differs from PyTorch"):
        verify_onnx(off, m, mean, inv, lengths=(40, 301), online_prior=5.0)
    with pytest.raises(AsrError, match="differs from PyTorch"):
        verify_onnx(off, m, mean, inv, lengths=(40, 301))  # global only: not the same network
    assert OnnxAcousticModel(off).meta["cmvn"] == "folded+online"
    x = (mean + 2.0 + np.random.default_rng(8).normal(0, 1, (201, FEAT)) / inv).astype(np.float32)  # off-mean
    quantize_int8(off, tmp_path / "on.int8.onnx")
    quantize_int8(st, tmp_path / "on.str.int8.onnx")
    for path, spath in ((off, st), (tmp_path / "on.int8.onnx", tmp_path / "on.str.int8.onnx")):
        whole = OnnxAcousticModel(path).log_probs(x)
        sm = StreamingOnnxModel(spath, FEAT)
        state, outs = sm.zero_state(), []
        assert len(state) == 4
        for a, b in ((0, 30), (30, 33), (33, 99), (99, 201)):
            lp, state = sm.run(x[a:b], state)
            outs.append(lp)
        assert np.abs(np.concatenate(outs) - whole).max() <= (1e-4 if path == off else 0.0), path
        assert float(state[3][0, 0]) == 201.0


def test_padding_does_not_change_valid_frames(plain):
    m, mean, inv, path, _ = plain
    am = OnnxAcousticModel(path)
    rng = np.random.default_rng(5)
    x = (mean + rng.normal(0, 1, (60, FEAT)) / inv).astype(np.float32)
    alone = am.log_probs(x)
    padded = np.concatenate([x, np.full((27, FEAT), -23.0, np.float32)])  # sherpa-onnx pads batches like this
    lp, lens = am.session.run(None, {"x": np.stack([padded, padded]), "x_lens": np.array([60, 87])})
    assert list(lens) == [20, 29]
    assert np.abs(lp[0, :20] - alone).max() <= 1e-5


def test_verify_detects_a_different_model(plain):
    _, mean, inv, path, _ = plain
    other, _, _ = _model(False, num_layers=3, seed=7)
    with pytest.raises(AsrError, match="differs from PyTorch"):
        verify_onnx(path, other, mean, inv, lengths=(30, 60))


def test_int8_quantizes_every_matmul_including_the_scan_body(peephole_lowrank, plain):
    m, mean, inv, path, _, d = peephole_lowrank
    rep = quantize_int8(path, d / "off.int8.onnx")
    scan_body = [x for x in rep["int8_matmuls"] if not x.startswith("main_graph/")]
    # layer 0: W_hh, W_hr; layer 1: W_ih, W_hh, W_hr inside the loop; bottleneck, W_ih0 and output outside
    assert len(scan_body) == 5 and len(rep["int8_matmuls"]) == 8, rep["int8_matmuls"]
    assert rep["float_matmuls"] == [] and rep["float_weights"] == 0
    assert rep["ops"].get("Sigmoid") and rep["ops"].get("Tanh")  # gates stay float32
    rng = np.random.default_rng(1)
    x = (mean + rng.normal(0, 1, (200, FEAT)) / inv).astype(np.float32)
    fp = OnnxAcousticModel(path).log_probs(x)
    q8 = OnnxAcousticModel(d / "off.int8.onnx").log_probs(x)
    assert np.abs(q8 - fp).max() < 0.3
    assert (q8.argmax(1) == fp.argmax(1)).mean() > 0.9
    # frame-local model: every product inside the loop; int8 weights (+ ~14 kB of graph) vs 129 kB of fp32 weights
    _, _, _, ppath, pd = plain
    quantize_int8(ppath, pd / "off.int8.onnx")
    assert (pd / "off.int8.onnx").stat().st_size < 0.4 * ppath.stat().st_size
    assert all(not x.startswith("main_graph/") for x in op_report(pd / "off.int8.onnx")["int8_matmuls"])
    meta = OnnxAcousticModel(pd / "off.int8.onnx").session.get_modelmeta().custom_metadata_map
    assert meta["precision"] == "int8" and meta["recurrence"] == "ops"  # LSTMP: no ONNX LSTM node, the auto pick


def test_fp16_weights(plain):
    _, mean, inv, path, d = plain
    convert_fp16_weights(path, d / "off.fp16.onnx")
    assert op_report(d / "off.fp16.onnx")["ops"]["Cast"] >= 7
    rng = np.random.default_rng(2)
    x = (mean + rng.normal(0, 1, (90, FEAT)) / inv).astype(np.float32)
    a = OnnxAcousticModel(path).log_probs(x)
    b = OnnxAcousticModel(d / "off.fp16.onnx").log_probs(x)
    assert np.abs(a - b).max() < 1e-2
    assert (d / "off.fp16.onnx").stat().st_size < 0.6 * path.stat().st_size


def test_clear_errors(plain, tmp_path):
    _, _, _, path, _ = plain
    am = OnnxAcousticModel(path)
    with pytest.raises(AsrError, match="expects 24-dim frames"):
        am.log_probs(np.zeros((50, 80), np.float32))
    with pytest.raises(AsrError, match="does not exist"):
        OnnxAcousticModel(tmp_path / "missing.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(AsrError, match="cannot load"):
        OnnxAcousticModel(tmp_path / "junk.onnx")
    bi = build_model(FEAT, 9, ModelConfig(num_layers=1, hidden_size=8, proj_size=4, bidirectional=True))
    with pytest.raises(AsrError, match="bidirectional"):
        ScanAcousticModel.from_model(bi, np.zeros(FEAT), np.ones(FEAT))
    lstmp = build_model(FEAT, 9, ModelConfig(num_layers=1, hidden_size=8, proj_size=4))
    with pytest.raises(AsrError, match="no recurrent projection"):
        ScanAcousticModel.from_model(lstmp, np.zeros(FEAT), np.ones(FEAT), recurrence="hybrid")
    with pytest.raises(AsrError, match="recurrence must be one of"):
        ScanAcousticModel.from_model(lstmp, np.zeros(FEAT), np.ones(FEAT), recurrence="gru")


def test_folded_search_is_in_the_output_and_taken_out_for_log_probs(tmp_path):
    """fold_search(scale, penalty): the exported output (what sherpa-onnx searches) is (log-softmax - penalty at the
    blank) x scale, offline and streaming, fp32 and int8; the metadata says so, and the runtime's log_probs (and
    verify_onnx) take it out again; the unfolded model is not folded."""
    from asrlib.export.runtime import StreamingOnnxModel, folded_search

    m, mean, inv = _model(False, num_layers=2, seed=4)
    core = ScanAcousticModel.from_model(m, mean, inv).fold_search(2.0, 1.5)
    off, st = export_onnx(core, tmp_path / "f.onnx"), export_onnx(core, tmp_path / "f.str.onnx", streaming=True)
    plain = export_onnx(ScanAcousticModel.from_model(m, mean, inv), tmp_path / "p.onnx")
    assert verify_onnx(off, m, mean, inv, lengths=(40, 99)) <= 1e-4
    assert verify_onnx(st, m, mean, inv, lengths=(33, 150)) <= 1e-4
    x = (mean + np.random.default_rng(9).normal(0, 1, (99, FEAT)) / inv).astype(np.float32)
    ref = torch_reference(m, mean, inv, x[None], np.array([99]))[0]
    shift = np.zeros(ref.shape[1], np.float32)
    shift[0] = 1.5
    am = OnnxAcousticModel(off)
    assert folded_search(am.meta) == (2.0, 1.5) and folded_search(OnnxAcousticModel(plain).meta) == (1.0, 0.0)
    assert np.abs(am.scores(x) - (ref - shift) * 2.0).max() <= 2e-4  # what sherpa-onnx gets
    assert np.abs(am.log_probs(x) - ref).max() <= 1e-4
    assert np.abs(OnnxAcousticModel(plain).scores(x) - ref).max() <= 1e-4
    quantize_int8(off, tmp_path / "f.int8.onnx")
    quantize_int8(st, tmp_path / "f.str.int8.onnx")
    q8 = OnnxAcousticModel(tmp_path / "f.int8.onnx")
    assert folded_search(q8.meta) == (2.0, 1.5)  # the metadata survives quantization
    assert np.abs(np.exp(q8.log_probs(x)).sum(axis=1) - 1).max() <= 1e-4  # probabilities again
    sm = StreamingOnnxModel(tmp_path / "f.str.int8.onnx", FEAT)
    lp, _ = sm.run(x, sm.zero_state())
    assert sm.search == (2.0, 1.5) and np.abs(lp - q8.log_probs(x)).max() <= 1e-5
    with pytest.raises(AsrError, match="must be > 0"):
        ScanAcousticModel.from_model(m, mean, inv).fold_search(0.0, 1.0)
