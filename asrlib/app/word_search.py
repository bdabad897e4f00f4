"""The recognizer's search: a segment's CTC log-probabilities → its words, with times and confidences.

``tlg``: the beam search over the lang dir's ``TLG.fst`` (:class:`asrlib.decode.search.TlgDecoder`, the decode
stage's search, with the ``decode`` settings), its best path giving the token per frame; ``greedy``: the best
token per frame, matched to the lexicon (:class:`asrlib.decode.search.GreedyWordDecoder`), in pieces of at most
``max_greedy_segment`` seconds split at the longest runs of blank frames. Times and confidences:
:mod:`asrlib.app.word_times`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

from asrlib.app.results import Word
from asrlib.app.word_times import timed_words, token_runs
from asrlib.config import DecodeConfig
from asrlib.errors import AsrError

METHODS = ("tlg", "greedy")


def check_method(method: str) -> None:
    """An :class:`AsrError` unless ``method`` is one of :data:`METHODS`."""
    if method not in METHODS:
        raise AsrError(f"unknown method '{method}' (choose from {', '.join(METHODS)})")


class WordSearch:
    """Words of log-probs by ``method`` over the lang dir ``lang`` of a model with ``vocab_size`` outputs, one
    output frame every ``frame_seconds``. Not thread-safe (the TLG search keeps state)."""

    def __init__(
        self,
        lang: Path,
        method: str,
        decode: DecodeConfig,
        vocab_size: int,
        frame_seconds: float,
        max_greedy_segment: float = 30.0,
    ) -> None:
        from asrlib.decode.search import GreedyWordDecoder, TlgDecoder
        from asrlib.lang.lexicon import read_lexicon_ids, read_tokens, read_words

        check_method(method)
        tokens = read_tokens(lang / "tokens.txt")
        if len(tokens) != vocab_size:
            raise AsrError(
                f"the model outputs {vocab_size} tokens but {lang / 'tokens.txt'} has "
                f"{len(tokens)}: the lang dir does not belong to this model"
            )
        if method == "tlg":
            if not (lang / "TLG.fst").is_file():
                raise AsrError(f"{lang} has no TLG.fst; build it (steps.prepare_lang) or use --method greedy")
            self.decoder = TlgDecoder(
                lang,
                beam=decode.beam,
                max_active=decode.max_active,
                acoustic_scale=decode.acoustic_scale,
                blank_penalty=decode.blank_penalty,
            )
        else:
            self.decoder = GreedyWordDecoder(lang)
        self.method = method
        self.id2word = read_words(lang / "words.txt")
        self.prons = read_lexicon_ids(lang)
        self.frame_seconds = frame_seconds
        self.max_greedy_frames = max(1, int(max_greedy_segment / frame_seconds))

    def words(self, lp: np.ndarray, duration: Optional[float], first: int = 0) -> List[Word]:
        """Words of ``lp``, whose frame 0 is the recording's output frame ``first``; times capped at
        ``duration`` (None: not capped)."""
        if self.method == "tlg":
            words, frame_tokens = self._search_tlg(lp)
            pieces = [(0, len(lp), words)]
        else:
            frame_tokens = np.argmax(lp, axis=1) if len(lp) else np.zeros(0, np.int64)
            pieces = [(a, b, self.decoder.decode(lp[a:b])) for a, b in self.greedy_pieces(frame_tokens)]
        out: List[Word] = []
        cap = math.inf if duration is None else duration
        for a, b, piece_words in pieces:
            runs = [(t, f0 + a, f1 + a) for t, f0, f1 in token_runs(frame_tokens[a:b])]
            out.extend(self._words_with_times(piece_words, runs, lp, cap, a, first))
        return out

    def _search_tlg(self, lp: np.ndarray) -> Tuple[List[str], np.ndarray]:
        """The TLG search's words and its best path's token per frame."""
        from asrlib.kaldi_imports import kaldifst

        words = self.decoder.decode(lp)
        if not words:
            return [], np.zeros(len(lp), np.int64)
        ok, lattice = self.decoder.decoder.get_best_path()
        ok2, isyms, osyms, _ = kaldifst.get_linear_symbol_sequence(lattice) if ok else (False, [], [], None)
        if not ok2 or len(isyms) != len(lp) or [self.id2word[o] for o in osyms] != words:
            raise AsrError("internal error: the TLG best path does not have one token per frame")
        return words, np.asarray(isyms, np.int64) - 1  # TLG input label = token id + 1

    def greedy_pieces(self, frame_tokens: np.ndarray) -> List[Tuple[int, int]]:
        """Split frames into pieces of at most ``max_greedy_frames``, cutting in the middle of the longest run of
        blank frames of each over-long piece (or at its limit if it has no blank)."""
        t_len, limit = len(frame_tokens), self.max_greedy_frames
        if t_len <= limit:
            return [(0, t_len)]
        pieces, a = [], 0
        while t_len - a > limit:
            window = frame_tokens[a : a + limit]
            blank = np.concatenate([[False], window == 0, [False]]).astype(np.int8)
            edges = np.flatnonzero(np.diff(blank))
            starts, ends = edges[::2], edges[1::2]
            if len(starts):
                k = int(np.argmax(ends - starts))
                cut = a + int((starts[k] + ends[k]) // 2)
                cut = cut if cut > a else a + limit
            else:
                cut = a + limit
            pieces.append((a, cut))
            a = cut
        pieces.append((a, t_len))
        return pieces

    def _words_with_times(
        self,
        words: Sequence[str],
        runs: List[Tuple[int, int, int]],
        lp: np.ndarray,
        duration: float,
        seg_start: int,
        first: int = 0,
    ) -> List[Word]:
        """Words with times; ``runs`` index frames of ``lp``, whose frame 0 is the recording's frame ``first``."""
        posteriors = [float(np.exp(lp[f0 : f1 + 1, tok].max())) for tok, f0, f1 in runs]
        runs = [(t, f0 + first, f1 + first) for t, f0, f1 in runs]
        return timed_words(words, self.prons, runs, posteriors, self.frame_seconds, duration, seg_start + first)
