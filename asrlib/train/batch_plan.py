"""What the training process tells a loader worker about one batch beyond its cuts: the steps of
:meth:`asrlib.train.loader.CutData.mixed` that the worker carries out on the features it reads, each drawn in the
training process from an RNG seeded by the batch's place in the run (so any number of workers, and a resumed run,
make the same batch)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import List, Optional, Tuple

from lhotse import CutSet


@dataclass
class BatchPlan:
    """A batch's cuts; per cut, how many frames its start and its end move (> 0: frames added;
    ``train.boundary_jitter``, :mod:`asrlib.train.jitter`); and the seed of the batch's SpecAugment draws
    (``train.spec_augment_in: loader``, :class:`asrlib.train.augment.LoaderAugment`). ``None``: not done."""

    cuts: CutSet
    moves: Optional[List[Tuple[int, int]]] = None
    seed: Optional[int] = None

    @staticmethod
    def of(batch) -> "BatchPlan":
        """``batch`` as a plan: a CutSet gets one with nothing to do beyond reading it."""
        return batch if isinstance(batch, BatchPlan) else BatchPlan(batch)


def batch_rng(step: str, *place) -> random.Random:
    """The RNG of one step's draws for one batch, seeded by the step's name and the batch's place in the run
    (seed, epoch, [rank,] batch index): the same in any worker, on any rerun."""
    return random.Random("/".join(map(str, (step, *place))))
