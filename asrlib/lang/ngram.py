"""Word n-gram language models estimated from text: interpolated modified Kneser-Ney, written as ARPA.

The estimator follows Chen & Goodman (1998), "An empirical study of smoothing techniques for language modeling",
interpolated modified Kneser-Ney:

- Sentences are padded with ``<s>`` and ``</s>`` and every n-gram up to the order ``N`` is counted. ``<s>`` is
  never predicted; ``</s>`` is predicted like a word.
- Counts used at each order ("adjusted" counts ``a``): the raw count at order ``N`` and for n-grams that start with
  ``<s>`` (nothing can stand left of them); at lower orders the continuation count ``N1+(• g)``, the number of
  distinct words seen just before ``g``.
- Per order, three discounts from the counts-of-counts ``n1..n4`` of the adjusted counts:
  ``Y = n1 / (n1 + 2 n2)``, ``D1 = 1 - 2Y n2/n1``, ``D2 = 2 - 3Y n3/n2``, ``D3+ = 3 - 4Y n4/n3``; an n-gram with
  count ``c`` gets ``D(c)`` = D1, D2 or D3+ for c = 1, 2, >= 3.
- ``p(w | h) = (a(h w) - D(a(h w))) / Σ_v a(h v) + γ(h) p(w | h')`` with ``h'`` = ``h`` without its first word and
  ``γ(h) = Σ_v D(a(h v)) / Σ_v a(h v)`` (the mass taken by the discounts). At the unigram order the lower
  distribution is uniform over the vocabulary (every unigram but ``<s>``), so words of a given vocabulary that the
  text never uses get a probability too.

In ARPA form the back-off weight of a history is exactly ``γ(h)``: an interpolated model needs no renormalisation,
because the lower-order probability stored for ``h' w`` is already the interpolated one.

Fallbacks (tiny or unusual texts), so that no count-of-counts can divide by zero: when an order has no n-gram seen
exactly once or none seen exactly twice, ``Y`` cannot be estimated and all three discounts of that order are 0.5
(plain absolute discounting); otherwise a ``D_k`` whose ``n_k`` is zero, or whose estimate falls outside
``(0, k)``, is replaced by ``Y`` (Ney's absolute-discount estimate, always in ``(0, 1)``). Every fallback is logged.

With a vocabulary (a Kaldi ``words.txt`` or a word list), words outside it become ``<unk>``, counted and reported;
``<unk>`` is then an ordinary word of the model. The ARPA file is written atomically; :func:`build_arpa` also skips
the work when the ARPA file was already made from the same texts and settings (a ``.<name>.done`` marker beside it).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from asrlib.errors import AsrError, PathLike
from asrlib.io.files import sha256_file
from asrlib.io.stage import is_done, mark_done
from asrlib.lang.arpa import arpa_counts, write_arpa
from asrlib.lang.kenlm import estimate_arpa_lmplz
from asrlib.lang.lm_text import read_sentences, read_vocabulary, text_summary, write_text_report
from asrlib.lang.ngram_types import BOS, EOS, UNK, Ngram, NgramLm, TextStats
from asrlib.lang.prune import prune_arpa_file, prune_counts, prune_entropy

log = logging.getLogger(__name__)

FALLBACK_DISCOUNT = 0.5
LM_TOOLKITS = ("ours", "kenlm")  # lang.lm_toolkit: this module's estimator, or KenLM's lmplz (asrlib/lang/kenlm.py)


def count_ngrams(sentences: Iterable[List[str]], order: int) -> List[Counter]:
    """Raw counts of every n-gram of orders 1..``order`` of the ``<s> ... </s>``-padded sentences
    (``counts[k - 1]`` holds order ``k``)."""
    counts: List[Counter] = [Counter() for _ in range(order)]
    for words in sentences:
        toks = (BOS, *words, EOS)
        for k in range(1, order + 1):
            counts[k - 1].update(zip(*(toks[j:] for j in range(k))))
    return counts


# ---------------------------------------------------------------- estimation
def kn_discounts(adjusted: Iterable[int], what: str = "") -> Tuple[float, float, float]:
    """Chen & Goodman's (D1, D2, D3+) from the counts-of-counts of ``adjusted`` (one order's adjusted counts),
    with the fallbacks of the module docstring."""
    n = [0] * 5
    for c in adjusted:
        if c <= 4:
            n[c] += 1
    if n[1] == 0 or n[2] == 0:
        log.info(
            "%sno n-gram seen %s: discounts fall back to %g (counts-of-counts n1..n4 = %s)",
            what,
            "once" if n[1] == 0 else "twice",
            FALLBACK_DISCOUNT,
            n[1:],
        )
        return (FALLBACK_DISCOUNT,) * 3
    y = n[1] / (n[1] + 2 * n[2])
    out = []
    for k in (1, 2, 3):
        d = k - (k + 1) * y * n[k + 1] / n[k] if n[k] else math.nan
        if not 0 < d < k:
            log.info(
                "%sD%d%s = %s is not in (0, %d) (counts-of-counts n1..n4 = %s): using Y = %.4f",
                what,
                k,
                "+" if k == 3 else "",
                "undefined" if math.isnan(d) else f"{d:.4f}",
                k,
                n[1:],
                y,
            )
            d = y
        out.append(d)
    return out[0], out[1], out[2]


def _adjusted_counts(raw: List[Counter], order: int) -> List[Dict[Ngram, int]]:
    """Per order: raw counts at the top order and for n-grams starting with ``<s>``, continuation counts else."""
    adjusted: List[Dict[Ngram, int]] = [{} for _ in range(order)]
    adjusted[order - 1] = dict(raw[order - 1])
    for k in range(order - 1, 0, -1):  # order k from the distinct left extensions among order k + 1
        left = Counter(g[1:] for g in raw[k])
        adjusted[k - 1] = {g: (c if g[0] == BOS else left[g]) for g, c in raw[k - 1].items()}
    return adjusted


def _discount(c: int, d: Tuple[float, float, float]) -> float:
    return 0.0 if c == 0 else d[min(c, 3) - 1]


def estimate_kn(
    raw: List[Counter], order: int, vocab: Iterable[str] = (), stats: Optional[TextStats] = None
) -> NgramLm:
    """Interpolated modified Kneser-Ney from the raw counts of :func:`count_ngrams`; ``vocab`` adds words that
    get only their share of the uniform distribution when the text never uses them."""
    adjusted = _adjusted_counts(raw, order)
    # order 1: interpolated with the uniform distribution over every word but <s>
    uni = {g[0]: c for g, c in adjusted[0].items() if g[0] != BOS}
    d = kn_discounts(uni.values(), "1-grams: ")
    words = sorted(set(uni) | (set(vocab) - {BOS}))
    total = sum(uni.values())
    gamma0 = sum(_discount(c, d) for c in uni.values()) / total
    probs: List[Dict[Ngram, float]] = [
        {(w,): (uni.get(w, 0) - _discount(uni.get(w, 0), d)) / total + gamma0 / len(words) for w in words}
    ]
    backoffs: List[Dict[Ngram, float]] = []
    discounts = [d]
    for k in range(2, order + 1):
        counts = adjusted[k - 1]
        d = kn_discounts(counts.values(), f"{k}-grams: ")
        totals: Dict[Ngram, int] = Counter()
        taken: Dict[Ngram, float] = Counter()
        for g, c in counts.items():
            totals[g[:-1]] += c
            taken[g[:-1]] += _discount(c, d)
        gamma = {h: taken[h] / totals[h] for h in totals}
        lower = probs[-1]
        probs.append(
            {g: (c - _discount(c, d)) / totals[g[:-1]] + gamma[g[:-1]] * lower[g[1:]] for g, c in counts.items()}
        )
        backoffs.append(gamma)
        discounts.append(d)
    backoffs.append({})  # the top order's n-grams are nobody's history
    return NgramLm(order, probs, backoffs, discounts, stats or TextStats(), raw)


def estimate_lm(
    texts: Sequence[PathLike],
    order: int,
    vocab: Optional[Set[str]] = None,
    has_utt_ids: bool = False,
    uppercase: bool = False,
    alphabet: Optional[Set[str]] = None,
    max_word_len: int = 0,
) -> NgramLm:
    """Read ``texts`` (see :func:`read_sentences`) and estimate an ``order``-gram (see the module docstring)."""
    if order < 1:
        raise AsrError(f"the n-gram order must be at least 1, got {order}")
    if not texts:
        raise AsrError("no LM text given")
    stats = TextStats()
    raw = count_ngrams(read_sentences(texts, has_utt_ids, vocab, uppercase, stats, alphabet, max_word_len), order)
    if stats.sentences == 0:
        raise AsrError(
            f"LM text {', '.join(map(str, texts))} holds no words" + (" after the utterance ids" if has_utt_ids else "")
        )
    return estimate_kn(raw, order, vocab or (), stats)


def lm_summary(lm: NgramLm) -> Dict[str, object]:
    """The figures a caller logs and keeps in a done marker."""
    return {
        "order": lm.order,
        **text_summary(lm.stats),
        "ngrams": lm.ngram_counts(),
        "discounts": [[round(x, 6) for x in d] for d in lm.discounts],
    }


def _build_arpa_lmplz(
    texts: Sequence[PathLike],
    out: Path,
    order: int,
    vocab: Optional[Set[str]],
    has_utt_ids: bool,
    uppercase: bool,
    prune_target: int,
    cutoffs: Sequence[int],
    alphabet: Optional[Set[str]],
    max_word_len: int,
) -> Dict[str, object]:
    """:func:`build_arpa` with KenLM's lmplz (:mod:`asrlib.lang.kenlm`), entropy-pruned here when ``prune_target``."""
    stats = estimate_arpa_lmplz(texts, out, order, vocab, has_utt_ids, uppercase, cutoffs, alphabet, max_word_len)
    full = arpa_counts(out)
    ngrams = full
    if prune_target and sum(full) > prune_target:
        ngrams = prune_arpa_file(out, out, prune_target)["ngrams"]
    summary = {"order": order, **text_summary(stats), "ngrams": ngrams, "toolkit": "kenlm"}
    return {**summary, "ngrams_unpruned": full, "_stats": stats}


def build_arpa(
    texts: Sequence[PathLike],
    out: PathLike,
    order: int,
    words: Optional[PathLike] = None,
    has_utt_ids: bool = False,
    uppercase: bool = False,
    prune_target: int = 0,
    cutoffs: Sequence[int] = (),
    alphabet: Optional[Set[str]] = None,
    max_word_len: int = 0,
    toolkit: str = "ours",
) -> Dict[str, object]:
    """Estimate an ``order``-gram from ``texts`` and write it to ``out`` (ARPA), logging what was read (sentences,
    tokens, OOVs mapped to ``<unk>`` when ``words`` gives the vocabulary) and the n-grams per order.

    ``cutoffs`` (count cut-offs per order) and then ``prune_target`` (> 0: entropy pruning to that many n-grams)
    prune the model (:mod:`asrlib.lang.prune`). Words with a character outside ``alphabet`` or longer than
    ``max_word_len`` become ``<unk>``; these, the OOVs and the empty lines are listed with their counts in
    ``<out>.report`` (written whenever there is something to list). ``toolkit`` ``kenlm`` estimates with KenLM's
    lmplz instead (:mod:`asrlib.lang.kenlm`, for text too large for this pure-Python estimator).

    Skipped when ``out`` exists and its marker ``.<name>.done`` was written for the same texts (by content),
    vocabulary and settings. Returns the summary (:func:`lm_summary`, plus ``seconds`` and ``skipped``)."""
    out = Path(out)
    marker = out.parent / f".{out.name}.done"
    for t in map(Path, texts):
        if not t.is_file():
            raise AsrError(f"LM text {t} does not exist")
    fingerprint = {
        "texts": [[str(t), sha256_file(t)] for t in texts],
        "order": order,
        "words": sha256_file(words) if words is not None else None,
        "has_utt_ids": has_utt_ids,
        "uppercase": uppercase,
    }
    if toolkit not in LM_TOOLKITS:
        raise AsrError(f"lang.lm_toolkit must be one of {', '.join(LM_TOOLKITS)}, got {toolkit!r}")
    if toolkit != "ours":
        fingerprint["toolkit"] = toolkit
    if prune_target or any(cutoffs) or alphabet is not None or max_word_len:  # older markers stay valid
        fingerprint.update(
            prune_target=prune_target,
            cutoffs=list(cutoffs),
            alphabet="".join(sorted(alphabet)) if alphabet is not None else None,
            max_word_len=max_word_len,
        )
    if out.is_file() and is_done(marker, fingerprint):
        log.info("%s was already estimated from the same text; skipping", out)
        info = json.loads(marker.read_text())
        info.pop("_fingerprint", None)
        return {**info, "skipped": True}
    t0 = time.perf_counter()
    vocab = read_vocabulary(words) if words is not None else None
    if toolkit == "kenlm":
        info = _build_arpa_lmplz(
            texts, out, order, vocab, has_utt_ids, uppercase, prune_target, cutoffs, alphabet, max_word_len
        )
        s = info.pop("_stats")
    else:
        lm = estimate_lm(texts, order, vocab, has_utt_ids, uppercase, alphabet, max_word_len)
        full = lm.ngram_counts()
        if any(cutoffs) or prune_target:
            lm = prune_entropy(prune_counts(lm, cutoffs), prune_target)
        write_arpa(lm, out)
        info = {**lm_summary(lm), "ngrams_unpruned": full}
        s = lm.stats
    write_text_report(s, out.parent / f"{out.name}.report")
    info["seconds"] = round(time.perf_counter() - t0, 3)
    log.info(
        "%s: %d-gram from %d sentence(s), %d word token(s), %d OOV token(s); n-grams per order: %s; %.1f s",
        out,
        order,
        s.sentences,
        s.tokens,
        s.oov_tokens,
        ", ".join(f"{k}-grams {n}" for k, n in enumerate(info["ngrams"], 1)),
        info["seconds"],
    )
    if s.oov_tokens or s.empty_lines:
        top = ", ".join(f"{w} ({c})" for w, c in (s.oov_words + s.bad_char_words + s.too_long_words).most_common(10))
        log.warning(
            "%d OOV token(s) mapped to %s (%d not in %s, %d with a character outside the alphabet, %d too long), "
            "%d empty line(s) skipped; most frequent: %s; all listed in %s.report",
            s.oov_tokens,
            UNK,
            sum(s.oov_words.values()),
            words,
            sum(s.bad_char_words.values()),
            sum(s.too_long_words.values()),
            s.empty_lines,
            top,
            out,
        )
    mark_done(marker, info, fingerprint)
    return {**info, "skipped": False}
