"""Monophone GMM-HMM training, following Kaldi's ``steps/train_mono.sh``.

1. gmm-init-mono: one Gaussian per pdf at the global mean/variance (:func:`asrlib.gmm.model.init_mono`);
2. flat start: equal alignment of every utterance over its own training graph;
3. ``num_iters`` EM passes. Each pass accumulates statistics along the current alignment (Viterbi training),
   re-estimates transitions and GMMs (``mle_am_diag_gmm_update``) and mixes up (``split_by_count``) towards a
   Gaussian budget that grows linearly for ``max_iter_inc`` passes up to ``total_gauss``. At the passes listed in
   ``realign_iters`` the data is first realigned with the current model (beam 6, retry beam 24, as in
   train_mono.sh). The first pass uses a minimum Gaussian occupancy of 3 (as Kaldi does after equal alignment).

Utterances without a flat-start path (too short for their transcript) are excluded and reported; an utterance
that fails to realign keeps no statistics in that pass and is counted (Kaldi's behaviour).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from tqdm import tqdm

from asrlib.kaldi_imports import khg
from asrlib.gmm.align import AlignResult, equal_align, viterbi_align
from asrlib.gmm.model import GmmModel

log = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c"))


def seed_c_rand(seed: int) -> None:
    """Seed the C library's ``rand()``, which Kaldi's ``RandGauss`` (the mix-up's perturbation of split Gaussians)
    draws from: without it the model depends on whatever called ``rand()`` earlier in the process."""
    _libc().srand(ctypes.c_uint(seed % 2**32))


KALDI_REALIGN_ITERS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 18, 20, 23, 26, 29, 32, 35, 38)


@dataclass
class MonoSchedule:
    num_iters: int = 40
    max_iter_inc: int = 30
    total_gauss: int = 1000
    realign_iters: Sequence[int] = KALDI_REALIGN_ITERS
    beam: float = 6.0
    retry_beam: float = 24.0
    power: float = 0.25  # mix-up: Gaussians per pdf proportional to occupancy ** power
    perturb_factor: float = 0.01
    min_count: float = 20.0  # mix-up: minimum count per Gaussian
    seed: int = 0


@dataclass
class UttData:
    utt: str
    feats: np.ndarray  # (T, dim) GMM features
    graph: object  # training graph (kaldifst.StdVectorFst)
    tids: Optional[List[int]] = None


@dataclass
class PassStats:
    iteration: int
    realigned: bool
    loglike_per_frame: float
    frames: int
    num_gauss: int
    align_failed: int = 0
    align_retried: int = 0
    seconds: float = 0.0


def accumulate(model: GmmModel, data: Sequence[UttData]) -> Tuple["khg.AccumAmDiagGmm", np.ndarray, float, int]:
    """Viterbi statistics along each utterance's alignment: GMM accumulators, transition counts (indexed by
    transition id, as ``TransitionModel::Accumulate`` would make them), total log-likelihood, frames."""
    acc = khg.AccumAmDiagGmm()
    acc.init(model=model.am, flags=int(khg.GmmUpdateFlags.kGmmAll))
    pdf_of = model.pdf_of_tid()
    n_tids = int(model.tm.num_transition_ids)
    trans = np.zeros(n_tids + 1, dtype=np.float64)
    tot, frames = 0.0, 0
    for u in data:
        if u.tids is None:
            continue
        tids = np.asarray(u.tids)
        trans += np.bincount(tids, minlength=n_tids + 1)
        for x, pdf in zip(u.feats, pdf_of[tids].tolist()):
            tot += acc.accumulate_for_gmm(model.am, x, pdf, 1.0)
        frames += len(tids)
    return acc, trans, tot, frames


def update(
    model: GmmModel,
    acc: "khg.AccumAmDiagGmm",
    trans: np.ndarray,
    mixup_to: int,
    min_gaussian_occupancy: float,
    sched: MonoSchedule,
) -> None:
    """gmm-est: transition and GMM re-estimation (means, variances, weights), then mix-up to ``mixup_to``."""
    model.tm.mle_update(trans, khg.MleTransitionUpdateConfig())
    opts = khg.MleDiagGmmOptions(min_gaussian_occupancy=min_gaussian_occupancy)
    occs = np.asarray([acc.get_acc(i).occupancy.sum() for i in range(acc.num_accs)], dtype=np.float32)
    khg.mle_am_diag_gmm_update(config=opts, amdiag_gmm_acc=acc, flags=int(khg.GmmUpdateFlags.kGmmAll), am_gmm=model.am)
    if mixup_to > model.num_gauss():
        model.am.split_by_count(
            state_occs=occs,
            target_components=mixup_to,
            perturb_factor=sched.perturb_factor,
            power=sched.power,
            min_count=sched.min_count,
        )
    model.am.compute_gconsts()


def flat_start(data: Sequence[UttData], seed: int = 0) -> List[Tuple[str, str]]:
    """Equal alignment of every utterance; returns [(utt, reason)] of those without one (their tids stay None)."""
    failed = []
    for u in data:
        u.tids = equal_align(u.graph, len(u.feats), seed)
        if u.tids is None:
            failed.append(
                (
                    u.utt,
                    f"too short for its transcript: {len(u.feats)} frames cannot hold the HMM "
                    f"states of its phones (no flat-start alignment)",
                )
            )
    return failed


def realign(
    model: GmmModel, data: Sequence[UttData], beam: float, retry_beam: float, desc: str = "align"
) -> Tuple[int, int]:
    """Viterbi realignment of every utterance in place; returns (failed, retried)."""
    failed = retried = 0
    for u in tqdm(data, desc=desc, unit="utt", leave=False, mininterval=2.0):
        res: AlignResult = viterbi_align(model, u.graph, u.feats, u.utt, beam, retry_beam)
        retried += res.retried
        if res.tids is None:
            failed += 1
        u.tids = res.tids
    return failed, retried


def train_mono(
    model: GmmModel, data: List[UttData], sched: MonoSchedule, on_pass: Optional[Callable[[PassStats], None]] = None
) -> List[PassStats]:
    """Run the flat start and the EM passes on ``data`` (alignments must already be set by :func:`flat_start`).
    ``model`` is updated in place; returns the per-pass statistics."""
    num_gauss = model.num_gauss()
    inc = max(0, (sched.total_gauss - num_gauss) // max(1, sched.max_iter_inc))
    history: List[PassStats] = []
    realign_at = set(sched.realign_iters)
    for it in range(sched.num_iters):  # pass 0 estimates from the equal alignment (Kaldi's 0.mdl -> 1.mdl)
        t0 = time.time()
        failed = retried = 0
        if it > 0 and it in realign_at:
            failed, retried = realign(model, data, sched.beam, sched.retry_beam, desc=f"pass {it} align")
        acc, trans, tot, frames = accumulate(model, data)
        if frames == 0:
            raise RuntimeError("no utterance has an alignment: cannot estimate the model")
        seed_c_rand(sched.seed * 1000 + it)  # the mix-up's perturbation: the same in any process
        update(model, acc, trans, num_gauss, 3.0 if it == 0 else 10.0, sched)
        st = PassStats(
            it, it in realign_at and it > 0, tot / frames, frames, model.num_gauss(), failed, retried, time.time() - t0
        )
        history.append(st)
        log.info(
            "pass %d%s: log-like/frame %.3f over %d frames, %d Gaussians%s (%.1f s)",
            it,
            " (realigned)" if st.realigned else "",
            st.loglike_per_frame,
            frames,
            st.num_gauss,
            f", {failed} failed / {retried} retried alignments" if st.realigned else "",
            st.seconds,
        )
        if on_pass is not None:
            on_pass(st)
        if 1 <= it <= sched.max_iter_inc:
            num_gauss = min(sched.total_gauss, num_gauss + inc)
    return history


def global_stats(feats: Sequence[np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
    """Mean and variance over all frames."""
    n = sum(len(f) for f in feats)
    s = sum(f.astype(np.float64).sum(0) for f in feats)
    s2 = sum((f.astype(np.float64) ** 2).sum(0) for f in feats)
    mean = s / n
    return mean, np.maximum(s2 / n - mean * mean, 1e-6)


def summary(history: Sequence[PassStats]) -> Dict[str, object]:
    return {
        "passes": len(history),
        "loglike_first": history[0].loglike_per_frame,
        "loglike_last": history[-1].loglike_per_frame,
        "num_gauss": history[-1].num_gauss,
        "seconds": round(sum(h.seconds for h in history), 1),
    }
