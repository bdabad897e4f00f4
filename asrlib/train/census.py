"""The training set's census (:meth:`asrlib.train.loader.CutData.census`: one pass of the sampler over epoch 0's
metadata, giving this learner's batches per epoch, the usable cuts and their seconds) taken beside the training
instead of before it.

The pass costs about 70 µs a cut (lhotse parses every manifest line and buckets it; ``bench/data_scale.py``'s
``trainer_census_s``): 10 s for 100 h of 1-6 s cuts and, at that rate, about a minute for LibriSpeech's 960 h with
speed perturbation.
Made before the first step, it put the trainer's start in proportion to the corpus. The training needs its result
only for the learning-rate schedule's length, and a warm-up schedule only once its warm-up is over; so it runs in a
forked process from the trainer's start and is waited for when first needed. Its exclusions come back with it and
are reported then. A resumed run takes it from the checkpoint and makes no pass at all. Where processes are not
forked (macOS, Windows, or a daemonic process) the pass runs in the training process, first, as before.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
from typing import Dict, Optional, Tuple

from asrlib.errors import AsrError

Counts = Tuple[int, int, float]  # (this learner's batches in epoch 0, usable cuts, their seconds)


def _child(ds, settings, conn) -> None:
    from asrlib.train.loader import worker_init

    worker_init(0, ds.loader_cfg.worker_nice)  # as a loader worker: dies with the trainer, frees its lock, yields
    try:
        counts = ds.census(settings)
        conn.send(("ok", counts, ds.excluded))
    except AsrError as e:  # no usable cut: the message names the report the pass wrote
        conn.send(("error", str(e), ds.excluded))
    except BaseException as e:  # pragma: no cover - reported in the training process, not lost with the child
        conn.send(("error", f"the training set's census failed: {type(e).__name__}: {e}", ds.excluded))
    finally:
        conn.close()


class Census:
    """``ds.census(settings)`` in a forked process from construction on; :meth:`get` waits for it (once) and
    merges its exclusions into ``ds.excluded``; :meth:`set` gives the counts (a checkpoint's) and stops the pass."""

    def __init__(self, ds, settings) -> None:
        self.ds = ds
        self.counts: Optional[Counts] = None
        self.proc = None
        # fork is Linux's to rely on (the loader's workers are forked too); a daemonic process (a learner of the
        # test harness) may not have children
        if not sys.platform.startswith("linux") or mp.current_process().daemon:
            self.counts = ds.census(settings)
            return
        ctx = mp.get_context("fork")
        self.conn, child = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=_child, args=(ds, settings, child), daemon=True, name="census")
        self.proc.start()
        child.close()

    def done(self) -> bool:
        """Whether :meth:`get` would return at once."""
        return self.counts is not None or (self.proc is not None and self.conn.poll())

    def get(self) -> Counts:
        if self.counts is None:
            try:
                status, value, excluded = self.conn.recv()
            except EOFError:
                raise AsrError("the training set's census process ended without a result") from None
            self.close()
            self._merge(excluded)
            if status != "ok":
                raise AsrError(value)
            self.counts = tuple(value)
        return self.counts

    def set(self, counts) -> None:
        """The counts of an earlier run of the same settings (a resumed checkpoint): no pass is needed."""
        self.close()
        self.counts = (int(counts[0]), int(counts[1]), float(counts[2]))

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.terminate()
            self.proc.join()
            self.conn.close()
            self.proc = None

    def _merge(self, excluded: Dict[str, str]) -> None:
        for k, why in excluded.items():
            self.ds.excluded.setdefault(k, why)
