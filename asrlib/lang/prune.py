"""Pruning a back-off n-gram model: count cut-offs and relative-entropy pruning to a target size.

Both remove n-grams of order 2 and above (unigrams are never removed) and then re-normalise: the probabilities of
the n-grams that stay are kept, and every history's back-off weight is recomputed so that its distribution sums to
one again, ``bow(h) = (1 - Σ_{v kept after h} p(v | h)) / (1 - Σ_{v kept after h} p'(v | h'))`` with ``p'`` the
pruned lower-order model (SRILM's and KenLM's rule). An n-gram that is the history of a kept longer one is kept
(an ARPA file needs it for the back-off weight).

- :func:`prune_counts` (``cutoffs``, KenLM's ``--prune``): drop n-grams of order ``k`` whose raw count is at most
  ``cutoffs[k - 1]`` (the last value holds for higher orders; the unigram value must be 0).
- :func:`prune_entropy` (``target``): Stolcke (1998), "Entropy-based pruning of backoff language models": each
  n-gram's removal changes the model's relative entropy by
  ``ΔH = -P(h) [p(w|h) (log p(w|h') + log α'(h) - log p(w|h)) + (1 - Σ_v p(v|h)) (log α'(h) - log α(h))]``
  with ``α'(h) = (Num(h) + p(w|h)) / (Den(h) + p(w|h'))`` the back-off weight once it is gone and ``P(h)`` the
  history's probability by the chain rule. Instead of a threshold, the n-grams with the largest ``ΔH`` are kept until
  the model holds ``target`` n-grams (all orders, ``<s>`` included), which is how a user sizes a first-pass LM.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Set

from asrlib.errors import AsrError, PathLike
from asrlib.lang.arpa import read_arpa, write_arpa
from asrlib.lang.ngram_types import BOS, Ngram, NgramLm

log = logging.getLogger(__name__)

_TINY = 1e-12


def _close_prefixes(kept: List[Set[Ngram]]) -> None:
    """Add to ``kept`` (per order, index ``k - 1``, order >= 2 only) the history of every kept n-gram."""
    for k in range(len(kept), 1, -1):
        for g in kept[k - 1]:
            kept[k - 2].add(g[:-1])


def restrict(lm: NgramLm, kept: List[Set[Ngram]]) -> NgramLm:
    """The model with only the n-grams of ``kept`` at orders >= 2 (index ``k - 1``; ``kept[0]`` is ignored), back-off
    weights recomputed (module docstring)."""
    probs: List[Dict[Ngram, float]] = [lm.probs[0]] + [
        {g: p for g, p in lm.probs[k].items() if g in kept[k]} for k in range(1, lm.order)
    ]
    out = NgramLm(lm.order, probs, [{} for _ in range(lm.order)], lm.discounts, lm.stats, lm.raw)
    for k in range(1, lm.order):  # back-off weights of the histories of order k, from the pruned orders <= k
        num: Dict[Ngram, float] = defaultdict(float)
        den: Dict[Ngram, float] = defaultdict(float)
        for g, p in probs[k].items():
            h = g[:-1]
            num[h] += p
            den[h] += out.prob(h[1:], g[-1])
        out.backoffs[k - 1] = {h: max(1.0 - num[h], _TINY) / max(1.0 - den[h], _TINY) for h in num}
    return out


def prune_counts(lm: NgramLm, cutoffs: Sequence[int]) -> NgramLm:
    """Drop n-grams whose raw count is at most the cut-off of their order (module docstring); needs the raw counts
    the estimator keeps (``lm.raw``)."""
    if not cutoffs or not any(cutoffs):
        return lm
    if cutoffs[0] != 0:
        raise AsrError(f"LM count cut-offs: the unigram value must be 0 (unigrams are never pruned), got {cutoffs}")
    if any(b < a for a, b in zip(cutoffs, cutoffs[1:])) or min(cutoffs) < 0:
        raise AsrError(f"LM count cut-offs must be non-negative and non-decreasing by order, got {list(cutoffs)}")
    if not lm.raw:
        raise AsrError("count cut-offs need the raw counts: prune a model estimated here, not one read from ARPA")
    kept: List[Set[Ngram]] = [set()]
    for k in range(2, lm.order + 1):
        c = cutoffs[min(k, len(cutoffs)) - 1]
        raw = lm.raw[k - 1]
        kept.append({g for g in lm.probs[k - 1] if raw.get(g, 0) > c})
    _close_prefixes(kept)
    out = restrict(lm, kept)
    log.info("count cut-offs %s: n-grams per order %s -> %s", list(cutoffs), lm.ngram_counts(), out.ngram_counts())
    return out


def _history_probs(lm: NgramLm) -> Dict[Ngram, float]:
    """P(h) by the chain rule for every history of order >= 1 (``P(<s>) = 1``: sentences start there)."""
    memo: Dict[Ngram, float] = {(): 1.0, (BOS,): 1.0}

    def p_hist(h: Ngram) -> float:
        v = memo.get(h)
        if v is None:
            v = p_hist(h[:-1]) * lm.prob(h[:-1], h[-1])
            memo[h] = v
        return v

    for k in range(1, lm.order):
        for g in lm.probs[k]:
            p_hist(g[:-1])
    return memo


def entropy_deltas(lm: NgramLm) -> List[Dict[Ngram, float]]:
    """Stolcke's ΔH (module docstring) of each n-gram of order >= 2 (index ``k - 1``; index 0 empty)."""
    p_hist = _history_probs(lm)
    out: List[Dict[Ngram, float]] = [{}]
    for k in range(2, lm.order + 1):
        probs = lm.probs[k - 1]
        lower = {g: lm.prob(g[1:-1], g[-1]) for g in probs}
        num: Dict[Ngram, float] = defaultdict(float)
        den: Dict[Ngram, float] = defaultdict(float)
        for g, p in probs.items():
            num[g[:-1]] += p
            den[g[:-1]] += lower[g]
        deltas: Dict[Ngram, float] = {}
        for g, p in probs.items():
            h = g[:-1]
            n_left, d_left = max(1.0 - num[h], _TINY), max(1.0 - den[h], _TINY)
            q = max(lower[g], _TINY)
            alpha, alpha2 = n_left / d_left, (n_left + p) / (d_left + q)
            dh = p * (math.log(q) + math.log(alpha2) - math.log(p)) + n_left * (math.log(alpha2) - math.log(alpha))
            deltas[g] = -p_hist[h] * dh
        out.append(deltas)
    return out


def prune_entropy(lm: NgramLm, target: int) -> NgramLm:
    """Keep the ``target`` n-grams (all orders) whose removal would cost most relative entropy (module docstring).
    A model already that small is returned unchanged; a target below the unigram count keeps the unigrams."""
    total = sum(lm.ngram_counts())
    if target <= 0 or total <= target:
        return lm
    budget = target - lm.ngram_counts()[0]
    if budget <= 0:
        log.warning("LM prune target %d is below the %d unigrams: keeping unigrams only", target, total)
    deltas = entropy_deltas(lm)
    ranked = sorted(((d, g) for dk in deltas for g, d in dk.items()), key=lambda x: -x[0])
    kept: List[Set[Ngram]] = [set() for _ in range(lm.order)]
    for _, g in ranked:
        if budget <= 0:
            break
        while len(g) >= 2 and g not in kept[len(g) - 1]:  # the n-gram and any of its histories not yet kept
            kept[len(g) - 1].add(g)
            budget -= 1
            g = g[:-1]
    out = restrict(lm, kept)
    log.info("entropy pruning to %d n-grams: per order %s -> %s", target, lm.ngram_counts(), out.ngram_counts())
    return out


def prune_arpa_file(src: PathLike, out: PathLike, target: int, order: Optional[int] = None) -> Dict[str, object]:
    """Entropy-prune the ARPA file ``src`` (any toolkit's, e.g. KenLM's ``lmplz`` for text too large for our
    estimator) to ``target`` n-grams and write ``out`` atomically; returns the n-grams per order before and after."""
    lm = read_arpa(src, max_order=order)
    pruned = prune_entropy(lm, target)
    write_arpa(pruned, out)
    return {"ngrams_unpruned": lm.ngram_counts(), "ngrams": pruned.ngram_counts()}
