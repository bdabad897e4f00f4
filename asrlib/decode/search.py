"""Search over CTC log-probabilities: a greedy (no grammar) baseline and a TLG beam search.

Both decoders take one utterance's log-probabilities ``[T, V]`` (V = number of lines of ``tokens.txt``, column 0
= blank) and return its words.

**Greedy** (:class:`GreedyWordDecoder`, the no-LM baseline): the best token per frame, repeats collapsed and
blanks dropped (:func:`greedy_ctc`), gives a phone string. Phones are not words, so that string is turned into
words by a lexicon-only match: the phone string, as an acceptor that also allows substituting, deleting and
inserting phones at a cost of 1 each, is composed with L* (every pronunciation of ``lexicon.txt``, any number of
times, no grammar weights) and the shortest path is read off. The words are thus the word sequence whose
pronunciation is nearest (in phone edit distance) to the greedy phones, and exactly the greedy phones' words when
they spell a sequence of lexicon words. Ties between equally near segmentations are broken arbitrarily.

**TLG** (:class:`TlgDecoder`): kaldi-decoder's ``FasterDecoder`` (beam search over ``TLG.fst``) with
``DecodableCtc``; the best path's output labels are word ids of ``words.txt``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterable, List, Sequence

import numpy as np

from asrlib.decode.search_scores import apply_search
from asrlib.errors import AsrError, PathLike
from asrlib.kaldi_imports import kaldi_decoder, kaldifst  # kaldi_hmm_gmm first (import order)
from asrlib.lang.graphs import add_disambig, make_lexicon_fst, read_fst
from asrlib.lang.lexicon import read_lexicon, read_tokens, read_words


def greedy_ctc(logprobs: np.ndarray) -> List[int]:
    """Best token per frame, consecutive repeats collapsed, blanks (id 0) dropped."""
    if logprobs.ndim != 2:
        raise AsrError(f"log-probabilities must be a [frames, tokens] matrix, got shape {logprobs.shape}")
    if logprobs.shape[0] == 0:
        return []
    best = np.argmax(logprobs, axis=1)
    keep = np.ones(len(best), dtype=bool)
    keep[1:] = best[1:] != best[:-1]
    return [int(t) for t in best[keep] if t != 0]


def _check_dims(logprobs: np.ndarray, num_tokens: int, lang_dir: Path) -> None:
    if logprobs.ndim != 2 or logprobs.shape[1] != num_tokens:
        raise AsrError(
            f"log-probabilities have shape {tuple(logprobs.shape)} but {lang_dir / 'tokens.txt'} has "
            f"{num_tokens} tokens; was the model trained with this lang directory?"
        )


class GreedyWordDecoder:
    """Greedy CTC tokens mapped to the nearest lexicon word sequence (see the module docstring)."""

    edit_cost = 1.0

    def __init__(self, lang_dir: PathLike):
        self.lang_dir = Path(lang_dir)
        self.tokens = read_tokens(self.lang_dir / "tokens.txt")
        self.id2word = read_words(self.lang_dir / "words.txt")
        words = {w: i for i, w in self.id2word.items()}
        entries, _ = add_disambig(read_lexicon(self.lang_dir / "lexicon.txt"))
        self.lexicon_fst = make_lexicon_fst(entries, self.tokens, words, disambig0=None)
        kaldifst.arcsort(self.lexicon_fst, sort_type="ilabel")
        self.phone_ids = sorted(i for t, i in self.tokens.items() if i != 0)
        self.frames_searched = 0

    def phones_to_words(self, phones: Sequence[int]) -> List[str]:
        """Words whose pronunciations are nearest (phone edit distance) to ``phones``."""
        if not phones:
            return []
        fst = kaldifst.compose(self._edit_acceptor(phones), self.lexicon_fst)
        if fst.num_states == 0:
            return []
        ok, _, olabels, _ = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(fst))
        if not ok:
            raise AsrError("internal error: the shortest path of the greedy lexicon match is not linear")
        return [self.id2word[w] for w in olabels]

    def _edit_acceptor(self, phones: Sequence[int]) -> kaldifst.StdVectorFst:
        """Acceptor of ``phones`` that also reads any phone string at cost 1 per edit (sub / del / ins)."""
        c = self.edit_cost
        fst = kaldifst.StdVectorFst()
        for _ in range(len(phones) + 1):
            fst.add_state()
        fst.start = 0
        fst.set_final(len(phones), 0.0)
        for i in range(len(phones) + 1):
            for p in self.phone_ids:  # insertion
                fst.add_arc(i, kaldifst.StdArc(p, p, c, i))
            if i == len(phones):
                continue
            fst.add_arc(i, kaldifst.StdArc(0, 0, c, i + 1))  # deletion
            for p in self.phone_ids:  # match or substitution
                fst.add_arc(i, kaldifst.StdArc(p, p, 0.0 if p == phones[i] else c, i + 1))
        kaldifst.arcsort(fst, sort_type="olabel")
        return fst

    def decode(self, logprobs: np.ndarray) -> List[str]:
        _check_dims(logprobs, len(self.tokens), self.lang_dir)
        self.frames_searched += logprobs.shape[0]
        return self.phones_to_words(greedy_ctc(logprobs))

    def decode_batch(self, batch: Iterable[np.ndarray]) -> List[List[str]]:
        return [self.decode(lp) for lp in batch]


class TlgDecoder:
    """Beam search over ``lang_dir/TLG.fst`` with kaldi-decoder's FasterDecoder.

    ``acoustic_scale`` multiplies the log-probabilities (DecodableCtc has no scale option); ``blank_penalty`` is
    subtracted from the blank column before scaling (> 0 makes deletions less likely). ``frames_searched`` and
    ``search_seconds`` accumulate over calls, for real-time factors.

    A search whose surviving tokens are all in non-final states (a known-length grammar, ``one_word`` or
    ``words_N``, under a peaky model) is run again with ``retry_beam`` (> ``beam``; 0 = no retry), like Kaldi's
    aligners; ``reached_final`` says whether the last utterance's best path ends in a final state (if not, it is the
    best partial path, as Kaldi's decoders output with --allow-partial) and ``retries`` counts the second searches.
    """

    def __init__(
        self,
        lang_dir: PathLike,
        beam: float = 12.0,
        max_active: int = 3000,
        acoustic_scale: float = 1.0,
        blank_penalty: float = 0.0,
        retry_beam: float = 0.0,
    ):
        self.lang_dir = Path(lang_dir)
        self.tokens = read_tokens(self.lang_dir / "tokens.txt")
        self.id2word = read_words(self.lang_dir / "words.txt")
        self.graph = read_fst(self.lang_dir / "TLG.fst")
        self.beam, self.max_active = float(beam), int(max_active)
        self.acoustic_scale, self.blank_penalty = float(acoustic_scale), float(blank_penalty)
        opts = kaldi_decoder.FasterDecoderOptions(beam=self.beam, max_active=self.max_active)
        self.decoder = kaldi_decoder.FasterDecoder(self.graph, opts)
        self.retry_decoder = None
        if retry_beam > self.beam:
            self.retry_decoder = kaldi_decoder.FasterDecoder(
                self.graph, kaldi_decoder.FasterDecoderOptions(beam=float(retry_beam), max_active=self.max_active)
            )
        self.frames_searched = 0
        self.search_seconds = 0.0
        self.reached_final = True
        self.retries = 0

    def decode(self, logprobs: np.ndarray) -> List[str]:
        """Best word sequence for one utterance's ``[T, V]`` log-probabilities (float32 or float64)."""
        _check_dims(logprobs, len(self.tokens), self.lang_dir)
        if logprobs.shape[0] == 0:
            return []
        t0 = time.perf_counter()
        scores = apply_search(logprobs, self.acoustic_scale, self.blank_penalty)  # a copy
        decoder = self.decoder
        decoder.decode(kaldi_decoder.DecodableCtc(scores))
        if not decoder.reached_final() and self.retry_decoder is not None:
            decoder, self.retries = self.retry_decoder, self.retries + 1
            decoder.decode(kaldi_decoder.DecodableCtc(scores))
        self.reached_final = decoder.reached_final()
        ok, lattice = decoder.get_best_path()
        words: List[str] = []
        if ok:
            ok, _, olabels, _ = kaldifst.get_linear_symbol_sequence(lattice)
            if not ok:
                raise AsrError("internal error: the decoder's best path is not linear")
            words = [self.id2word[w] for w in olabels]
        self.frames_searched += logprobs.shape[0]
        self.search_seconds += time.perf_counter() - t0
        return words

    def decode_batch(self, batch: Iterable[np.ndarray]) -> List[List[str]]:
        return [self.decode(lp) for lp in batch]


def make_decoder(method: str, lang_dir: Path, cfg):
    """The word search ``method`` (greedy | tlg) over ``lang_dir`` with the settings of a ``decode`` config section."""
    if method == "greedy":
        return GreedyWordDecoder(lang_dir)
    return TlgDecoder(
        lang_dir,
        beam=cfg.beam,
        max_active=cfg.max_active,
        acoustic_scale=cfg.acoustic_scale,
        blank_penalty=cfg.blank_penalty,
        retry_beam=cfg.retry_beam,
    )
