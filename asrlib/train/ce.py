"""Frame-level cross-entropy training on GMM alignments, and CTC initialised from the cross-entropy model.

Targets: the pdf ids of ``steps.align`` (``pdf.scp``), one per 10 ms frame. The network stacks ``stack``
consecutive frames into one output frame (30 ms for stack 3): output frame k sees input frames
``[k*stack, (k+1)*stack)`` and its target is the label of the middle one, ``k*stack + stack//2`` (frames after
the last whole stack are dropped, as the model drops them).

:func:`init_from_ce` copies everything but the output layer from a cross-entropy model into a CTC model of the
same architecture: the CTC model keeps its own freshly initialised output layer over tokens + blank.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from torch.nn import functional as F

from asrlib.errors import AsrError, PathLike
from asrlib.io.tables import read_table
from asrlib.train.criterion import Criterion
from asrlib.train.loader import num_frames, pad_features

log = logging.getLogger(__name__)
IGNORE = -100


def subsample_targets(frame_targets: np.ndarray, stack: int) -> np.ndarray:
    """10 ms targets -> one target per output frame: the middle frame of each stack."""
    n_out = len(frame_targets) // stack
    return np.asarray(frame_targets[stack // 2 : n_out * stack : stack][:n_out], dtype=np.int64)


def _reasons(path: Path) -> Dict[str, str]:
    return {u: r for u, r in read_table(path)} if path.is_file() else {}


class FrameTargets:
    """Per-frame class targets of a cut from an alignment directory (``pdf.scp``, read per cut).

    A cut with no alignment (with the aligner's reason when its ``excluded.txt`` gives one), a length mismatch
    between features and alignment, a target outside ``[0, num_classes)`` or too many frames cannot be trained on
    (:meth:`check` says why; the data path lists it).
    """

    def __init__(self, ali_dir: PathLike, num_classes: int, max_frames: int = 3000, stack: int = 3) -> None:
        from asrlib.kaldi_io import read_scp

        self.ali_dir = Path(ali_dir)
        self.rx = read_scp(self.ali_dir / "pdf.scp")
        self.why = _reasons(self.ali_dir / "excluded.txt")
        self.num_classes, self.max_frames, self.stack = num_classes, max_frames, stack

    def _read(self, utt: str) -> np.ndarray:
        import kaldi_native_io as knio

        return np.asarray(knio.read_int32_vector(self.rx[utt]), dtype=np.int64)

    def check(self, cut) -> Optional[str]:
        if cut.id not in self.rx:
            return f"no alignment: {self.why.get(cut.id, f'not in {self.ali_dir}/pdf.scp')}"
        t, n = self._read(cut.id), num_frames(cut)
        if len(t) != n:
            return f"alignment has {len(t)} frames, features {n} (stale alignment? rerun steps.align)"
        if t.size and (t.min() < 0 or t.max() >= self.num_classes):
            return f"target outside [0, {self.num_classes}) (alignment from another model?)"
        if n > self.max_frames:
            return f"too long: {n} frames > max {self.max_frames} (memory budget)"
        if n // self.stack < 1:
            return f"too short: {n} frames < one output frame of {self.stack}"
        return None

    def targets(self, cut) -> np.ndarray:
        return subsample_targets(self._read(cut.id), self.stack)

    def collate(self, feats: List[np.ndarray], targets: List[np.ndarray]) -> Dict[str, torch.Tensor]:
        x, lens = pad_features(feats)
        tgt = torch.full((len(feats), int(lens.max()) // self.stack), IGNORE, dtype=torch.long)
        for i, t in enumerate(targets):
            tgt[i, : len(t)] = torch.from_numpy(t)
        return {"feats": x, "feat_lens": lens, "frame_targets": tgt}


class CeCriterion(Criterion):
    """Frame cross-entropy at the network's frame rate; dev metric ``frame_acc`` (fraction of frames correct)."""

    name, label = "ce", "CE"
    extra_metrics = ("frame_acc",)

    def __init__(self, stack: int):
        self.stack = stack

    def _forward(self, model, batch):
        logp, _ = model(batch["feats"], batch["feat_lens"])
        tgt = batch["frame_targets"][:, : logp.shape[1]]
        return logp.float(), tgt  # the loss in fp32 under autocast (a no-op in fp32)

    def loss(self, model: torch.nn.Module, batch: Dict[str, torch.Tensor]) -> Tuple[torch.Tensor, float, int]:
        logp, tgt = self._forward(model, batch)
        total = F.nll_loss(logp.reshape(-1, logp.shape[-1]), tgt.reshape(-1), ignore_index=IGNORE, reduction="sum")
        count = int((tgt != IGNORE).sum())
        return total / max(count, 1), float(total.detach()), count

    def evaluate(self, model: torch.nn.Module, batch: Dict[str, torch.Tensor]) -> Dict[str, float]:
        logp, tgt = self._forward(model, batch)
        mask = tgt != IGNORE
        total = F.nll_loss(logp.reshape(-1, logp.shape[-1]), tgt.reshape(-1), ignore_index=IGNORE, reduction="sum")
        correct = int(((logp.argmax(-1) == tgt) & mask).sum())
        return {"loss": float(total), "count": int(mask.sum()), "frame_acc": float(correct)}


def init_from_ce(model: torch.nn.Module, ce_path: PathLike) -> Dict[str, object]:
    """Copy every parameter but the output layer from the cross-entropy model at ``ce_path`` into ``model``.

    The two must have the same feature dimension and LSTM architecture (the ``model`` section of the config;
    dropout may differ). Returns what was copied.
    """
    from asrlib.models.saved import load_model

    ce_path = Path(ce_path)
    if not ce_path.is_file():
        raise AsrError(
            f"train.init is 'ce' but the cross-entropy model {ce_path} does not exist; run steps.train_ce first"
        )
    ce = load_model(ce_path).model
    keys = ("num_layers", "hidden_size", "proj_size", "peephole", "bidirectional", "stack", "chunk_frames", "lookahead")
    diff = {k: (getattr(ce.cfg, k), getattr(model.cfg, k)) for k in keys if getattr(ce.cfg, k) != getattr(model.cfg, k)}
    if diff or ce.feat_dim != model.feat_dim:
        if ce.feat_dim != model.feat_dim:
            diff["feat_dim"] = (ce.feat_dim, model.feat_dim)
        raise AsrError(
            f"{ce_path} has another architecture than this model {diff} (CE, CTC): train the CE model "
            f"with the same model settings"
        )
    src = {k: v for k, v in ce.state_dict().items() if not k.startswith("output.")}
    missing, unexpected = model.load_state_dict(src, strict=False)
    if unexpected or any(not k.startswith("output.") for k in missing):
        raise AsrError(f"{ce_path}: parameters do not match ({unexpected or missing})")
    n = sum(v.numel() for v in src.values())
    log.info(
        "initialised %d tensors (%d parameters) from %s; output layer (%d classes -> %d tokens) is new",
        len(src),
        n,
        ce_path,
        ce.vocab_size,
        model.vocab_size,
    )
    return {"init": "ce", "init_model": str(ce_path), "init_tensors": len(src), "init_parameters": n}
