"""Model compression before export: low-rank (SVD) input projections and magnitude pruning, each followed by short
fine-tuning with the recipe's own :class:`~asrlib.train.trainer.Trainer`.

**Low rank** (:func:`low_rank_factorize`): each LSTM layer's input matrix ``W_ih`` (4H × in) is replaced by its
truncated SVD ``A·B`` with ``A = U_r·diag(s_r)`` (4H × r) and ``B = V_rᵀ`` (r × in): ``B`` becomes a linear
projection layer in front of the LSTM (:class:`BottleneckLayer`) and ``A`` the LSTM's new (smaller) input matrix,
so the fused ``nn.LSTM`` kernel still trains it. ``r = ceil(rank_ratio · min(4H, in))``; a matrix is factored only
when that saves at least a quarter of its parameters. The recurrent matrices already have the projection
(``proj_size``) as their low-rank factor.

**Pruning** (:func:`magnitude_prune`): in every weight matrix (input bottlenecks, W_ih, W_hh, W_hr, output layer;
not biases or peepholes) the ``sparsity`` fraction of entries with the smallest magnitude is set to zero. The
masks are kept during fine-tuning by :class:`MaskedAlgo` (re-applied after every optimizer step), so the
fine-tuned model has exactly the requested sparsity. Zeros do not shrink a dense ONNX file, but they make the
int8 file compress well (zero stays exactly 0 under symmetric int8 quantization): see ``bytes_zip`` in the size
report.

A compressed model is saved by :func:`save_compressed` as the usual ``final.pt`` layout (:mod:`asrlib.models.saved`)
plus ``compression`` = ``{"ranks": [...], "sparsity": s}``; :func:`load_compressed` rebuilds the structure and
reads either kind of file.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch
from torch import nn

from asrlib.config import RecipeConfig
from asrlib.features.cmvn import check_cmvn_mode, online_prior
from asrlib.errors import AsrError, PathLike
from asrlib.models.lstm import StackedLstmAcousticModel
from asrlib.models.saved import SavedModel, load_model, save_model
from asrlib.train.algo import LocalAlgo

log = logging.getLogger(__name__)


class BottleneckLayer(nn.Module):
    """A linear projection (no bias) to ``rank`` dims in front of an LSTM layer: ``inner(proj(x))``."""

    def __init__(self, proj: nn.Linear, inner: nn.Module):
        super().__init__()
        self.proj, self.inner = proj, inner
        self.output_size = inner.output_size

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.inner(self.proj(x), lengths)


def _input_weight(layer: nn.Module) -> nn.Parameter:
    if hasattr(layer, "lstm"):
        if layer.lstm.bidirectional:
            raise AsrError("low-rank factorisation supports unidirectional layers only")
        return layer.lstm.weight_ih_l0
    if hasattr(layer, "fwd"):
        if layer.bwd is not None:
            raise AsrError("low-rank factorisation supports unidirectional layers only")
        return layer.fwd.weight_ih
    raise AsrError(f"cannot factor a layer of type {type(layer).__name__}")


def _with_input_size(layer: nn.Module, rank: int, new_w_ih: torch.Tensor) -> nn.Module:
    """A copy of ``layer`` (same class, weights) whose input size is ``rank`` and input matrix ``new_w_ih``."""
    if hasattr(layer, "lstm"):
        lstm = layer.lstm
        new = type(layer)(rank, lstm.hidden_size, lstm.proj_size, False)
        sd = {k: v for k, v in layer.state_dict().items() if k != "lstm.weight_ih_l0"}
        sd["lstm.weight_ih_l0"] = new_w_ih
    else:
        f = layer.fwd
        new = type(layer)(rank, f.hidden_size, f.proj_size, False)
        sd = {k: v for k, v in layer.state_dict().items() if k != "fwd.weight_ih"}
        sd["fwd.weight_ih"] = new_w_ih
    new.load_state_dict(sd)
    return new


def choose_rank(rows: int, cols: int, rank_ratio: float) -> Optional[int]:
    """The rank for a (rows × cols) matrix, or None when factoring would save less than a quarter of it."""
    if rank_ratio <= 0:
        return None
    r = max(1, math.ceil(rank_ratio * min(rows, cols)))
    return r if r * (rows + cols) <= 0.75 * rows * cols else None


@torch.no_grad()
def low_rank_factorize(
    model: StackedLstmAcousticModel, rank_ratio: float = 0.0, ranks: Optional[List[Optional[int]]] = None
) -> List[Optional[int]]:
    """Replace layer input matrices by rank-r bottlenecks in place; returns the rank per layer (None = kept).

    ``ranks`` (from a saved model) overrides ``rank_ratio``. A layer that already has a bottleneck is skipped.
    ``rank_ratio`` 0 and no ``ranks``: nothing to do, for any layer type (an LC-BLSTM's too)."""
    if ranks is None and rank_ratio <= 0:
        return [layer.proj.out_features if isinstance(layer, BottleneckLayer) else None for layer in model.layers]
    if ranks is not None and all(r is None for r in ranks):
        return list(ranks)
    out: List[Optional[int]] = []
    for i, layer in enumerate(model.layers):
        if isinstance(layer, BottleneckLayer):
            out.append(layer.proj.out_features)
            continue
        w = _input_weight(layer)
        r = ranks[i] if ranks is not None else choose_rank(w.shape[0], w.shape[1], rank_ratio)
        if r is None:
            out.append(None)
            continue
        u, s, vh = torch.linalg.svd(w.detach().double(), full_matrices=False)
        a = (u[:, :r] * s[:r]).float()
        b = vh[:r].float()
        proj = nn.Linear(w.shape[1], r, bias=False)
        proj.weight.copy_(b)
        model.layers[i] = BottleneckLayer(proj, _with_input_size(layer, r, a))
        kept = float((s[:r] ** 2).sum() / (s**2).sum())
        (log.debug if ranks is not None else log.info)(
            "layer %d: W_ih %s -> rank %d (%.1f%% of the squared singular values)", i, tuple(w.shape), r, 100 * kept
        )
        out.append(r)
    return out


def prunable_weights(model: nn.Module) -> Dict[str, nn.Parameter]:
    """The weight matrices subject to pruning: every ≥ 2-dim parameter (biases and peepholes are 1-dim) but the
    look-ahead convolution's per-channel filters (K + 1 weights a channel, not a matrix)."""
    return {n: p for n, p in model.named_parameters() if p.dim() >= 2 and not n.startswith("lookahead.")}


@torch.no_grad()
def magnitude_prune(model: nn.Module, sparsity: float) -> Dict[str, torch.Tensor]:
    """Zero the ``sparsity`` fraction of smallest-magnitude entries of every weight matrix; returns the keep-masks."""
    if not 0.0 <= sparsity < 1.0:
        raise AsrError(f"export.sparsity must be in [0, 1), not {sparsity}")
    masks: Dict[str, torch.Tensor] = {}
    for name, p in prunable_weights(model).items():
        k = int(round(sparsity * p.numel()))
        mask = torch.ones_like(p, dtype=torch.bool)
        if k > 0:
            idx = torch.argsort(p.detach().abs().flatten(), stable=True)[:k]
            mask.view(-1)[idx] = False
        p.mul_(mask)
        masks[name] = mask
    return masks


def sparsity_of(model: nn.Module) -> float:
    """Fraction of exactly-zero entries over all prunable weight matrices."""
    ws = list(prunable_weights(model).values())
    return float(sum(int((w == 0).sum()) for w in ws) / max(1, sum(w.numel() for w in ws)))


class MaskedAlgo(LocalAlgo):
    """Single-process training that keeps pruned weights at zero (masks re-applied after every step)."""

    name = "local-masked"

    def __init__(self, masks: Dict[str, torch.Tensor]):
        self.masks = masks

    def after_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
        params = dict(model.named_parameters())
        with torch.no_grad():
            for name, mask in self.masks.items():
                if mask.device != params[name].device:  # the training device (train.device)
                    self.masks[name] = mask = mask.to(params[name].device)
                params[name].mul_(mask)

    def end_training(self, model: nn.Module) -> None:
        self.after_step(model, None, -1)


def finetune(
    model: nn.Module,
    cfg: RecipeConfig,
    feats_dir: Path,
    data_dir: Path,
    lang_dir: Path,
    exp_dir: Path,
    masks: Optional[Dict[str, torch.Tensor]] = None,
    train_set: str = "train",
    dev_set: str = "dev",
    device: Optional[torch.device] = None,
) -> dict:
    """Fine-tune ``model`` in place with the recipe's Trainer for ``export.finetune_epochs`` epochs at
    ``export.finetune_lr`` (short warm-up, cosine decay) over ``export.finetune_utts`` random training utterances
    (0 = all), keeping ``masks``; resumable from ``exp_dir``. Runs on ``device`` (the caller's resolved
    ``train.device``; None: resolved by the Trainer); ``model`` is back on the CPU afterwards."""
    from asrlib.train.loader import CtcTargets, CutData, open_set
    from asrlib.train.trainer import Trainer

    ex = cfg.export
    if ex.finetune_epochs <= 0:
        return {"steps": 0, "epochs": 0, "final_dev_loss": None}
    tcfg = dataclasses.replace(
        cfg.train,
        epochs=ex.finetune_epochs,
        lr=ex.finetune_lr,
        warmup_steps=min(cfg.train.warmup_steps, 20),
        scheduler="warmup_cosine",
        dist=dataclasses.replace(cfg.train.dist, algo="local"),
        kill_after_steps=0,
    )
    ft_cfg = dataclasses.replace(cfg, train=tcfg)
    cmvn = Path(feats_dir) / train_set / "cmvn.scp"
    exp_dir = Path(exp_dir)
    exp_dir.mkdir(parents=True, exist_ok=True)

    targets = CtcTargets(lang_dir, model.stack)

    def dataset(name: str) -> CutData:  # the model's own normalisation: global, or global + online
        return open_set(
            Path(feats_dir) / name,
            targets,
            cmvn,
            check_cmvn_mode(cfg.features.cmvn),
            online_prior(cfg.features),
            cfg.train.loader,
            excluded_path=exp_dir / f"excluded_{name}.txt",
            data_dir=Path(data_dir) / name,
        )

    train_ds = dataset(train_set)
    train_ds.keep_random(ex.finetune_utts, tcfg.seed)
    torch.manual_seed(tcfg.seed)
    algo = MaskedAlgo(masks) if masks else LocalAlgo()
    trainer = Trainer(ft_cfg, model, train_ds, dataset(dev_set), exp_dir, algo=algo, device=device)
    summary = trainer.fit()  # on train.device
    model.cpu()  # pruning, factorising and the ONNX export work on the CPU copy
    if masks:
        masks.update({k: v.cpu() for k, v in masks.items()})
    return summary


# ---------------------------------------------------------------------------------------------- files
def save_compressed(
    path: PathLike,
    model: StackedLstmAcousticModel,
    cmvn_mean: np.ndarray,
    cmvn_inv_std: np.ndarray,
    ranks: List[Optional[int]],
    sparsity: float,
    info: Optional[dict] = None,
) -> None:
    """Like :func:`asrlib.models.saved.save_model`, plus the compression spec needed to rebuild the structure."""
    save_model(
        Path(path),
        model,
        cmvn_mean,
        cmvn_inv_std,
        info,
        extra={"compression": {"ranks": list(ranks), "sparsity": float(sparsity)}},
    )


def _rebuild_bottlenecks(model: StackedLstmAcousticModel, st: dict) -> None:
    comp = st.get("compression")
    if comp and any(r is not None for r in comp["ranks"]):
        low_rank_factorize(model, ranks=comp["ranks"])


def load_compressed(path: PathLike) -> SavedModel:
    """Read a ``final.pt`` or a compressed model file (rebuilding its bottlenecks)."""
    return load_model(Path(path), restructure=_rebuild_bottlenecks)


def count_nonzero_parameters(model: nn.Module) -> int:
    return int(sum(int((p != 0).sum()) for p in model.parameters()))
