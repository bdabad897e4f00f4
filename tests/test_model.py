"""The LSTM(P) layer: equal to torch.nn.LSTM without peepholes, correct gradients with peepholes/projection."""

import torch

from asrlib.config import ModelConfig
from asrlib.models.lstm import LstmpLayer, _TorchLstmLayer, build_model


def _copy_from_torch(layer: LstmpLayer, ref: torch.nn.LSTM) -> None:
    with torch.no_grad():
        layer.weight_ih.copy_(ref.weight_ih_l0)
        layer.weight_hh.copy_(ref.weight_hh_l0)
        layer.bias_ih.copy_(ref.bias_ih_l0)
        layer.bias_hh.copy_(ref.bias_hh_l0)
        if layer.weight_hr is not None:
            layer.weight_hr.copy_(ref.weight_hr_l0)


def test_cell_equals_torch_lstm_without_peepholes():
    torch.manual_seed(0)
    for proj in (0, 5):
        ref = torch.nn.LSTM(7, 9, batch_first=True, proj_size=proj)
        layer = LstmpLayer(7, 9, proj_size=proj, peephole=False)
        _copy_from_torch(layer, ref)
        x = torch.randn(3, 11, 7)
        y_ref, (h_ref, c_ref) = ref(x)
        y, (h, c) = layer(x)
        assert torch.allclose(y, y_ref, atol=1e-5)
        assert torch.allclose(h, h_ref[0], atol=1e-5) and torch.allclose(c, c_ref[0], atol=1e-5)


def test_peephole_changes_output_and_gradients_check():
    torch.manual_seed(0)
    layer = LstmpLayer(3, 4, proj_size=2, peephole=True).double()
    x = torch.randn(2, 5, 3, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(lambda inp: layer(inp)[0], (x,))
    # peephole and projection weights themselves
    params = [layer.w_ci, layer.w_cf, layer.w_co, layer.weight_hr]

    # gradcheck via functional_call keeps autograd through the parameters
    from torch.func import functional_call

    names = ["w_ci", "w_cf", "w_co", "weight_hr"]
    inputs = tuple(p.detach().clone().requires_grad_(True) for p in params)
    assert torch.autograd.gradcheck(lambda *ps: functional_call(layer, dict(zip(names, ps)), (x.detach(),))[0], inputs)
    with torch.no_grad():
        layer.w_co.add_(1.0)
    assert not torch.allclose(layer(x.detach())[0], functional_call(layer, dict(zip(names, inputs)), (x.detach(),))[0])


def test_acoustic_model_shapes_and_lengths():
    for peephole, bidir in [(False, False), (True, False), (False, True), (True, True)]:
        cfg = ModelConfig(num_layers=2, hidden_size=16, proj_size=8, peephole=peephole, bidirectional=bidir, stack=3)
        m = build_model(10, 6, cfg).eval()
        x = torch.randn(2, 31, 10)
        lens = torch.tensor([31, 20])
        logp, out_lens = m(x, lens)
        assert logp.shape == (2, 10, 6) and out_lens.tolist() == [10, 6]
        assert torch.allclose(logp.exp().sum(-1), torch.ones(2, 10), atol=1e-5)
        # padding must not change the shorter utterance's output (unidirectional and bidirectional)
        alone, _ = m(x[1:2, :20], lens[1:2])
        assert torch.allclose(alone[0], logp[1, :6], atol=1e-5)


def test_peephole_model_with_zero_peepholes_equals_the_fused_model():
    """model.peephole switches implementation (explicit cell vs torch.nn.LSTM): with the peephole weights at zero
    and the same other weights, whole acoustic models agree, bidirectional and with padding included."""
    torch.manual_seed(0)
    for bidir in (False, True):
        kw = dict(num_layers=2, hidden_size=12, proj_size=6, bidirectional=bidir, stack=3, dropout=0.0)
        fused = build_model(10, 7, ModelConfig(peephole=False, **kw)).eval()
        cell = build_model(10, 7, ModelConfig(peephole=True, **kw)).eval()
        sd = fused.state_dict()
        with torch.no_grad():
            for i, layer in enumerate(cell.layers):
                for direction, sub in (("", layer.fwd), ("_reverse", layer.bwd)):
                    if sub is None:
                        continue
                    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr"):
                        getattr(sub, name).copy_(sd[f"layers.{i}.lstm.{name}_l0{direction}"])
                    for name in ("w_ci", "w_cf", "w_co"):
                        getattr(sub, name).zero_()
            cell.output.load_state_dict(fused.output.state_dict())
        x, lens = torch.randn(3, 40, 10), torch.tensor([40, 31, 17])
        a, la = fused(x, lens)
        b, lb = cell(x, lens)
        assert torch.equal(la, lb)
        for n, t in enumerate(la.tolist()):  # padded frames may differ (the fused layer zeroes them)
            assert torch.allclose(a[n, :t], b[n, :t], atol=1e-5), (bidir, n)


def test_forward_only_fused_layer_on_the_padded_batch_equals_packing():
    """The forward-only fused layer runs on the padded batch (torch's CPU oneDNN kernel takes equal lengths only):
    its outputs and input gradients equal those of the packed computation, with zeros past each utterance."""
    torch.manual_seed(0)
    for proj in (0, 4):
        layer = _TorchLstmLayer(6, 8, proj, bidirectional=False)
        x = torch.randn(3, 12, 6, requires_grad=True)
        lens = torch.tensor([12, 7, 3])
        y = layer(x, lens)
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lens, batch_first=True, enforce_sorted=False)
        ref, _ = torch.nn.utils.rnn.pad_packed_sequence(layer.lstm(packed)[0], batch_first=True, total_length=12)
        assert torch.allclose(y, ref, atol=1e-6)
        assert float(y[1, 7:].abs().sum()) == 0.0 and float(y[2, 3:].abs().sum()) == 0.0
        w = torch.randn_like(y)
        (g,) = torch.autograd.grad((y * w).sum(), x)
        (g_ref,) = torch.autograd.grad((ref * w).sum(), x)
        assert torch.allclose(g, g_ref, atol=1e-6)
        assert float(g[2, 3:].abs().sum()) == 0.0  # the padding gets no gradient
