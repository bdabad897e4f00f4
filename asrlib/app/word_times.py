"""Word times and confidences from a CTC best path: the path's token runs, matched to the words' pronunciations.

**Word times** come from the CTC alignment. One output frame is ``frame_shift × subsampling`` = 30 ms; output
frame ``f`` spans ``[0.03·f, 0.03·(f+1))`` seconds. Along the best path (TLG) or the per-frame argmax (greedy), each
run of consecutive frames with the same non-blank token is one emitted token. A word's ``start`` is the start of
the first frame of its first token, its ``end`` the end of the last frame of its last token (capped at the audio
duration). CTC emissions are peaky and a unidirectional LSTM emits a phone after hearing it, so times mark where
the model *recognised* the word: typically a little after the word begins, and ``end - start`` is shorter than the
spoken word. Words are in order and never overlap.

**Confidence** of a word: the mean, over the tokens emitted for it, of the token's peak posterior probability
``max_f exp(logp[f, token])`` over the frames of its run. 1.0 = the network was certain of every phone. (For the
greedy method, a word whose phones were all absent from the greedy phone string and filled in by the lexicon
match has confidence 0 and ``start == end``.)
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from asrlib.app.results import Result, Segment, Word


def token_runs(frame_tokens: Sequence[int]) -> List[Tuple[int, int, int]]:
    """CTC emissions along a frame-level token path: ``(token, first frame, last frame)`` for each run of
    consecutive frames with the same non-blank token (blank = 0)."""
    runs: List[Tuple[int, int, int]] = []
    prev = 0
    for f, t in enumerate(int(t) for t in frame_tokens):
        if t != 0 and t == prev:
            runs[-1] = (t, runs[-1][1], f)
        elif t != 0:
            runs.append((t, f, f))
        prev = t
    return runs


def _match_exact(
    words: Sequence[str], prons: Dict[str, List[List[int]]], toks: Sequence[int]
) -> Optional[List[Tuple[int, int]]]:
    """Split ``toks`` into the words' pronunciations exactly: run-index spans ``[a, b)`` per word, or None.

    Depth-first over the pronunciation choices (iterative), remembering dead ends ``(word, position)``, so the
    work is at most words × positions × pronunciations.
    """
    toks = list(toks)
    failed = set()
    stack: List[Tuple[int, int]] = []  # (start position, pronunciation index) of each matched word
    j = i = k = 0
    while True:
        advanced = False
        if j < len(words):
            ps = prons.get(words[j], [])
            while k < len(ps):
                p = ps[k]
                if (j + 1, i + len(p)) not in failed and toks[i : i + len(p)] == p:
                    stack.append((i, k))
                    j, i, k = j + 1, i + len(p), 0
                    advanced = True
                    break
                k += 1
        elif i == len(toks):
            ends = [s for s, _ in stack[1:]] + [len(toks)]
            return [(s, e) for (s, _), e in zip(stack, ends)]
        if advanced:
            continue
        failed.add((j, i))
        if not stack:
            return None
        i, k = stack.pop()
        j, k = j - 1, k + 1


def _match_edit(
    words: Sequence[str], prons: Dict[str, List[List[int]]], toks: Sequence[int]
) -> List[Optional[Tuple[int, int]]]:
    """Minimum-edit alignment of ``toks`` to the words (any of each word's pronunciations): for each word the
    span ``[a, b)`` of the runs it matched or substituted, or None if all its phones were deletions.

    Dynamic programming over (phone-lattice node) × (position in ``toks``), one numpy row per node: costs 1 for a
    substitution, an inserted run or a deleted phone. O(nodes × runs) time and memory — used per segment.
    """
    n = len(toks)
    t = np.asarray(toks, dtype=np.int64)
    idx = np.arange(n + 1)
    # nodes: boundary node per word boundary, plus one node per phone position of each pronunciation
    rows: List[np.ndarray] = []
    back: List[Tuple[np.ndarray, np.ndarray, List[Tuple[int, int, int]]]] = []  # (choice, op, preds)
    owner: List[int] = []  # word index owning a node's incoming phone (-1 for boundary nodes)

    def add_node(preds: List[Tuple[int, int, int]], word: int) -> int:
        """preds: (node, phone, is_boundary_join); returns the node id."""
        best = np.full(n + 1, np.inf)
        choice = np.full(n + 1, -1, dtype=np.int64)
        op = np.zeros(n + 1, dtype=np.int8)  # 0 start, 1 sub/match, 2 delete phone, 3 insert run, 4 join
        for k, (u, ph, join) in enumerate(preds):
            ru = rows[u]
            if join:
                cand = ru
                better = cand < best
                best, choice, op = np.where(better, cand, best), np.where(better, k, choice), np.where(better, 4, op)
                continue
            sub = np.full(n + 1, np.inf)
            sub[1:] = ru[:-1] + (t != ph)
            better = sub < best
            best, choice, op = np.where(better, sub, best), np.where(better, k, choice), np.where(better, 1, op)
            dele = ru + 1
            better = dele < best
            best, choice, op = np.where(better, dele, best), np.where(better, k, choice), np.where(better, 2, op)
        # insertions: best[i] = min_k<=i best[k] + (i - k)
        ins = np.minimum.accumulate(best - idx) + idx
        better = ins < best
        op = np.where(better, 3, op)
        best = np.where(better, ins, best)
        rows.append(best)
        back.append((choice, op, preds))
        owner.append(word)
        return len(rows) - 1

    start = np.full(n + 1, np.inf)
    start[0] = 0
    rows.append(np.minimum.accumulate(start - idx) + idx)  # node 0: leading insertions
    back.append((np.full(n + 1, -1), np.where(idx > 0, 3, 0).astype(np.int8), []))
    owner.append(-1)
    boundary = 0
    for j, w in enumerate(words):
        ends = []
        for p in prons.get(w, []) or [[]]:
            u = boundary
            for ph in p:
                u = add_node([(u, ph, 0)], j)
            ends.append((u, 0, 1))
        boundary = add_node(ends, -1)
    # trace back from (boundary, n)
    spans: List[List[int]] = [[] for _ in words]
    node, i = boundary, n
    while not (node == 0 and i == 0):
        choice, op, preds = back[node]
        o = int(op[i])
        if o == 3:
            i -= 1
            continue
        u = preds[int(choice[i])][0]
        if o == 1:
            spans[owner[node]].append(i - 1)
            i -= 1
        node = u
    return [(min(s), max(s) + 1) if s else None for s in spans]


def align_words(
    words: Sequence[str], prons: Dict[str, List[List[int]]], runs: Sequence[Tuple[int, int, int]]
) -> List[Optional[Tuple[int, int]]]:
    """Run-index span ``[a, b)`` of each word (None: no run), exact when the runs spell the words."""
    toks = [r[0] for r in runs]
    exact = _match_exact(words, prons, toks)
    if exact is not None:
        return list(exact)
    return _match_edit(words, prons, toks)


def timed_words(
    words: Sequence[str],
    prons: Dict[str, List[List[int]]],
    runs: Sequence[Tuple[int, int, int]],
    posteriors: Sequence[float],
    frame_seconds: float,
    duration: float,
    start: int,
) -> List[Word]:
    """``words`` (a best path's) with times and confidences: ``runs`` are that path's token runs (:func:`token_runs`)
    in the recording's output frames, ``posteriors`` the best posterior of each run's token over its frames, and
    ``start`` the output frame the path begins at (a word with no run of its own gets the end of the one before,
    or ``start``); times are capped at ``duration`` seconds."""
    spans = align_words(words, prons, runs)
    fs = frame_seconds
    out: List[Word] = []
    prev_end = round(start * fs, 6)
    for w, span in zip(words, spans):
        if span is None:
            t = min(prev_end, duration)
            out.append(Word(w, t, t, 0.0))
            continue
        a, b = span
        begin = round(min(runs[a][1] * fs, duration), 6)
        end = round(min((runs[b - 1][2] + 1) * fs, duration), 6)
        out.append(Word(w, begin, end, float(np.mean(posteriors[a:b]))))
        prev_end = end
    return out


def result_of_stream(
    segments: Sequence, prons: Dict[str, List[List[int]]], frame_seconds: float, duration: float
) -> Result:
    """The :class:`Result` of a streaming recogniser's input from its segments (:class:`asrlib.export.streaming.
    StreamSegment`: words, times and best path), word times and confidences as
    :class:`asrlib.app.recognizer.Recognizer` gives them."""
    out: List[Segment] = []
    for seg in segments:
        runs = [(t, f0 + seg.first, f1 + seg.first) for t, f0, f1 in token_runs(seg.tokens)]
        posteriors = [float(seg.posteriors[f0 - seg.first : f1 - seg.first + 1].max()) for _, f0, f1 in runs]
        words = timed_words(seg.words, prons, runs, posteriors, frame_seconds, duration, seg.first)
        out.append(Segment(min(seg.start, duration), min(seg.end, duration), " ".join(seg.words), words))
    return Result.of_segments(out, duration)
