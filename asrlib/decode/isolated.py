"""Isolated-word decoding by each candidate word's total CTC probability, for one model or several.

A lang dir built with the one-word grammar (``lang.grammar: one_word``, or an eval set's ``decode.set_grammars``)
says every utterance is exactly one word of a closed list (``lang.grammar_words``, ``decode.set_words``, else the
whole lexicon). The TLG search returns that list's word on the best single CTC path (Viterbi); here every candidate
word is scored by the CTC forward algorithm instead, the sum over all of its alignments and pronunciations:

    log P(X | w) = log sum_{pron of w} sum_{alignments of pron} prod_t p_t(token)

and the word with the highest score wins (the grammar's uniform word cost is the same for all and drops out). With
several models (e.g. seeds) the scores are added, the product rule: a word must fit every model, and, unlike
averaging frame posteriors (steps.combine_logprobs), models whose CTC spikes fall on different frames still agree.
The normalised scores are each utterance's word posteriors (confidences).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Sequence, Tuple

import numpy as np
import torch

from asrlib.errors import AsrError, PathLike
from asrlib.lang.lexicon import read_lexicon_ids, read_tokens


def one_word_vocabulary(lang_dir: Path) -> List[str]:
    """The words the ``G.fst`` of ``lang_dir`` accepts as a whole utterance when it is a one-word grammar (a start
    state that is not final, whose arcs, one per word, all end in final states without arcs: what ``one_word`` and
    ``words_1`` build, with or without ``grammar_words``); an AsrError for any other G."""
    from asrlib.kaldi_imports import kaldifst  # kaldi_hmm_gmm first (import order)
    from asrlib.lang.graphs import read_fst
    from asrlib.lang.lexicon import read_words

    G = read_fst(lang_dir / "G.fst")
    id2word = read_words(lang_dir / "words.txt")

    def final(s):
        return not math.isinf(G.final(s).value)

    start_arcs = list(kaldifst.ArcIterator(G, G.start)) if G.num_states else []
    if (
        not start_arcs
        or final(G.start)
        or any(not final(a.nextstate) or G.num_arcs(a.nextstate) or a.ilabel not in id2word for a in start_arcs)
    ):
        raise AsrError(
            f"{lang_dir / 'G.fst'} is not a one-word grammar; isolated-word decoding needs a lang dir built "
            f"with grammar one_word (e.g. decode.set_grammars: {{SET: one_word}})"
        )
    return sorted({id2word[a.ilabel] for a in start_arcs})


class IsolatedWordScorer:
    """Scores every candidate word of a one-word lang dir by its total CTC log-likelihood (module docstring)."""

    def __init__(self, lang_dir: PathLike):
        self.lang_dir = Path(lang_dir)
        self.words: List[str] = one_word_vocabulary(self.lang_dir)  # G's words: grammar_words, else the lexicon's
        self.tokens = read_tokens(self.lang_dir / "tokens.txt")
        lexicon = read_lexicon_ids(self.lang_dir)
        prons = [(i, pron) for i, w in enumerate(self.words) for pron in lexicon[w]]
        self._word_of_pron = torch.tensor([i for i, _ in prons])
        self._targets = torch.tensor([t for _, p in prons for t in p])
        self._target_lengths = torch.tensor([len(p) for _, p in prons])

    def scores(self, logprobs: np.ndarray) -> np.ndarray:
        """One utterance's CTC log-probabilities [T, V] -> the log-likelihood of each of ``self.words`` (-inf for a
        word whose tokens do not fit in T frames)."""
        if logprobs.ndim != 2 or logprobs.shape[1] != len(self.tokens):
            raise AsrError(
                f"log-probabilities have shape {tuple(logprobs.shape)} but {self.lang_dir / 'tokens.txt'} "
                f"has {len(self.tokens)} tokens; was the model trained with this lang directory?"
            )
        n, t = len(self._target_lengths), logprobs.shape[0]
        x = torch.from_numpy(np.asarray(logprobs, np.float32)).unsqueeze(1).expand(t, n, logprobs.shape[1])
        nll = torch.nn.functional.ctc_loss(
            x, self._targets, torch.full((n,), t), self._target_lengths, blank=0, reduction="none", zero_infinity=False
        )
        per_pron = (-nll).double()
        out = torch.full((len(self.words),), -np.inf, dtype=torch.float64)
        for w in range(len(self.words)):  # logsumexp over each word's pronunciations
            out[w] = torch.logsumexp(per_pron[self._word_of_pron == w], 0)
        return out.numpy()

    def decode(self, logprobs: Sequence[np.ndarray]) -> Tuple[List[str], np.ndarray]:
        """The log-probabilities of one utterance from each of one or more models -> ([best word] or [] when no
        word fits the frames, the word log-posteriors of the summed scores)."""
        total = np.sum([self.scores(lp) for lp in logprobs], axis=0)
        if not np.isfinite(total).any():
            return [], np.full(len(self.words), -np.inf)
        post = total - np.logaddexp.reduce(total[np.isfinite(total)])
        return [self.words[int(np.argmax(total))]], post
