"""The training loop, with exact resume, progress bars, TensorBoard, a plain-text log and a loss plot.

What is optimised plugs in as one :class:`~asrlib.train.criterion.Criterion` (CTC by default, frame cross-entropy
for steps.train_ce); a distributed algorithm as one :class:`~asrlib.train.algo.TrainAlgo` object. The loop itself
is shared.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import signal
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch
from tqdm import tqdm

from asrlib.config import TRAIN_IGNORED_WHEN_COMPARING, TRAIN_RUN_ONLY, RecipeConfig, TrainConfig, config_to_dict
from asrlib.features.cmvn import cmvn_fingerprint
from asrlib.errors import AsrError
from asrlib.io.atomic import atomic_open
from asrlib.io.stage import is_done
from asrlib.models.device import autocast, describe, grad_scaler, resolve_device, resolve_precision, to_device
from asrlib.train.algo import LocalAlgo, TrainAlgo
from asrlib.train.checkpoint import (
    latest_checkpoint,
    link_checkpoint,
    load_checkpoint,
    load_rank_part,
    rank_file,
    remove_rank_files,
    rng_state,
    save_checkpoint,
    set_rng_state,
    to_cpu,
)
from asrlib.train.criterion import Criterion, CtcCriterion
from asrlib.train.augment import LoaderAugment, augments_in_loader, make_spec_augment
from asrlib.train.census import Census
from asrlib.train.loader import CutData, SamplerSettings, dev_cut_batches, epoch_cut_batches, write_skipped
from asrlib.train.noise_aug import NoiseAugment
from asrlib.train.plot import plot_losses

log = logging.getLogger(__name__)


def make_optimizer(params, cfg: TrainConfig) -> torch.optim.Optimizer:
    params = list(params)
    if cfg.optimizer == "adam":
        # fused: one kernel for all parameters; on CPU 0.4 ms a step for the digits model where the per-tensor loop
        # takes 2-5 ms (of a 25-30 ms step); CPU and CUDA have the kernel
        fused = all(p.device.type in ("cpu", "cuda") for p in params)
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused or None)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    raise ValueError(f"train.optimizer must be adam or sgd, not {cfg.optimizer!r}")


def make_scheduler(opt: torch.optim.Optimizer, cfg: TrainConfig, total_steps: Callable[[], int]):
    """``total_steps``: a function giving the schedule's length (asked for only once the warm-up is over)."""
    if cfg.scheduler == "constant":
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    if cfg.scheduler == "warmup_cosine":
        warm = max(1, cfg.warmup_steps)

        def f(s: int) -> float:
            if s < warm:
                return (s + 1) / warm
            frac = min(1.0, (s - warm) / max(1, total_steps() - warm))
            return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac))

        return torch.optim.lr_scheduler.LambdaLR(opt, f)
    raise ValueError(f"train.scheduler must be warmup_cosine or constant, not {cfg.scheduler!r}")


def ctc_loss(model: torch.nn.Module, batch: Dict[str, torch.Tensor]) -> tuple:
    """Mean CTC loss per output frame of the batch; returns (loss, summed loss, output frames)."""
    return CtcCriterion().loss(model, batch)


def train_fingerprint(cfg: RecipeConfig) -> dict:
    """What a training stage's ``.done`` marker records of the config: the model and train sections without the
    :data:`~asrlib.config.TRAIN_RUN_ONLY` settings, and the normalisation (:func:`cmvn_fingerprint`)."""
    train = config_to_dict(cfg.train)
    for key in TRAIN_RUN_ONLY:
        train.pop(key)
    return {"model": config_to_dict(cfg.model), "train": train, **cmvn_fingerprint(cfg.features)}


def is_trained(marker: Path, fingerprint: dict) -> bool:
    """Whether a training stage's ``.done`` marker was written with the settings ``fingerprint`` (a
    :func:`train_fingerprint`, perhaps with more keys); a setting either side lacks (added to the config since the
    marker was written) counts as its default, so an upgrade neither refuses nor retrains a finished model."""
    return is_done(
        marker,
        fingerprint=fingerprint,
        defaults=train_fingerprint(RecipeConfig()),
        forget={"train": TRAIN_IGNORED_WHEN_COMPARING},
    )


def clip_gradients(model: torch.nn.Module, max_norm: float) -> float:
    """torch's ``clip_grad_norm_``, bit for bit, without its pass over every gradient when nothing is clipped (torch
    multiplies by its coefficient clamped to 1.0 then). Returns the total norm (a tensor on an accelerator)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads)
    if norm.device.type != "cpu":  # on an accelerator: torch's own clipping, with no wait for the norm's value
        torch.nn.utils.clip_grads_with_norm_(model.parameters(), max_norm, norm)
        return norm
    if not bool(max_norm / (norm + 1e-6) >= 1.0):  # torch's own coefficient; NaN clips as in torch
        torch.nn.utils.clip_grads_with_norm_(model.parameters(), max_norm, norm)
    return float(norm)


def _restart_count() -> int:
    """How often torchrun has restarted this job (its TORCHELASTIC_RESTART_COUNT; 0 without torchrun)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0)


class Trainer:
    def __init__(
        self,
        cfg: RecipeConfig,
        model: torch.nn.Module,
        train_ds: CutData,
        dev_ds: Optional[CutData],
        exp_dir: Path,
        algo: Optional[TrainAlgo] = None,
        extra_state: Optional[dict] = None,
        criterion: Optional[Criterion] = None,
        device: Optional[torch.device] = None,
    ):
        self.cfg, self.tcfg = cfg, cfg.train
        self.criterion = criterion or CtcCriterion()
        # where the model, every batch's tensors and the loss live: ``device`` as given (a step resolves train.device
        # once and passes it), else train.device resolved here (asrlib.models.device.resolve_device)
        self.device = device if device is not None else resolve_device(self.tcfg.device)
        self.amp_dtype = resolve_precision(self.tcfg.precision, self.device)
        self.scaler = grad_scaler(self.device, self.amp_dtype)  # fp16 only
        self.model, self.train_ds, self.dev_ds = model.to(self.device), train_ds, dev_ds
        log.info("training on %s", describe(self.device, self.amp_dtype))
        self.exp_dir = Path(exp_dir)
        self.ckpt_dir = self.exp_dir / "checkpoints"
        self.algo = algo or LocalAlgo()
        self.extra_state = extra_state or {}
        self.optimizer = make_optimizer(model.parameters(), self.tcfg)
        self.sampling = SamplerSettings.of(self.tcfg, self.algo.rank, self.algo.world_size)
        # one pass of the sampler over the cut metadata (no features read), beside the training (train/census.py):
        # this learner's batches in epoch 0, which times the epochs is the schedule's length (later epochs differ by
        # a batch or two: clamped by the schedule), and the usable cuts with their seconds
        self.census = Census(train_ds, self.sampling)
        self.schedule_epochs = self.tcfg.epochs
        if dev_ds is not None:
            self._report_excluded(dev_ds, dev_ds.stats()[0])
        self.scheduler = make_scheduler(self.optimizer, self.tcfg, self.total_steps)
        self.step, self.epoch, self.batch_in_epoch = 0, 0, 0
        self.metrics: List[dict] = []
        self.spec_augment = make_spec_augment(self.tcfg.spec_augment_impl, self.tcfg.freq_warp, self.tcfg.time_warp)
        self.noise_aug: Optional[NoiseAugment] = None
        if self.tcfg.noise_prob > 0:
            self.noise_aug = NoiseAugment(
                train_ds.normalise.cmvn,
                cfg.data.sample_rate,
                cfg.features.num_mel_bins,
                self.tcfg.noise_prob,
                self.tcfg.noise_snr_min,
                self.tcfg.noise_snr_max,
            )
        in_loader = augments_in_loader(self.tcfg.spec_augment, self.tcfg.spec_augment_in, self.noise_aug is not None)
        self.augment_here = self.tcfg.spec_augment and not in_loader
        train_ds.set_augment(LoaderAugment(self.spec_augment, self.tcfg.seed, self.algo.rank) if in_loader else None)

    # ------------------------------------------------------------------ the census
    @property
    def epoch_steps(self) -> int:
        return max(1, self._counts()[0])

    @property
    def num_cuts(self) -> int:
        return self._counts()[1]

    @property
    def train_seconds(self) -> float:
        return self._counts()[2]

    def total_steps(self) -> int:
        return self.epoch_steps * self.schedule_epochs

    def _counts(self) -> tuple:
        """The census's counts, waited for the first time (when they come: the training set's exclusions logged)."""
        first = self.census.counts is None
        counts = self.census.get()
        if first:
            self._report_excluded(self.train_ds, counts[1])
            log.info("%d usable train utts (%.0f s), %d batches an epoch", counts[1], counts[2], max(1, counts[0]))
        return counts

    @staticmethod
    def _report_excluded(ds: CutData, usable: int) -> None:
        excluded = ds.write_report()
        if excluded:
            log.warning(
                "excluded %d of %d utterances of %s (see %s)", excluded, excluded + usable, ds.name, ds.excluded_path
            )

    # ------------------------------------------------------------------ state
    def epoch_cuts(self, epoch: int, skip: int):
        """This learner's CutSets of ``epoch`` after the first ``skip`` (``None``: a step without data)."""
        return self.train_ds.mixed(epoch_cut_batches(self.train_ds, self.sampling, epoch, skip), epoch, skip)

    def state_dict(self) -> dict:
        return {
            "model": to_cpu(self.model.state_dict()),  # CPU tensors: the checkpoint resumes on any device
            "optimizer": to_cpu(self.optimizer.state_dict()),
            "scheduler": self.scheduler.state_dict(),
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "rng": rng_state(),
            "algo": self.algo.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "metrics": self.metrics,
            "census": list(self._counts()),
            "config": dataclasses.asdict(self.cfg),
            **self.extra_state,
        }

    def load_state_dict(self, st: dict, mine: Optional[dict] = None) -> None:
        """``st``: a checkpoint (tensors on the CPU: they are copied to the model's device, whatever device wrote
        them); ``mine``: this learner's own part of it (distributed training)."""
        self.model.load_state_dict(st["model"])
        self.optimizer.load_state_dict(st["optimizer"])  # moves its state to the parameters' device
        self.scheduler.load_state_dict(st["scheduler"])
        self.step, self.epoch, self.batch_in_epoch = st["step"], st["epoch"], st["batch_in_epoch"]
        self.metrics = st["metrics"]
        if st.get("census") is not None:  # (checkpoints before 2026-11-28 have none: the pass goes on)
            self.census.set(st["census"])
        self.algo.load_state_dict(st["algo"], mine)
        if self.scaler is not None and st.get("scaler"):
            self.scaler.load_state_dict(st["scaler"])
        set_rng_state(st["rng"])

    def save(self, name: str = "latest.pt") -> None:
        """Write the checkpoint ``name`` (and make it ``latest.pt``). Distributed: every learner writes its own part
        first (:func:`~asrlib.train.checkpoint.rank_file`), then rank 0 the checkpoint that names them, so a
        checkpoint file exists only when all its parts do."""
        st = self.state_dict()  # collective for distributed algorithms (exchanges in flight come to rest)
        mine = self.algo.rank_state()
        if mine:
            save_checkpoint(rank_file(self.ckpt_dir, self.step, self.algo.rank), mine)
            self.algo.barrier()
        if not self.algo.is_main:
            return
        save_checkpoint(self.ckpt_dir / name, st)
        if name != "latest.pt":  # the same state: linked, not serialised and synced a second time
            link_checkpoint(self.ckpt_dir / name, self.ckpt_dir / "latest.pt")
        if mine:  # the parts of checkpoints no file names any more: the step of latest.pt and of the epochs'
            remove_rank_files(self.ckpt_dir, {self.step} | {m["step"] for m in self.metrics if m["kind"] == "dev"})

    def try_resume(self) -> bool:
        ck = latest_checkpoint(self.ckpt_dir)
        restart = _restart_count()
        if restart:  # torchrun --max-restarts (steps.train_dist): a learner of the previous attempt failed
            log.warning(
                "torchrun restart %d of %s: %s",
                restart,
                os.environ.get("TORCHELASTIC_MAX_RESTARTS", "?"),
                "resuming from the last checkpoint" if ck else "no checkpoint yet: starting from scratch",
            )
        if ck is None:
            return False
        st = load_checkpoint(ck)
        for section in ("model", "train"):
            new = dataclasses.asdict(getattr(self.cfg, section))
            # settings added to the config since the checkpoint was written count as their defaults
            old = {**dataclasses.asdict(type(getattr(self.cfg, section))()), **st["config"][section]}
            for key in TRAIN_IGNORED_WHEN_COMPARING:
                old.pop(key, None), new.pop(key, None)
            if old != new:
                diff = {k: (old.get(k), new.get(k)) for k in set(old) | set(new) if old.get(k) != new.get(k)}
                raise AsrError(
                    f"{ck} was written with other {section} settings {diff} (old, new): "
                    f"resume needs the same settings; use another exp dir or delete {self.ckpt_dir}"
                )
        self.load_state_dict(st, load_rank_part(ck, st, self.algo.rank, self.algo.world_size))
        log.info("resumed from %s: epoch %d, batch %d, step %d", ck, self.epoch, self.batch_in_epoch, self.step)
        return True

    # ------------------------------------------------------------------ loop
    def train_step(self, batch: dict) -> tuple:
        self.model.train()
        has_data = bool(batch["ids"])
        if has_data:
            n_in = int(batch["feat_lens"].sum())  # before the copy: no wait for the device
            batch = to_device(batch, self.device)
            if self.noise_aug is not None:
                batch["feats"] = self.noise_aug(batch["feats"], batch["feat_lens"])
            if self.augment_here:  # else the loader's workers did (train.spec_augment_in)
                batch["feats"] = self.spec_augment(batch["feats"], batch["feat_lens"])
            with autocast(self.device, self.amp_dtype):  # the criteria compute their losses in fp32
                loss, total, frames = self.criterion.loss(self.model, batch)
            self.optimizer.zero_grad(set_to_none=True)
            (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        else:  # padding at an uneven shard end (distributed): no data, but this learner takes part in the step
            for p in self.model.parameters():
                p.grad = torch.zeros_like(p)
            total, frames, n_in = 0.0, 0, 0
        if self.algo.after_backward(self.model, has_data=has_data):  # False: no update this step
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)  # clip the true gradients; inf/NaN ones skip the step
            if self.tcfg.grad_clip > 0:
                clip_gradients(self.model, self.tcfg.grad_clip)
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        self.algo.after_step(self.model, self.optimizer, self.step)
        return total, frames, n_in

    @torch.no_grad()
    def dev_loss(self) -> Optional[float]:
        """Dev loss per frame; the criterion's extra dev metrics (per frame) are left in ``self.dev_extra``."""
        self.dev_extra: Dict[str, float] = {}
        self.dev_skipped: List[tuple] = []
        if self.dev_ds is None:
            return None
        self.model.eval()
        sums: Dict[str, float] = {}
        cuts = dev_cut_batches(self.dev_ds, self.tcfg.batch_seconds, self.algo.rank, self.algo.world_size)
        for batch in self.dev_ds.batches(cuts):
            self.dev_skipped += batch["skipped"]
            if batch["ids"]:
                with autocast(self.device, self.amp_dtype):
                    values = self.criterion.evaluate(self.model, to_device(batch, self.device))
                for k, v in values.items():
                    sums[k] = sums.get(k, 0.0) + v
        count = sums.get("count", 0)
        total, frames = self.algo.reduce_metric(sums.get("loss", 0.0), count)
        for name in self.criterion.extra_metrics:  # same calls on every learner (collective when distributed)
            value, n = self.algo.reduce_metric(sums.get(name, 0.0), count)
            self.dev_extra[name] = value / max(n, 1)
        return total / max(frames, 1)

    def fit(self) -> dict:
        from torch.utils.tensorboard import SummaryWriter

        self.try_resume()
        self.algo.setup(self.model, self.optimizer)
        main = self.algo.is_main
        tb = SummaryWriter(str(self.exp_dir / "tensorboard"), purge_step=self.step) if main else None
        if main and self.epoch == self.tcfg.epochs and self.metrics:
            # resumed from the last epoch's checkpoint: the run that wrote it may have died before drawing its plot
            plot_losses(self.metrics, self.exp_dir / "loss.png")
        while self.epoch < self.tcfg.epochs:
            bar = tqdm(
                # an estimate (lazy manifest); none while the census is under way in epoch 0
                total=max(self.epoch_steps, self.batch_in_epoch) if self.census.done() else None,
                initial=self.batch_in_epoch,
                desc=f"epoch {self.epoch + 1}",
                disable=not main,
                unit="batch",
                dynamic_ncols=True,
                mininterval=2.0,
            )
            run_total, run_frames, t0, in_frames = 0.0, 0, time.time(), 0
            t_epoch, utts = time.time(), 0
            skipped: List[tuple] = []
            empty = 0
            if self.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(self.device)
            for batch in self.train_ds.batches(self.epoch_cuts(self.epoch, self.batch_in_epoch)):
                skipped += batch["skipped"]
                empty += not batch["ids"]
                utts += len(batch["ids"])
                total, frames, nin = self.train_step(batch)
                self.batch_in_epoch += 1
                run_total, run_frames, in_frames = run_total + total, run_frames + frames, in_frames + nin
                bar.update(1)
                if self.step % self.tcfg.log_every == 0:
                    if self.census.counts is None and self.census.done():  # arrived: its log line, report, total
                        bar.total = max(self.epoch_steps, self.batch_in_epoch)
                    if run_frames:  # (0 only when every batch was padding at an uneven shard end)
                        self._log_train(tb, run_total / run_frames, in_frames / (time.time() - t0))
                        bar.set_postfix(loss=f"{self.metrics[-1]['loss']:.3f}")
                    run_total, run_frames, t0, in_frames = 0.0, 0, time.time(), 0
                if self.step % self.tcfg.checkpoint_every == 0:
                    self.save()
                if self.tcfg.kill_after_steps and self.step == self.tcfg.kill_after_steps and not _restart_count():
                    log.warning("kill_after_steps=%d reached: SIGKILL (testing aid; first attempt only)", self.step)
                    os.kill(os.getpid(), signal.SIGKILL)
            self._counts()  # the census (an empty epoch 0: the error that no cut is usable)
            self._end_of_data(skipped, empty)
            bar.close()
            # this attempt's share of the epoch (all of it unless it resumed mid-epoch): throughput, device memory
            seconds = time.time() - t_epoch
            speed = {"train_seconds": round(seconds, 3), "train_utts_per_s": round(utts / max(seconds, 1e-9), 2)}
            if self.device.type == "cuda":
                speed["peak_device_mb"] = round(torch.cuda.max_memory_allocated(self.device) / 2**20, 1)
            self.algo.end_epoch(self.model, self.optimizer)
            for name, value in self.algo.epoch_scalars().items() if tb is not None else ():
                tb.add_scalar(name, value, self.step)  # the algorithm's figures, e.g. bytes sent per learner
            dev = self.dev_loss()
            self.epoch, self.batch_in_epoch = self.epoch + 1, 0
            self.metrics.append(
                {"kind": "dev", "step": self.step, "epoch": self.epoch, "loss": dev, **self.dev_extra, **speed}
            )
            if tb is not None and dev is not None:
                tb.add_scalar(f"dev/{self.criterion.name}_loss", dev, self.step)
                for name, value in self.dev_extra.items():
                    tb.add_scalar(f"dev/{name}", value, self.step)
            log.info(
                "epoch %d done: step %d, dev %s loss per frame %s%s; %d utterances in %.1f s%s",
                self.epoch,
                self.step,
                self.criterion.label,
                f"{dev:.4f}" if dev is not None else "n/a",
                "".join(f", {k} {v:.4f}" for k, v in self.dev_extra.items()),
                utts,
                speed["train_seconds"],
                f", peak {self.device} memory {speed['peak_device_mb']:.0f} MiB" if "peak_device_mb" in speed else "",
            )
            self.save(f"epoch-{self.epoch}.pt")
            if main:
                plot_losses(self.metrics, self.exp_dir / "loss.png")
        self.algo.end_training(self.model)
        if tb is not None:
            tb.close()
        summary = self.finish()
        self.census.close()
        for ds in (self.train_ds, self.dev_ds):  # the loaders' workers, now rather than at a garbage collection
            if ds is not None:
                ds.close_workers()
        return summary

    def _end_of_data(self, skipped: List[tuple], empty: int) -> None:
        """After an epoch's batches: the excluded cuts' report, the skipped ones' (unreadable in a worker), and
        whether this learner had steps without data."""
        rank, world, epoch = self.algo.rank, self.algo.world_size, self.epoch + 1
        ds = self.train_ds
        if self.batch_in_epoch == 0:
            raise AsrError(f"epoch {epoch}: no usable utterance in {ds.name}; see {ds.excluded_path}")
        if skipped:
            name = f"skipped_epoch{epoch}.txt" if rank == 0 else f"skipped_epoch{epoch}.rank{rank}.txt"
            write_skipped(self.exp_dir / "log" / name, skipped)
            log.warning(
                "epoch %d: %d cuts skipped, features or audio unreadable (listed in %s)",
                epoch,
                len(skipped),
                self.exp_dir / "log" / name,
            )
        if empty:
            log.info("learner %d of %d: %d of its steps in epoch %d had no data", rank, world, empty, epoch)

    def _log_train(self, tb, loss: float, frames_per_s: float) -> None:
        lr = self.optimizer.param_groups[0]["lr"]
        self.metrics.append(
            {
                "kind": "train",
                "step": self.step,
                "epoch": self.epoch,
                "loss": loss,
                "lr": lr,
                "frames_per_s": frames_per_s,
            }
        )
        if tb is not None:
            tb.add_scalar(f"train/{self.criterion.name}_loss", loss, self.step)
            tb.add_scalar("train/lr", lr, self.step)
            tb.add_scalar("train/input_frames_per_s", frames_per_s, self.step)
        log.info("step %d epoch %d loss %.4f lr %.2e %.0f frames/s", self.step, self.epoch + 1, loss, lr, frames_per_s)

    def finish(self) -> dict:
        dev = [m["loss"] for m in self.metrics if m["kind"] == "dev"]
        summary = {"steps": self.step, "epochs": self.epoch, "final_dev_loss": dev[-1] if dev else None}
        if self.algo.is_main:
            with atomic_open(self.exp_dir / "metrics.json") as f:
                json.dump(self.metrics, f)
        return summary
