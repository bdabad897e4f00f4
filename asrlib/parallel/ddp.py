"""What ``sync`` and ``powersgd`` share: the gradient averaging of torch's ``DistributedDataParallel`` (bucketed
all-reduces that start during the backward pass as each bucket's gradients are ready, so communication overlaps
computation), with one DDP communication hook per algorithm.

How it plugs into the trainer, which calls the bare model: DDP wraps the model, and forward hooks on the model run
DDP's own pre- and post-forward (what ``DistributedDataParallel.forward`` does around ``module.forward``), so DDP's
reducer sees the backward pass and calls the hook per bucket. The bucket layout is fixed at set-up (the rebuild DDP
would do after the first step is done at once, on every learner, from the parameter order), so it is the same in a
resumed run, and per-bucket state (PowerSGD's error feedback) fits it.

A learner without data at a step (an uneven shard end: lhotse gives every learner the same number of batches, so
only the test harness makes these) joins the step the way ``torch.distributed.algorithms.Join`` does for DDP: it runs
the same hook on zero buckets and applies the result, so every learner takes the identical step. As in DDP, the hook
divides by the number of learners, so on such a step the update is the sum over the learners with data divided by
all learners.

The hooks are Python functions calling ``torch.distributed``, so :mod:`asrlib.parallel.meter` counts their bytes
(DDP's built-in C++ all-reduce would be invisible to it). Works with Gloo on the CPU and NCCL on CUDA (the model on
``cuda:LOCAL_RANK``, ``device_ids`` set).
"""

from __future__ import annotations

import warnings
from typing import Any, List

import torch
from torch.nn.parallel import DistributedDataParallel

from asrlib.parallel.base import DistAlgo


class DdpAlgo(DistAlgo):
    per_rank_model = False  # identical on every learner: rank 0's model in the checkpoint is everyone's
    bucket_mb = 25.0  # DDP's default bucket size

    def __init__(self, cfg, info=None):
        super().__init__(cfg, info)
        self.ddp = None
        self._hooks: List[Any] = []

    def comm_hook(self) -> tuple:
        """(state, hook) for ``DistributedDataParallel.register_comm_hook``."""
        raise NotImplementedError

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self._attach(model)
        super().setup(model, optimizer)  # restores this learner's hook state on resume (load_local)

    def _attach(self, model: torch.nn.Module) -> None:
        dev = next(model.parameters()).device
        with warnings.catch_warnings():  # torch 2.13: broadcast_buffers is deprecated, its successor syncs at init
            warnings.simplefilter("ignore", FutureWarning)
            self.ddp = DistributedDataParallel(
                model,
                device_ids=[dev.index] if dev.type == "cuda" else None,
                broadcast_buffers=False,
                bucket_cap_mb=self.bucket_mb,
                init_sync=False,  # DistAlgo.setup broadcasts rank 0's model (or each learner restores its own)
            )
        red = self.ddp.reducer  # the bucket rebuild of the first step, now, the same on every learner
        red._push_all_rebuilt_params()
        red._rebuild_buckets()
        self.ddp._has_rebuilt_buckets = True
        self.ddp.register_comm_hook(*self.comm_hook())
        ddp = self.ddp

        def pre(module, args, kwargs):
            return ddp._pre_forward(*args, **kwargs)

        def post(module, args, output):
            return ddp._post_forward(output)

        self._hooks = [
            model.register_forward_pre_hook(pre, with_kwargs=True),
            model.register_forward_hook(post),
        ]

    def after_backward(self, model: torch.nn.Module, has_data: bool = True) -> bool:
        """DDP has averaged the gradients during backward; a learner without data joins with zero buckets."""
        self.begin_update()
        if not has_data:
            with self.stats.timed():
                buckets = self.ddp.reducer._get_zeros_like_grad_buckets()
                futs = [self.ddp.reducer._run_comm_hook(b) for b in buckets]
                for b, fut in zip(buckets, futs):
                    flat = fut.wait()
                    flat = flat[0] if isinstance(flat, list) else flat
                    offset = 0
                    for p in b.parameters():
                        p.grad = flat[offset : offset + p.numel()].view_as(p).clone()
                        offset += p.numel()
        return True

    def stop(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def buckets(self) -> int:
        return len(self.ddp.reducer._get_zeros_like_grad_buckets())


def mean_hook(algo: DistAlgo, bucket):  # (no return annotation: DDP checks it against its own)
    """``sync``'s hook: torch's plain all-reduce hook (divide the bucket by the learners, all-reduce it), with the
    bucket's bytes in the algorithm's communication statistics."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    buf = bucket.buffer()
    algo.stats.all_reduce(buf.numel() * buf.element_size(), algo.world_size)
    return default_hooks.allreduce_hook(None, bucket)
