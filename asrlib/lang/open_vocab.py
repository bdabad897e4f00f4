"""An open vocabulary: English words beyond the training transcripts, and a G that gives them probability.

``lang.vocab_source: wordfreq`` takes the ``lang.vocab_size`` most frequent English words of the ``wordfreq``
package's list (its ``large`` English list: word frequencies from subtitles, Wikipedia, news, books and web text,
shipped inside the package; nothing is downloaded) that are spelled in letters (and apostrophes) and that CMUdict
pronounces; they join the vocabulary (lexicon and words.txt). Their relative frequencies form a unigram model, and
G's n-gram becomes the linear interpolation

    p(w | h) = (1 - λ) p_text(w | h) + λ p_wordfreq(w),   λ = lang.vocab_lm_weight

of the transcripts' n-gram (estimated over the whole vocabulary, so the new words have its uniform share too) and
that unigram, written as one back-off ARPA model (:func:`interpolate`: every n-gram of either model keeps its exact
interpolated probability; a word that a history does not list backs off, with weights recomputed so that every
history's distribution sums to one, as in SRILM's static mixing: such a word gets somewhat less than its exact
mixture). The unigram gives ``</s>`` the transcripts' rate (sentences per token), so the
mixture keeps their sentence length.
"""

from __future__ import annotations

import logging
import re
from typing import Dict, List, Sequence

from asrlib.errors import AsrError
from asrlib.lang.ngram_types import EOS, Ngram, NgramLm, TextStats

log = logging.getLogger(__name__)

VOCAB_SOURCES = ("", "wordfreq")  # lang.vocab_source
_WORD = re.compile(r"^[a-z][a-z']*$")


def wordfreq_words(size: int) -> Dict[str, float]:
    """The ``size`` most frequent words of wordfreq's large English list that are spelled in letters and apostrophes
    and that CMUdict pronounces, upper-cased, with their frequencies renormalised to sum to one."""
    if size <= 0:
        raise AsrError(f"lang.vocab_size must be > 0 with lang.vocab_source wordfreq, got {size}")
    try:
        import wordfreq
    except ImportError:
        raise AsrError(
            "lang.vocab_source wordfreq needs the wordfreq package (pip install -r requirements.txt)"
        ) from None
    from asrlib.lang.lexicon import cmudict_words

    known = cmudict_words()
    out: Dict[str, float] = {}
    for w, f in sorted(wordfreq.get_frequency_dict("en", wordlist="large").items(), key=lambda x: (-x[1], x[0])):
        if _WORD.match(w) and w.upper() in known:
            out[w.upper()] = f
            if len(out) == size:
                break
    total = sum(out.values())
    return {w: f / total for w, f in out.items()}


def background_words(source: str, size: int) -> Dict[str, float]:
    """``{WORD: probability}`` of ``lang.vocab_source`` (``{}`` for ``""``)."""
    if source not in VOCAB_SOURCES:
        raise AsrError(f"lang.vocab_source must be one of {VOCAB_SOURCES}, got {source!r}")
    return wordfreq_words(size) if source == "wordfreq" else {}


def unigram_lm(probs: Dict[str, float], eos_prob: float) -> NgramLm:
    """A unigram model of ``probs`` (summing to one) that ends a sentence with probability ``eos_prob``."""
    if not 0.0 < eos_prob < 1.0:
        raise AsrError(f"the end-of-sentence probability must lie in (0, 1), got {eos_prob}")
    uni: Dict[Ngram, float] = {(w,): (1.0 - eos_prob) * p for w, p in probs.items()}
    uni[(EOS,)] = eos_prob
    return NgramLm(1, [uni], [{}], [(0.0, 0.0, 0.0)], TextStats())


def interpolate(a: NgramLm, b: NgramLm, weight: float) -> NgramLm:
    """The back-off model of ``(1 - weight) a + weight b`` (see the module docstring): the n-grams of both models,
    each with its exact mixed probability; back-off weights that normalise every history."""
    if not 0.0 <= weight <= 1.0:
        raise AsrError(f"the interpolation weight must lie in [0, 1], got {weight}")
    order = max(a.order, b.order)
    probs: List[Dict[Ngram, float]] = []
    backoffs: List[Dict[Ngram, float]] = []

    def mixed(g: Ngram) -> float:
        return (1.0 - weight) * a.prob(g[:-1], g[-1]) + weight * b.prob(g[:-1], g[-1])

    def lower(h: Ngram, w: str) -> float:
        """The new model's p(w | h) by back-off over the orders built so far (len(h) < len(probs))."""
        scale = 1.0
        while True:
            p = probs[len(h)].get((*h, w))
            if p is not None:
                return scale * p
            if not h:
                return 0.0
            scale *= backoffs[len(h) - 1].get(h, 1.0)
            h = h[1:]

    for k in range(order):
        grams = set(a.probs[k] if k < a.order else ()) | set(b.probs[k] if k < b.order else ())
        probs.append({g: mixed(g) for g in grams})
        if k == 0:
            continue
        conts: Dict[Ngram, List[Ngram]] = {}
        for g in grams:
            conts.setdefault(g[:-1], []).append(g)
        bows: Dict[Ngram, float] = {}
        for h, gs in conts.items():
            num = 1.0 - sum(probs[k][g] for g in gs)
            den = 1.0 - sum(lower(h[1:], g[-1]) for g in gs)
            bows[h] = max(num, 1e-12) / max(den, 1e-12)
        backoffs.append(bows)  # a history that continues nowhere keeps weight 1 (ARPA's default)
    backoffs.append({})
    return NgramLm(order, probs, backoffs, [(0.0, 0.0, 0.0)] * order, a.stats)


def check_weight(weight: float, sources: Sequence[str]) -> None:
    """``lang.vocab_lm_weight`` must lie in [0, 1) and needs a ``lang.vocab_source``."""
    if not 0.0 <= weight < 1.0:
        raise AsrError(f"lang.vocab_lm_weight must lie in [0, 1), got {weight}")
    if weight > 0 and not any(sources):
        raise AsrError("lang.vocab_lm_weight > 0 needs lang.vocab_source (the words whose unigram is mixed in)")
