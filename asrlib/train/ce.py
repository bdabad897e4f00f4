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
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.nn import functional as F

from asrlib.features.cmvn import load_cmvn
from asrlib.errors import AsrError, PathLike
from asrlib.io.tables import read_table
from asrlib.kaldi_io import read_int_vectors
from asrlib.train.criterion import Criterion
from asrlib.train.data import FeatureSet, Utterance, report_excluded

log = logging.getLogger(__name__)
IGNORE = -100


def subsample_targets(frame_targets: np.ndarray, stack: int) -> np.ndarray:
    """10 ms targets -> one target per output frame: the middle frame of each stack."""
    n_out = len(frame_targets) // stack
    return np.asarray(frame_targets[stack // 2 : n_out * stack : stack][:n_out], dtype=np.int64)


def _reasons(path: Path) -> Dict[str, str]:
    return {u: r for u, r in read_table(path)} if path.is_file() else {}


class FrameTargetDataset(FeatureSet):
    """Utterances with features (global CMVN) and per-frame class targets from an alignment directory.

    Utterances with features but no alignment (with the aligner's reason when its ``excluded.txt`` gives one), a
    length mismatch between features and alignment, a target outside ``[0, num_classes)`` or too many frames are
    excluded and listed in ``excluded_path``.
    """

    def __init__(
        self,
        feats_scp: PathLike,
        ali_dir: PathLike,
        cmvn_scp: PathLike,
        num_classes: int,
        excluded_path: Optional[PathLike] = None,
        max_frames: int = 3000,
        stack: int = 3,
        cmn: str = "",
    ):
        ali_dir = Path(ali_dir)
        self._init_features(Path(feats_scp), cmn, load_cmvn(cmvn_scp))
        targets = read_int_vectors(ali_dir / "pdf.scp")
        why = _reasons(ali_dir / "excluded.txt")
        u2n = Path(feats_scp).parent / "utt2num_frames"
        nframes = {k: int(v) for k, v in read_table(u2n)} if u2n.is_file() else None
        self.utts: List[Utterance] = []
        self.targets: Dict[str, np.ndarray] = {}
        excluded: List[Tuple[str, str]] = []
        for utt in self.reader.keys():
            n = nframes[utt] if nframes is not None and utt in nframes else self.reader[utt].shape[0]
            if utt not in targets:
                excluded.append((utt, f"no alignment: {why.get(utt, f'not in {ali_dir}/pdf.scp')}"))
                continue
            t = targets[utt]
            if len(t) != n:
                excluded.append(
                    (utt, f"alignment has {len(t)} frames, features {n} (stale alignment? rerun steps.align)")
                )
            elif t.size and (t.min() < 0 or t.max() >= num_classes):
                excluded.append((utt, f"target outside [0, {num_classes}) (alignment from another model?)"))
            elif n > max_frames:
                excluded.append((utt, f"too long: {n} frames > max {max_frames} (memory budget)"))
            elif n // stack < 1:
                excluded.append((utt, f"too short: {n} frames < one output frame of {stack}"))
            else:
                self.utts.append(Utterance(utt, n, []))
                self.targets[utt] = t
        for utt in targets:
            if utt not in self.reader:
                excluded.append((utt, f"aligned but not in {feats_scp}"))
        report_excluded(excluded, len(self.utts), feats_scp, excluded_path)
        if not self.utts:
            raise AsrError(f"no utterance of {feats_scp} has a usable alignment in {ali_dir}; see {excluded_path}")
        self.by_id = {u.utt: u for u in self.utts}


class CeCriterion(Criterion):
    """Frame cross-entropy at the network's frame rate; dev metric ``frame_acc`` (fraction of frames correct)."""

    name, label = "ce", "CE"
    extra_metrics = ("frame_acc",)

    def __init__(self, stack: int):
        self.stack = stack

    def collate(self, ds: FrameTargetDataset, utt_ids: Sequence[str]) -> Dict[str, torch.Tensor]:
        feats = [ds.features(u) for u in utt_ids]
        lens = torch.tensor([f.shape[0] for f in feats], dtype=torch.long)
        x = torch.zeros(len(feats), int(lens.max()), feats[0].shape[1])
        tgt = torch.full((len(feats), int(lens.max()) // self.stack), IGNORE, dtype=torch.long)
        for i, (u, f) in enumerate(zip(utt_ids, feats)):
            x[i, : f.shape[0]] = torch.from_numpy(f)
            t = subsample_targets(ds.targets[u], self.stack)
            tgt[i, : len(t)] = torch.from_numpy(t)
        return {"feats": x, "feat_lens": lens, "frame_targets": tgt}

    def _forward(self, model, batch):
        logp, _ = model(batch["feats"], batch["feat_lens"])
        tgt = batch["frame_targets"][:, : logp.shape[1]]
        return logp, tgt

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
    keys = ("num_layers", "hidden_size", "proj_size", "peephole", "bidirectional", "stack")
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
