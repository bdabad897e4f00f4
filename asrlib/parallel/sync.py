"""``sync``: synchronous data-parallel SGD, the baseline: every step the gradients are averaged over all learners.

One coalesced all-reduce per step of ``[w*grad..., w]`` (``w`` = 1 if the learner had data this step, 0 on the
padding steps at an uneven shard end), so the update is the mean over the learners that had data and every
learner applies the identical update: parameters stay identical on all learners without ever being sent.

(This is what DistributedDataParallel computes; it is done explicitly after ``backward`` rather than with DDP's
bucketed hooks so that a learner without data can take part with weight 0 instead of hanging or halving the step.)
"""

from __future__ import annotations

import torch

from asrlib.parallel.base import DistAlgo


class SyncSgd(DistAlgo):
    name = "sync"
    per_rank_model = False  # identical on every learner: rank 0's model in the checkpoint is everyone's

    def after_backward(self, model: torch.nn.Module, has_data: bool = True) -> bool:
        self.begin_update()
        return self.allreduce_grads(has_data)
