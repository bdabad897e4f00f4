"""``sync``: synchronous data-parallel SGD, the baseline: every step the gradients are averaged over all learners.

Through torch's ``DistributedDataParallel`` (:mod:`asrlib.parallel.ddp`): the gradients go in buckets (25 MB),
each all-reduced as soon as the backward pass has filled it, so communication overlaps the rest of the backward
pass (NCCL on GPUs, Gloo on the CPU); every learner applies the identical mean, so parameters stay identical on all
learners without ever being sent. A learner without data at a step (test harness only: lhotse gives every learner
the same number of batches) joins with zero gradients, and the mean is then over all learners (DDP's convention).
"""

from __future__ import annotations

from asrlib.parallel.ddp import DdpAlgo, mean_hook


class SyncSgd(DdpAlgo):
    name = "sync"

    def comm_hook(self) -> tuple:
        return self, mean_hook
