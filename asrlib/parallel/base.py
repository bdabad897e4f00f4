"""What every distributed algorithm shares: disjoint per-learner data shards padded to equal length, flat
parameter/gradient buffers, per-learner checkpoint state, metric reduction and communication accounting.

Bytes: every algorithm's traffic is measured at the ``torch.distributed`` calls (:mod:`asrlib.parallel.meter`);
each epoch's training bytes per learner (checkpoint gathers and dev-loss reductions apart) go to the training log,
``log/dist.rank<R>.json`` and TensorBoard (``comm/sent_MB_per_learner``, mean and max over the learners).

Uneven shard ends: an epoch's batches are dealt round-robin to the learners (deterministic in seed, epoch and
rank), and every shard is padded with empty batches ``[]`` to the longest shard's length. On an empty batch the
trainer computes nothing but still calls the algorithm's hooks, so every learner takes part in the same sequence of
synchronisations and no learner waits forever for one that ran out of data (the CNTK/fairseq deadlock). How an
empty batch counts is up to the algorithm (weight 0 in a gradient average; no local update, but a share in the
model average).

Checkpoints: rank 0 writes the checkpoint (the trainer's state, with the algorithm's shared state from
:meth:`state_dict`, which may be collective: in-flight exchanges are brought to rest first); every learner writes
its own part, :meth:`rank_state` (its RNG states and, where learners' models can differ (all but ``sync`` and
``powersgd``), its model and optimizer state), into a file of its own beside it (``checkpoints/ranks/``, see
:mod:`asrlib.train.checkpoint`), so no learner ever holds N learners' states. Resuming with the same number of
learners restores each learner exactly; with another number, every learner starts from rank 0's model.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist

from asrlib.config import DistConfig
from asrlib.parallel import meter
from asrlib.parallel.env import DistInfo, init_process_group
from asrlib.parallel.stats import CommStats
from asrlib.train.algo import TrainAlgo
from asrlib.train.checkpoint import rng_state, set_rng_state, to_cpu

log = logging.getLogger(__name__)


def flatten(tensors: Sequence[torch.Tensor], device: Optional[torch.device] = None) -> torch.Tensor:
    """One contiguous 1-D copy of ``tensors`` (on ``device``)."""
    flat = torch.cat([t.detach().reshape(-1) for t in tensors])
    return flat.to(device) if device is not None else flat


def unflatten_into(flat: torch.Tensor, tensors: Sequence[torch.Tensor]) -> None:
    """Copy consecutive slices of ``flat`` into ``tensors`` (in place)."""
    offset = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(flat[offset : offset + n].view_as(t))
            offset += n


class DistAlgo(TrainAlgo):
    """Base of the torch.distributed algorithms (see the module docstring for the shared rules)."""

    name = "dist"
    per_rank_model = True  # learners' models can differ: checkpoint every learner's model and optimizer

    def __init__(self, cfg: DistConfig, info: Optional[DistInfo] = None):
        self.cfg = cfg
        self.info = info or init_process_group(cfg)
        self.rank, self.world_size = self.info.rank, self.info.world_size
        self.device = self.info.device
        self.meter = meter.install()  # bytes handed to torch.distributed, measured at the calls
        self.stats = CommStats()  # training thread
        self.bg_stats = CommStats()  # background communication threads
        self.lock = threading.RLock()  # guards parameters against background merges (async algorithms)
        self.model: Optional[torch.nn.Module] = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self._resume: Optional[Dict[str, Any]] = None
        self._resume_mine: Optional[Dict[str, Any]] = None
        self._rank_part: Dict[str, Any] = {}
        self._epoch_mark = (CommStats(), time.perf_counter())
        self._meter_mark = self._meter_start = self.meter.snapshot()
        self.epoch_stats: List[Dict[str, float]] = []
        self._scalars: Dict[str, float] = {}
        self.steps_done = 0  # completed training steps (the trainer's step counter)
        self._t_cycle: Optional[float] = None

    # ------------------------------------------------------------------ data
    def reduce_metric(self, total: float, count: float) -> tuple:
        t = torch.tensor([float(total), float(count)], dtype=torch.float64, device=self.device)
        with self.meter.category("bookkeeping"):
            dist.all_reduce(t)
        return float(t[0]), float(t[1])

    # ------------------------------------------------------------------ parameters
    def params(self) -> List[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def flat_params(self, device: Optional[torch.device] = None) -> torch.Tensor:
        return flatten(self.params(), device or self.device)

    def set_flat_params(self, flat: torch.Tensor) -> None:
        unflatten_into(flat, self.params())

    def allreduce_grads(self, has_data: bool, group=None, group_size: Optional[int] = None) -> bool:
        """Average gradients over ``group``, weighting each learner by whether it had data this step.

        One coalesced all-reduce of [w * grads..., w]; returns False when no learner of the group had data.
        """
        n = group_size or self.world_size
        params = self.params()
        w = 1.0 if has_data else 0.0
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.detach().reshape(-1) for g in grads] + [grads[0].new_ones(1)]).to(self.device)
        if w != 1.0:
            flat.mul_(w)
        with self.stats.timed():
            dist.all_reduce(flat, group=group)
        self.stats.all_reduce(flat.numel() * flat.element_size(), n)
        total = float(flat[-1])
        if total == 0.0:
            return False
        flat = flat[:-1].div_(total).to(params[0].device)
        for p, g in zip(params, grads):
            p.grad = g
        unflatten_into(flat, [p.grad for p in params])
        return True

    def average_params(self, group=None, group_size: Optional[int] = None) -> None:
        """Replace every learner's parameters by their mean over ``group``."""
        n = group_size or self.world_size
        flat = self.flat_params()
        with self.stats.timed():
            dist.all_reduce(flat, group=group)
        self.stats.all_reduce(flat.numel() * flat.element_size(), n)
        self.set_flat_params(flat.div_(n))

    def broadcast_params(self, src: int = 0, group=None, group_size: Optional[int] = None) -> None:
        n = group_size or self.world_size
        flat = self.flat_params()
        with self.stats.timed():
            dist.broadcast(flat, src=src, group=group)
        self.stats.broadcast(flat.numel() * flat.element_size(), n, self.rank == src)
        self.set_flat_params(flat)

    def sync_during_warmup(self, has_data: bool) -> bool:
        """``after_backward`` of the algorithms with a synchronous warm-up (bmuf, diloco): gradient all-reduce for
        the first ``train.dist.warmup_steps`` steps, local steps after."""
        self.begin_update()
        if self.steps_done < self.cfg.warmup_steps:
            return self.allreduce_grads(has_data)
        return has_data

    def begin_update(self) -> None:
        """First thing in every ``after_backward``: times the step cycle (backward-to-backward, within an epoch)
        and, as a benchmark aid, makes the configured straggler learner sleep."""
        if self.cfg.straggler_sleep > 0 and self.rank == self.cfg.straggler_rank:
            time.sleep(self.cfg.straggler_sleep)
        now = time.perf_counter()
        if self._t_cycle is not None:
            self.stats.cycle_s += now - self._t_cycle
            self.stats.cycles += 1
        self._t_cycle = now

    # ------------------------------------------------------------------ hooks
    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model, self.optimizer = model, optimizer
        st, mine = self._resume, self._resume_mine
        if st is not None and mine is None and st.get("world_size") == self.world_size and st.get("per_rank"):
            mine = st["per_rank"][self.rank]  # a checkpoint of an older asrlib: every learner's part in one file
        if mine is not None:
            if "model" in mine:
                model.load_state_dict(mine["model"])
                optimizer.load_state_dict(mine["optimizer"])
            set_rng_state(mine["rng"])
            self.steps_done = st.get("steps", 0)
            self.load_local({k: v for k, v in mine.items() if k not in ("rng", "model", "optimizer")})
            self.load_shared(st.get("shared", {}))
            log.info(
                "learner %d/%d: restored its own model, optimizer, RNG and %s state",
                self.rank,
                self.world_size,
                self.name,
            )
        else:
            if st is not None:
                log.warning(
                    "checkpoint was written by %s learners, now %d: every learner restarts from rank 0's "
                    "model and the %s state starts afresh",
                    st.get("world_size"),
                    self.world_size,
                    self.name,
                )
            self.broadcast_params(0)
            if self.rank > 0:  # own dropout / SpecAugment randomness per learner
                seed = torch.initial_seed() + 1000003 * self.rank
                torch.manual_seed(seed)
                np.random.seed(seed % 2**32)
                random.seed(seed)
            self.init_state()
        self._epoch_mark = (self.total_stats(), time.perf_counter())
        self._meter_mark = self._meter_start = self.meter.snapshot()
        self.start()

    def after_backward(self, model: torch.nn.Module, has_data: bool = True) -> bool:
        self.begin_update()
        return has_data

    def after_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
        """Subclasses call this first: it counts the step."""
        self.steps_done = step
        self.stats.steps += 1

    def end_epoch(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self._t_cycle = None  # the dev loss and checkpoint between epochs are not part of a step
        self.sync_epoch()
        now, t = self.total_stats(), time.perf_counter()
        d = (now - self._epoch_mark[0]).as_dict()
        d["wall_s"] = t - self._epoch_mark[1]
        self._epoch_mark = (now, t)
        d.update(self._measured_epoch_bytes())
        self.epoch_stats.append(d)
        log.info(
            "learner %d/%d %s epoch: %d steps in %.1f s (%.3f s per step); sent %.2f MB, received %.2f MB "
            "in %d messages; blocked in communication %.2f s, waiting %.2f s, background communication %.2f s",
            self.rank,
            self.world_size,
            self.name,
            d["steps"],
            d["wall_s"],
            d["cycle_s"] / max(d["cycles"], 1),
            d["sent_bytes"] / 1e6,
            d["recv_bytes"] / 1e6,
            d["messages"],
            d["comm_s"],
            d["wait_s"],
            d["background_comm_s"],
        )
        log.info(
            "learner %d/%d %s epoch: measured at the torch.distributed calls: sent %d bytes (%.3f MB), received "
            "%d bytes in %d calls; over the %d learners %.3f MB sent per learner (mean), %.3f MB (max)",
            self.rank,
            self.world_size,
            self.name,
            d["measured_sent_bytes"],
            d["measured_sent_bytes"] / 1e6,
            d["measured_recv_bytes"],
            d["measured_calls"],
            self.world_size,
            d["measured_sent_bytes_mean"] / 1e6,
            d["measured_sent_bytes_max"] / 1e6,
        )

    def _measured_epoch_bytes(self) -> Dict[str, float]:
        """This epoch's training bytes (measured) of this learner, and their mean and max over the learners (one
        small all-gather, booked as bookkeeping)."""
        now = self.meter.snapshot()
        mine = {k: now[k] - self._meter_mark[k] for k in now}
        self._meter_mark = now
        t = torch.tensor([mine["sent_bytes"]], dtype=torch.float64, device=self.device)
        every = [torch.zeros_like(t) for _ in range(self.world_size)]
        with self.meter.category("bookkeeping"):
            dist.all_gather(every, t)
        sent = [float(x) for x in every]
        self._scalars = {
            "comm/sent_MB_per_learner": sum(sent) / len(sent) / 1e6,
            "comm/sent_MB_max_learner": max(sent) / 1e6,
        }
        return {
            "measured_sent_bytes": int(mine["sent_bytes"]),
            "measured_recv_bytes": int(mine["recv_bytes"]),
            "measured_calls": int(mine["calls"]),
            "measured_sent_bytes_mean": sum(sent) / len(sent),
            "measured_sent_bytes_max": max(sent),
        }

    def epoch_scalars(self) -> Dict[str, float]:
        return dict(self._scalars)

    def end_training(self, model: torch.nn.Module) -> None:
        self.stop()

    # ------------------------------------------------------------------ algorithm-specific parts
    def init_state(self) -> None:
        """Fresh algorithm state (after the initial broadcast)."""

    def start(self) -> None:
        """Start background threads, if any."""

    def stop(self) -> None:
        """Stop background threads and leave every learner with the final model."""

    def sync_epoch(self) -> None:
        """Called at the end of every epoch, before the dev loss."""

    def quiesce(self) -> None:
        """Bring in-flight background exchanges to rest before a checkpoint (collective)."""

    def shared_state(self) -> Dict[str, Any]:
        return {}

    def load_shared(self, state: Dict[str, Any]) -> None:
        pass

    def local_state(self) -> Dict[str, Any]:
        """Extra per-learner state (beyond model, optimizer, RNG)."""
        return {}

    def load_local(self, state: Dict[str, Any]) -> None:
        pass

    # ------------------------------------------------------------------ checkpoint state
    def state_dict(self) -> Dict[str, Any]:
        """Collective: bring exchanges in flight to rest; the state shared by the learners (rank 0 writes it). This
        learner's own part is taken at the same moment and handed out by :meth:`rank_state`."""
        self.quiesce()
        with self.lock:
            mine: Dict[str, Any] = {"rng": rng_state(), **to_cpu(self.local_state())}
            if self.per_rank_model and self.model is not None:
                mine["model"] = to_cpu(self.model.state_dict())
                mine["optimizer"] = to_cpu(self.optimizer.state_dict())
            shared = to_cpu(self.shared_state())
        self._rank_part = mine
        return {
            "algo": self.name,
            "world_size": self.world_size,
            "steps": self.steps_done,
            "rank_files": True,  # each learner's part is in its own file (asrlib.train.checkpoint.rank_file)
            "shared": shared,
        }

    def rank_state(self) -> Dict[str, Any]:
        """This learner's part of the checkpoint :meth:`state_dict` just began (written by this learner)."""
        mine, self._rank_part = self._rank_part, {}
        return mine

    def load_state_dict(self, state: Dict[str, Any], mine: Optional[Dict[str, Any]] = None) -> None:
        """Keep the state and this learner's part; :meth:`setup` applies them (after the trainer restored rank 0's)."""
        self._resume = state or None
        self._resume_mine = mine

    def barrier(self) -> None:
        with self.meter.category("bookkeeping"):
            dist.barrier()

    # ------------------------------------------------------------------ reporting
    def total_stats(self) -> CommStats:
        return self.stats + self.bg_stats

    def summary(self) -> Dict[str, Any]:
        return {
            "algo": self.name,
            "rank": self.rank,
            "world_size": self.world_size,
            "local_world_size": self.info.local_world_size,
            "node": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),  # SLURM's node name, else the host's
            "backend": self.info.backend,
            "total": self.total_stats().as_dict(),
            # training bytes of this learner since set-up (this attempt), measured; the epochs' sum plus what was sent
            # after the last epoch end (e.g. diloco's last outer step)
            "measured_sent_bytes": self.meter.snapshot()["sent_bytes"] - self._meter_start["sent_bytes"],
            "epochs": self.epoch_stats,
            **self.extra_summary(),
        }

    def extra_summary(self) -> Dict[str, Any]:
        return {}

    @contextlib.contextmanager
    def timed_wait(self) -> Iterator[None]:
        with self.stats.timed("wait_s"):
            yield
