"""Training graphs and alignments (Kaldi's compile-train-graphs, align-equal-compiled, gmm-align-compiled).

A training graph is H o C o L o (the transcript as a linear word acceptor), built by kaldi-hmm-gmm's
``TrainingGraphCompiler`` with ``transition_scale = self_loop_scale = 0`` (as ``compile-train-graphs`` does): the
transition log-probabilities are added only at alignment time (scales 1.0 and 0.1 with acoustic scale 0.1, as
Kaldi's align scripts use), so they are never counted twice.

Alignments are sequences of transition ids, one per 10 ms frame. A phone starts at a frame whose transition id
starts a phone and is not a self-loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from asrlib.kaldi_imports import kaldifst, khg
from asrlib.gmm.lang import GmmLang, make_lexicon_fst_with_silence
from asrlib.gmm.model import GmmModel

ACOUSTIC_SCALE = 0.1
TRANSITION_SCALE = 1.0
SELF_LOOP_SCALE = 0.1


class GraphCompiler:
    """Per-utterance training graphs for one model and lexicon."""

    def __init__(self, model: GmmModel, lang: GmmLang, sil_prob: float = 0.5):
        self.lang = lang
        self.lex_fst = make_lexicon_fst_with_silence(lang, sil_prob)
        opts = khg.TrainingGraphCompilerOptions(transition_scale=0.0, self_loop_scale=0.0)
        self._gc = khg.TrainingGraphCompiler(
            trans_model=model.tm, ctx_dep=model.tree, lex_fst=self.lex_fst, disambig_syms=list(lang.disambig), opts=opts
        )

    def compile(self, word_ids: Sequence[int]) -> "kaldifst.StdVectorFst":
        return self._gc.compile_graph_from_text(list(word_ids))


def min_frames(graph: "kaldifst.StdVectorFst") -> int:
    """Fewest frames any path through ``graph`` needs (each arc with a non-zero input label is one frame)."""
    dist = {graph.start: 0}
    frontier = [graph.start]
    best = None
    while frontier:  # breadth-first by number of emitting arcs (the graph is small: one utterance)
        nxt: List[int] = []
        for s in frontier:
            d = dist[s]
            if not math.isinf(graph.final(s).value) and (best is None or d < best):
                best = d
            for arc in kaldifst.ArcIterator(graph, s):
                nd = d + (1 if arc.ilabel != 0 else 0)
                if arc.nextstate not in dist or nd < dist[arc.nextstate]:
                    dist[arc.nextstate] = nd
                    nxt.append(arc.nextstate)
        frontier = nxt
    return best if best is not None else -1


def equal_align(graph: "kaldifst.StdVectorFst", num_frames: int, seed: int = 0) -> Optional[List[int]]:
    """A flat-start alignment: a random path through ``graph`` with exactly ``num_frames`` frames, its frames
    spread evenly over the path's states (kaldifst.equal_align, as Kaldi's align-equal-compiled); None if the
    utterance is too short for its transcript."""
    ok, path = kaldifst.equal_align(ifst=graph, length=num_frames, rand_seed=seed, num_retries=10)
    if not ok:
        return None
    ok, tids, _, _ = kaldifst.get_linear_symbol_sequence(path)
    return list(tids) if ok and len(tids) == num_frames else None


@dataclass
class AlignResult:
    tids: Optional[List[int]]  # None: failed even with the retry beam
    retried: bool
    loglike: float  # acoustic log-likelihood (unscaled) of the best path; 0 when failed


def viterbi_align(
    model: GmmModel,
    graph: "kaldifst.StdVectorFst",
    feats: np.ndarray,
    utt: str = "utt",
    beam: float = 10.0,
    retry_beam: float = 40.0,
) -> AlignResult:
    """Forced alignment of one utterance (gmm-align-compiled): beam search, retried once with ``retry_beam``."""
    g = graph.copy()
    khg.add_transition_probs(
        trans_model=model.tm, transition_scale=TRANSITION_SCALE, self_loop_scale=SELF_LOOP_SCALE, fst=g
    )
    decodable = khg.DecodableAmDiagGmmScaled(
        am=model.am, tm=model.tm, feats=np.ascontiguousarray(feats), scale=ACOUSTIC_SCALE
    )
    cfg = khg.AlignConfig(beam=beam, retry_beam=retry_beam, careful=False)
    _, n_err, n_retried, tot_like, _, tids, _ = khg.align_utterance_wrapper(
        config=cfg,
        utt=utt,
        acoustic_scale=ACOUSTIC_SCALE,
        fst=g,
        decodable=decodable,
        num_done=0,
        num_error=0,
        num_retried=0,
        tot_like=0.0,
        frame_count=0,
    )
    if n_err or not tids:
        return AlignResult(None, bool(n_retried), 0.0)
    return AlignResult(list(tids), bool(n_retried), float(tot_like))


class AlignmentConverter:
    """Alignments (transition ids) -> pdf ids, phone segments, word segments."""

    def __init__(self, model: GmmModel):
        n = model.tm.num_transition_ids
        self.pdf = model.pdf_of_tid()
        self.phone = model.phone_of_tid()
        self.starts = np.zeros(n + 1, dtype=bool)
        for t in range(1, n + 1):
            self.starts[t] = model.tm.transition_ids_is_start_of_phone(t) and not model.tm.is_self_loop(t)
        self.names = model.id2phone
        self.sil_id = model.sil_id

    def to_pdfs(self, tids: Sequence[int]) -> np.ndarray:
        return self.pdf[np.asarray(tids)].astype(np.int32)

    def to_phones(self, tids: Sequence[int]) -> List[Tuple[int, int, int]]:
        """[(phone id, first frame, number of frames), ...]."""
        t = np.asarray(tids)
        if t.size == 0:
            return []
        begin = np.flatnonzero(self.starts[t])
        if begin.size == 0 or begin[0] != 0:
            begin = np.concatenate([[0], begin])
        ends = np.concatenate([begin[1:], [len(t)]])
        return [(int(self.phone[t[b]]), int(b), int(e - b)) for b, e in zip(begin, ends)]

    def to_words(
        self, phones: List[Tuple[int, int, int]], words: Sequence[str], lexicon: Dict[str, List[List[str]]]
    ) -> Optional[List[Tuple[str, int, int]]]:
        """[(word, first frame, number of frames), ...] by matching the non-silence phones to the transcript's
        pronunciations in order; None if they do not spell the transcript."""
        seq = [(self.names[p], b, n) for p, b, n in phones if p != self.sil_id]
        out, i = [], 0
        for w in words:
            for pron in sorted(lexicon.get(w, []), key=len, reverse=True):
                if [s[0] for s in seq[i : i + len(pron)]] == pron:
                    b = seq[i][1]
                    e = seq[i + len(pron) - 1][1] + seq[i + len(pron) - 1][2]
                    out.append((w, b, e - b))
                    i += len(pron)
                    break
            else:
                return None
        return out if i == len(seq) else None
