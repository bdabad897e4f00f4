"""What the training loop optimises: how a batch's loss is computed (the batch itself, with the targets the
criterion needs, comes from the data path: :mod:`asrlib.train.loader` with :class:`~asrlib.train.loader.CtcTargets`
or :class:`asrlib.train.ce.FrameTargets`).

The trainer (:class:`asrlib.train.trainer.Trainer`) is one loop for every criterion; a criterion supplies

- ``loss(model, batch)``: ``(mean loss to backpropagate, summed loss, count)``, the count being what the loss is
  averaged over (output frames);
- ``evaluate(model, batch)``: sums for the dev set, ``{"loss", "count"}`` plus the names in ``extra_metrics``
  (each a sum over the same count, e.g. correctly classified frames), so every learner reports the same keys.

:class:`CtcCriterion` (the spine's CTC) and :class:`asrlib.train.ce.CeCriterion` (frame cross-entropy) are the two.
"""

from __future__ import annotations

from typing import Dict, Tuple

import torch
from torch.nn import functional as F


class Criterion:
    name = "base"
    label = "?"  # in log lines: "dev <label> loss per frame"
    extra_metrics: Tuple[str, ...] = ()

    def loss(self, model: torch.nn.Module, batch: Dict[str, torch.Tensor]) -> Tuple[torch.Tensor, float, int]:
        raise NotImplementedError

    def evaluate(self, model: torch.nn.Module, batch: Dict[str, torch.Tensor]) -> Dict[str, float]:
        _, total, count = self.loss(model, batch)
        return {"loss": total, "count": count}


class CtcCriterion(Criterion):
    """CTC over the model's output frames (blank = token 0)."""

    name, label = "ctc", "CTC"

    def loss(self, model: torch.nn.Module, batch: Dict[str, torch.Tensor]) -> Tuple[torch.Tensor, float, int]:
        """Mean CTC loss per output frame of the batch; returns (loss, summed loss, output frames)."""
        logp, out_lens = model(batch["feats"], batch["feat_lens"])
        total = F.ctc_loss(
            logp.float().transpose(0, 1),  # in fp32 under autocast (a no-op in fp32)
            batch["targets"],
            out_lens,
            batch["target_lens"],
            blank=0,
            reduction="sum",
            zero_infinity=True,
        )
        frames = int(out_lens.sum())
        return total / frames, float(total.detach()), frames
