"""Synthetic word text for measuring LM training and graph builds at chosen sizes (bench/graph_scale.py, tests).

Words are spelled from the letters A-Z as consonant-vowel syllables (so a G2P, BPE or a letter lexicon works on
them), ranked by a Zipf law. Sentences come from a simple Markov source: the next word is, with probability
``follow``, one of the previous word's few favourite successors (itself Zipf-ranked), else a fresh Zipf draw; so the
text has repeated bigrams and trigrams as real text does, and more text gives more distinct n-grams.
"""

from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np

from asrlib.errors import PathLike
from asrlib.io.atomic import atomic_open

_CONSONANTS = "BDFGKLMNPRSTVZ"
_VOWELS = "AEIOU"


def spell_vocabulary(size: int, seed: int = 0) -> List[str]:
    """``size`` distinct upper-case words of 1-5 consonant-vowel syllables (a final consonant on some)."""
    rng = np.random.default_rng(seed)
    out: List[str] = []
    seen = set()
    while len(out) < size:
        n_syl = min(5, int(rng.geometric(0.45)) + (len(out) > 500) + (len(out) > 20000))
        w = "".join(
            _CONSONANTS[rng.integers(len(_CONSONANTS))] + _VOWELS[rng.integers(len(_VOWELS))] for _ in range(n_syl)
        )
        if rng.random() < 0.3:
            w += _CONSONANTS[rng.integers(14)]
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


def _zipf_probs(n: int, exponent: float) -> np.ndarray:
    p = 1.0 / (np.arange(n) + 2.7) ** exponent
    return p / p.sum()


def write_zipf_text(
    path: PathLike,
    vocab: List[str],
    num_tokens: int,
    seed: int = 0,
    exponent: float = 1.0,
    follow: float = 0.6,
    successors: int = 20,
    batch: int = 4096,
) -> int:
    """Write about ``num_tokens`` words of Markov-Zipf text over ``vocab`` to ``path``, one sentence (5-20 words)
    a line, atomically. Returns the number of sentences."""
    rng = np.random.default_rng(seed)
    v = len(vocab)
    cdf = np.cumsum(_zipf_probs(v, exponent))
    succ_cdf = np.cumsum(_zipf_probs(successors, 1.2))
    words = np.array(vocab, dtype=object)
    written = sentences = 0
    with atomic_open(Path(path)) as f:
        while written < num_tokens:
            lengths = rng.integers(5, 21, size=batch)
            n = int(lengths.max())
            ids = np.empty((batch, n), dtype=np.int64)
            ids[:, 0] = np.minimum(np.searchsorted(cdf, rng.random(batch)), v - 1)
            for t in range(1, n):
                fresh = np.minimum(np.searchsorted(cdf, rng.random(batch)), v - 1)
                j = np.minimum(np.searchsorted(succ_cdf, rng.random(batch)), successors - 1)
                favourite = (ids[:, t - 1] * 7919 + j * 104729 + 13) % v
                ids[:, t] = np.where(rng.random(batch) < follow, favourite, fresh)
            lines = [" ".join(words[row[:k]]) for row, k in zip(ids, lengths)]
            f.write("\n".join(lines) + "\n")
            written += int(lengths.sum())
            sentences += batch
    return sentences
