"""The seam where a (distributed) training algorithm plugs into the trainer.

The trainer calls, for each step, ``after_backward`` (e.g. gradient all-reduce) and ``after_step`` (e.g. periodic
model averaging, BMUF block update); ``end_epoch`` before the dev loss (each learner sums its share of the dev
batches, combined by ``reduce_metric``) and ``end_training`` after the last epoch (``epoch_scalars`` after each
``end_epoch``: the algorithm's figures for TensorBoard). Each learner's batches come from the data path
(asrlib/train/loader.py: lhotse's sampler with the learner's rank, the same number of batches on every rank); a step
with ``has_data=False`` (a learner without data at that step, e.g. an uneven shard end in the test harness) still
takes part in the step's communication. The algorithm's own state is saved in every checkpoint through
``state_dict`` (called on every learner: it may be collective; rank 0 writes it) and ``rank_state`` (each
learner's own part, written by that learner to a file of its own), restored by ``load_state_dict``. ``LocalAlgo`` is the
single-process algorithm: it does nothing at those points.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch


class TrainAlgo:
    name = "base"
    rank = 0
    world_size = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Called once after the model/optimizer exist (and after a checkpoint was loaded)."""

    def after_backward(self, model: torch.nn.Module, has_data: bool = True) -> bool:
        """Gradients are ready and not yet applied (zero if ``has_data`` is False); return whether to step."""
        return has_data

    def after_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
        """The optimizer has applied this learner's update; ``step`` counts completed steps."""

    def end_epoch(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """The epoch's last step is done (before the dev loss and the epoch checkpoint)."""

    def end_training(self, model: torch.nn.Module) -> None:
        """The last epoch is done: leave the final model in ``model`` (stop background work)."""

    def epoch_scalars(self) -> Dict[str, float]:
        """Figures of the epoch just ended (after ``end_epoch``) for TensorBoard, e.g. ``comm/sent_MB_per_learner``."""
        return {}

    def reduce_metric(self, total: float, count: float) -> tuple:
        """Sum a (total, count) metric over learners (identity for one learner)."""
        return total, count

    def state_dict(self) -> Dict[str, Any]:
        """The algorithm's state in the checkpoint rank 0 writes (called on every learner: it may be collective)."""
        return {}

    def rank_state(self) -> Dict[str, Any]:
        """This learner's own part of the checkpoint, written by this learner to a file of its own ({}: none)."""
        return {}

    def load_state_dict(self, state: Dict[str, Any], mine: Optional[Dict[str, Any]] = None) -> None:
        """``state``: what :meth:`state_dict` gave; ``mine``: this learner's :meth:`rank_state` (None: not there)."""

    def barrier(self) -> None:
        """Wait for every learner (a no-op for one process)."""


class LocalAlgo(TrainAlgo):
    name = "local"
