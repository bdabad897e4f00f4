"""The weights of a trained LSTM(P) acoustic model's layers as plain tensors (:class:`LayerWeights`), read from
any of its layer implementations, for :class:`asrlib.export.onnx_model.ScanAcousticModel` to lay out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch import nn

from asrlib.errors import AsrError


@dataclass
class LayerWeights:
    """One unidirectional LSTM(P) layer in nn.LSTM's gate order (i, f, g, o); plain tensors."""

    w_ih: torch.Tensor  # (4H, in) or (4H, r) after a bottleneck
    bias: torch.Tensor  # (4H,) = bias_ih + bias_hh
    w_hh: torch.Tensor  # (4H, P)
    w_hr: Optional[torch.Tensor] = None  # (P, H) recurrent projection, None when proj_size == 0
    w_in: Optional[torch.Tensor] = None  # (r, in) low-rank input bottleneck, None when absent
    peep: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None  # (w_ci, w_cf, w_co), each (H,)

    @property
    def hidden(self) -> int:
        return self.w_hh.shape[0] // 4

    @property
    def state(self) -> int:
        return self.w_hh.shape[1]


def layer_weights(layer: nn.Module) -> LayerWeights:
    """Weights of one layer of StackedLstmAcousticModel (``_TorchLstmLayer`` or ``_PeepholeLayer``), or of a
    bottleneck wrapper (``.proj`` Linear + ``.inner`` layer, see :mod:`asrlib.export.prune`)."""
    if hasattr(layer, "inner") and hasattr(layer, "proj"):
        lw = layer_weights(layer.inner)
        lw.w_in = layer.proj.weight.detach().clone()
        return lw
    if hasattr(layer, "lstm"):  # torch.nn.LSTM
        lstm = layer.lstm
        if lstm.bidirectional:
            raise AsrError(
                "bidirectional models cannot be exported for mobile/streaming use (they need the whole "
                "utterance); train with model.bidirectional: false"
            )
        g = lambda n: getattr(lstm, n).detach().clone()  # noqa: E731
        return LayerWeights(
            g("weight_ih_l0"),
            g("bias_ih_l0") + g("bias_hh_l0"),
            g("weight_hh_l0"),
            g("weight_hr_l0") if lstm.proj_size > 0 else None,
        )
    if hasattr(layer, "fwd"):  # peephole LstmpLayer
        if layer.bwd is not None:
            raise AsrError(
                "bidirectional models cannot be exported for mobile/streaming use (they need the whole "
                "utterance); train with model.bidirectional: false"
            )
        f = layer.fwd
        d = lambda p: p.detach().clone()  # noqa: E731
        return LayerWeights(
            d(f.weight_ih),
            d(f.bias_ih) + d(f.bias_hh),
            d(f.weight_hh),
            d(f.weight_hr) if f.weight_hr is not None else None,
            None,
            (d(f.w_ci), d(f.w_cf), d(f.w_co)) if f.peephole else None,
        )
    raise AsrError(f"cannot export layer of type {type(layer).__name__}")
