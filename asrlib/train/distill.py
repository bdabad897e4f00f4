"""Teacher-student training (``train.distill``): the CTC criterion plus the KL divergence from a trained teacher's
frame posteriors, e.g. an offline BLSTM teaching a streaming model what it would say with the whole utterance.

Per batch: the teacher (a saved model, :func:`asrlib.models.saved.load_model`, frozen, in eval mode) runs on the
student's batch as the student sees it (same speed perturbation, joins and SpecAugment masks: a "consistent" teacher,
Beyer et al. 2022), after the batch's normalisation is swapped for the teacher's own CMVN. The loss per output frame:

    (1 - w) * CTC  +  w * T^2 * sum_v p_T(v) (log p_T(v) - log q_T(v))

with p_T / q_T the teacher's / student's posteriors softened by the temperature T (softmax of log-prob / T), summed
over the batch's real (unpadded) output frames. The teacher and student must emit the same frames and tokens: same
feature dim, frame stacking and vocabulary (checked when the teacher is loaded, naming its file).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from asrlib.config import DistillConfig
from asrlib.errors import AsrError
from asrlib.features.cmvn import check_cmvn_mode
from asrlib.models.saved import load_model
from asrlib.train.criterion import Criterion, CtcCriterion


def frame_kl(teacher: torch.Tensor, student: torch.Tensor, lengths: torch.Tensor, temperature: float) -> torch.Tensor:
    """Sum over the real frames of KL(teacher || student) between log-prob tensors (N, T, V), both softened by
    ``temperature``, times ``temperature``² (the gradient's scale stays that of T = 1)."""
    t = temperature
    log_p = (teacher.float() / t).log_softmax(-1)
    log_q = (student.float() / t).log_softmax(-1)
    per_frame = (log_p.exp() * (log_p - log_q)).sum(-1)  # (N, T)
    mask = torch.arange(per_frame.shape[1], device=lengths.device)[None, :] < lengths[:, None]
    return (per_frame * mask.to(per_frame.device)).sum() * (t * t)


class DistillCriterion(Criterion):
    """CTC plus ``weight`` × KL from the teacher's posteriors; the dev metrics give both parts (per frame)."""

    name, label = "ctc_kd", "CTC+KD"
    extra_metrics = ("ctc", "kl")

    def __init__(
        self,
        teacher: torch.nn.Module,
        weight: float,
        temperature: float,
        shift: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
    ):
        """``shift``: (scale, offset) per feature dim taking the student's normalised input to the teacher's
        (``None``: the same normalisation)."""
        if not 0.0 <= weight <= 1.0:
            raise AsrError(f"train.distill.weight must be in [0, 1], not {weight}")
        if temperature <= 0:
            raise AsrError(f"train.distill.temperature must be > 0, not {temperature}")
        self.teacher, self.weight, self.temperature, self.shift = teacher, weight, temperature, shift
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        self.teacher.eval()

    def _teacher_log_probs(self, feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        if next(self.teacher.parameters()).device != feats.device:
            self.teacher.to(feats.device)
        if self.shift is not None:
            scale, offset = (v.to(feats.device) for v in self.shift)
            feats = feats * scale + offset
        with torch.no_grad():
            self.teacher.eval()  # the trainer puts only the student in train mode
            logp, _ = self.teacher(feats, lengths)
        return logp

    def _parts(self, model: torch.nn.Module, batch: Dict[str, torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, int]:
        logp, out_lens = model(batch["feats"], batch["feat_lens"])
        teacher = self._teacher_log_probs(batch["feats"], batch["feat_lens"])
        if teacher.shape != logp.shape:
            raise AsrError(f"the teacher gives log-probs {tuple(teacher.shape)}, the student {tuple(logp.shape)}")
        ctc = torch.nn.functional.ctc_loss(
            logp.float().transpose(0, 1),
            batch["targets"],
            out_lens,
            batch["target_lens"],
            blank=0,
            reduction="sum",
            zero_infinity=True,
        )
        kl = frame_kl(teacher, logp, out_lens, self.temperature)
        return ctc, kl, int(out_lens.sum())

    def loss(self, model: torch.nn.Module, batch: Dict[str, torch.Tensor]) -> Tuple[torch.Tensor, float, int]:
        ctc, kl, frames = self._parts(model, batch)
        total = (1.0 - self.weight) * ctc + self.weight * kl
        return total / frames, float(total.detach()), frames

    def evaluate(self, model: torch.nn.Module, batch: Dict[str, torch.Tensor]) -> Dict[str, float]:
        ctc, kl, frames = self._parts(model, batch)
        total = (1.0 - self.weight) * ctc + self.weight * kl
        return {"loss": float(total), "count": frames, "ctc": float(ctc), "kl": float(kl)}


def normalisation_shift(
    student_mean: np.ndarray, student_inv_std: np.ndarray, teacher_mean: np.ndarray, teacher_inv_std: np.ndarray
) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
    """(scale, offset) with ``z_teacher = z_student * scale + offset`` for global CMVNs (x - mean) * inv_std; ``None``
    when the two are the same (the teacher trained on the same training set's statistics)."""
    sm, si, tm, ti = (np.asarray(v, np.float64) for v in (student_mean, student_inv_std, teacher_mean, teacher_inv_std))
    if sm.shape == tm.shape and np.allclose(sm, tm, atol=1e-6) and np.allclose(si, ti, rtol=1e-6):
        return None
    scale = ti / si
    offset = (sm - tm) * ti
    return torch.tensor(scale, dtype=torch.float32), torch.tensor(offset, dtype=torch.float32)


def make_criterion(
    cfg: DistillConfig, cmvn_mode: str, feat_dim: int, vocab: int, stack: int, mean: np.ndarray, inv_std: np.ndarray
) -> Criterion:
    """The CTC stage's criterion: plain CTC, or with ``cfg.teacher`` the distillation one (the teacher checked against
    the student's input and output: ``feat_dim``, ``vocab``, ``stack``, ``cmvn_mode``; ``mean``/``inv_std``: the
    student's global CMVN)."""
    if not cfg.teacher:
        return CtcCriterion()
    path = Path(cfg.teacher)
    saved = load_model(path)  # a clear error when it is missing; safe loading (no pickle)
    t = saved.model
    wrong = [
        f"{what} {got} (the student's: {want})"
        for what, got, want in (
            ("feature dim", t.feat_dim, feat_dim),
            ("vocabulary", t.vocab_size, vocab),
            ("frame stacking", t.stack, stack),
            ("mean normalisation", saved.cmn or "global", check_cmvn_mode(cmvn_mode) or "global"),
        )
        if got != want
    ]
    if wrong:
        raise AsrError(f"train.distill.teacher {path} cannot teach this model: its {', '.join(wrong)}")
    if saved.online_prior is not None:
        raise AsrError(f"train.distill.teacher {path}: a model with features.cmvn online cannot teach (yet)")
    shift = normalisation_shift(mean, inv_std, saved.cmvn_mean, saved.cmvn_inv_std)
    return DistillCriterion(t, cfg.weight, cfg.temperature, shift)
