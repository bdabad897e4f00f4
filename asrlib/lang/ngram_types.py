"""The n-gram types every LM module shares: the sentence-boundary and unknown-word symbols, an n-gram key, what the
text reader saw (:class:`TextStats`) and a back-off model (:class:`NgramLm`). They live apart from the estimator
(:mod:`asrlib.lang.ngram`), the ARPA reader and writer (:mod:`asrlib.lang.arpa`), pruning (:mod:`asrlib.lang.prune`)
and KenLM (:mod:`asrlib.lang.kenlm`) so that those import this module and each other without a circle."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
Ngram = Tuple[str, ...]


@dataclass
class TextStats:
    """What was read: sentences (non-empty lines), word tokens (``<s>``/``</s>`` not counted), OOV tokens (words
    outside the vocabulary, or with a character outside ``alphabet``, or longer than ``max_word_len``: all become
    ``<unk>``), and the empty lines skipped (count and the first few ``file:line``)."""

    sentences: int = 0
    tokens: int = 0
    oov_tokens: int = 0
    oov_words: Counter = field(default_factory=Counter)
    bad_char_words: Counter = field(default_factory=Counter)
    too_long_words: Counter = field(default_factory=Counter)
    empty_lines: int = 0
    empty_examples: List[str] = field(default_factory=list)


@dataclass
class NgramLm:
    """An estimated model: per order ``k`` (index ``k - 1``) the probability of every n-gram and the back-off
    weight (γ) of every n-gram that is a history; linear, not log. ``discounts[k - 1]`` = (D1, D2, D3+)."""

    order: int
    probs: List[Dict[Ngram, float]]
    backoffs: List[Dict[Ngram, float]]
    discounts: List[Tuple[float, float, float]]
    stats: TextStats
    raw: List[Counter] = field(default_factory=list)  # raw counts per order (for count cut-offs); [] when read

    def ngram_counts(self) -> List[int]:
        """Number of n-grams per order as written to ARPA (the unigrams include ``<s>``)."""
        return [len(self.probs[0]) + 1] + [len(p) for p in self.probs[1:]]

    def prob(self, history: Ngram, word: str) -> float:
        """p(word | history) by back-off (0 for a word the model lacks); ``history`` may be longer than needed."""
        h = history[len(history) - self.order + 1 :] if self.order > 1 else ()
        scale = 1.0
        while True:
            p = self.probs[len(h)].get((*h, word))
            if p is not None:
                return scale * p
            if not h:
                return 0.0
            scale *= self.backoffs[len(h) - 1].get(h, 1.0)
            h = h[1:]
