"""Compression: SVD bottlenecks (exact at full rank, fewer parameters at low rank), magnitude pruning whose masks
survive fine-tuning with the recipe's Trainer, and the compressed model file round trip."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from asrlib.config import ModelConfig, load_config
from asrlib.export import prune
from asrlib.errors import AsrError
from asrlib.models.lstm import build_model, count_parameters
from helpers import make_toy_ctc_setup, toy_config_yaml


@pytest.mark.parametrize("peephole", [False, True])
def test_full_rank_factorisation_is_exact_and_low_rank_is_smaller(peephole):
    torch.manual_seed(0)
    m = build_model(20, 5, ModelConfig(num_layers=2, hidden_size=24, proj_size=12, peephole=peephole)).eval()
    x, lens = torch.randn(2, 45, 20), torch.tensor([45, 31])
    with torch.no_grad():
        ref = m(x, lens)[0]
    full = build_model(20, 5, m.cfg).eval()
    full.load_state_dict(m.state_dict())
    assert prune.low_rank_factorize(full, ranks=[60, 12]) == [60, 12]
    with torch.no_grad():
        assert (full(x, lens)[0] - ref).abs().max() < 1e-5
    n0 = count_parameters(m)
    before = [prune._input_weight(layer).detach().double().clone() for layer in m.layers]
    ranks = prune.low_rank_factorize(m, rank_ratio=0.2)  # W_ih0 96x60 -> rank 12, W_ih1 96x12 -> rank 3
    assert ranks == [12, 3]
    for w, layer, r in zip(before, m.layers, ranks):
        # the bottleneck is the best rank-r approximation (Eckart-Young): the error's energy is exactly that of
        # the singular values left out, the r largest kept (a factorisation that kept others would miss this)
        approx_w = prune._input_weight(layer.inner).double() @ layer.proj.weight.double()
        s = torch.linalg.svdvals(w)
        assert float(((w - approx_w) ** 2).sum()) == pytest.approx(float((s[r:] ** 2).sum()), rel=1e-4)
        assert torch.allclose(torch.linalg.svdvals(approx_w)[:r], s[:r], rtol=1e-4)
    assert count_parameters(m) == n0 - 96 * 60 + 12 * (96 + 60) - 96 * 12 + 3 * (96 + 12)
    with torch.no_grad():
        approx = m(x, lens)[0]
    assert approx.shape == ref.shape and torch.isfinite(approx).all()
    assert prune.choose_rank(96, 12, 0.7) is None and prune.choose_rank(1024, 240, 0.5) == 120


def test_pruning_masks_survive_finetuning_and_file_round_trip(tmp_path):
    root = make_toy_ctc_setup(tmp_path / "toy", num_utts={"train": 24, "dev": 6})
    cfg = load_config(toy_config_yaml(tmp_path / "c.yaml"), ["export.finetune_epochs=1", "export.finetune_lr=0.005"])
    torch.manual_seed(0)
    m = build_model(20, 5, cfg.model)
    masks = prune.magnitude_prune(m, 0.6)
    assert abs(prune.sparsity_of(m) - 0.6) < 0.01
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    summary = prune.finetune(m, cfg, root / "fbank", root / "data", root / "lang", tmp_path / "ft", masks=masks)
    assert summary["steps"] > 0 and np.isfinite(summary["final_dev_loss"])
    after = dict(m.named_parameters())
    for name, mask in masks.items():
        assert (after[name][~mask] == 0).all(), name  # pruned entries stayed zero
        assert not torch.equal(after[name][mask], before[name][mask])  # the others were trained
    assert abs(prune.sparsity_of(m) - 0.6) < 0.01
    prune.save_compressed(tmp_path / "pruned.pt", m, np.zeros(20), np.ones(20), [None], prune.sparsity_of(m))
    back = prune.load_compressed(tmp_path / "pruned.pt")
    x, lens = torch.randn(1, 30, 20), torch.tensor([30])
    with torch.no_grad():
        assert torch.equal(back.model(x, lens)[0], m.eval()(x, lens)[0])


def test_compressed_file_with_bottleneck_round_trip(tmp_path):
    torch.manual_seed(1)
    m = build_model(20, 5, ModelConfig(num_layers=2, hidden_size=24, proj_size=12, peephole=False)).eval()
    ranks = prune.low_rank_factorize(m, ranks=[10, None])
    prune.save_compressed(tmp_path / "c.pt", m, np.zeros(20), np.ones(20), ranks, 0.0)
    back = prune.load_compressed(tmp_path / "c.pt").model
    x, lens = torch.randn(1, 21, 20), torch.tensor([21])
    with torch.no_grad():
        assert torch.equal(back(x, lens)[0], m(x, lens)[0])
    with pytest.raises(AsrError, match="does not exist"):
        prune.load_compressed(tmp_path / "nope.pt")
    with pytest.raises(AsrError, match="sparsity"):
        prune.magnitude_prune(m, 1.0)


def test_nonzero_parameters_count_negative_and_positive_weights():
    """The bundle's figure of what pruning kept (steps.export_mobile's nonzero_params): every weight that is not
    zero, whatever its sign."""
    layer = torch.nn.Linear(2, 2)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[-1.0, 0.0], [2.0, 0.0]]))
        layer.bias.copy_(torch.tensor([0.0, -3.0]))
    assert prune.count_nonzero_parameters(layer) == 3
