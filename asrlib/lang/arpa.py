"""ARPA n-gram files: writing an :class:`~asrlib.lang.ngram_types.NgramLm`; reading one (ours, SRILM's,
KenLM's, ...) back, with a clear error naming the file and line for a truncated or inconsistent file; and scoring
text with a model (log-probabilities by back-off, perplexity).

Checked while reading: the ``\\data\\`` header and its ``ngram k=n`` lines, section headers in order, the number of
fields of each entry, numbers that parse (a log10 probability above 0 is only a warning: KenLM writes some), no
n-gram listed twice, every word of an n-gram present among the unigrams, every n-gram's history (its first
``k - 1`` words) present one order below (the back-off weight lives there), each section holding as many entries
as ``\\data\\`` declares, and the ``\\end\\`` marker (a file that stops early says where and how many entries
it had).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import atomic_open
from asrlib.lang.ngram_types import BOS, EOS, UNK, Ngram, NgramLm, TextStats

log = logging.getLogger(__name__)

LOG10_TOLERANCE = 1e-4  # log10 probabilities up to this above 0 are rounding, not an error


def write_arpa(lm: NgramLm, path: PathLike) -> None:
    """The model in ARPA format (log10 probabilities and back-off weights; n-grams sorted), written atomically."""
    with atomic_open(path) as f:
        f.write("\\data\\\n")
        for k, n in enumerate(lm.ngram_counts(), 1):
            f.write(f"ngram {k}={n}\n")
        for k in range(1, lm.order + 1):
            f.write(f"\n\\{k}-grams:\n")
            probs, bows = lm.probs[k - 1], lm.backoffs[k - 1]
            entries = sorted(probs.items())
            if k == 1:  # <s> is only a history: ARPA's convention of -99 for "never predicted"
                entries = sorted(entries + [((BOS,), 0.0)])
            for g, p in entries:
                line = f"{math.log10(p) if p > 0 else -99:.6f}\t{' '.join(g)}"
                if g in bows:
                    line += f"\t{math.log10(bows[g]):.6f}"
                f.write(line + "\n")
        f.write("\n\\end\\\n")


def read_arpa(path: PathLike, max_order: Optional[int] = None, structure_only: bool = False) -> NgramLm:
    """The model of the ARPA file ``path`` (orders above ``max_order`` are checked for structure and skipped).
    ``<s>``'s unigram probability is not kept (it is never predicted); its back-off weight is.

    ``structure_only``: check the header, sections, counts, fields and numbers only, keeping nothing (constant
    memory, for files too large to load; the word, history and duplicate checks need the tables) and return a model
    with empty tables."""
    path = Path(path)
    if not path.is_file():
        raise AsrError(f"ARPA file {path} does not exist")

    def fail(lineno: int, what: str) -> AsrError:
        return AsrError(f"{path}:{lineno}: {what}")

    declared: Dict[int, int] = {}
    probs: List[Dict[Ngram, float]] = []
    backoffs: List[Dict[Ngram, float]] = []
    section = "start"  # start | data | k (int as str) | end
    k = 0
    seen = 0
    header_line = 0
    lineno = 0
    bos_seen = False
    positive: List[int] = []  # KenLM's lmplz writes a few log10 p > 0 on some texts; it warns, so do we

    def close_section() -> None:
        if k and seen != declared[k]:
            raise fail(
                header_line,
                f"the \\{k}-grams: section holds {seen} entries but \\data\\ declares ngram {k}={declared[k]}",
            )

    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as e:
                raise fail(lineno, f"not valid UTF-8 ({e.reason})") from None
            if not line:
                continue
            if section == "start":
                if line == "\\data\\":
                    section = "data"
                continue  # text before \data\ is a comment in ARPA
            if line.startswith("\\"):
                if line == "\\end\\":
                    close_section()
                    section = "end"
                    break
                if not (line.endswith("-grams:") and line[1:-7].isdigit()):
                    raise fail(lineno, f"unknown section header '{line}'")
                if not declared:
                    raise fail(lineno, "\\data\\ declares no n-gram counts")
                close_section()
                new_k = int(line[1:-7])
                if new_k != k + 1 or new_k not in declared:
                    raise fail(lineno, f"section \\{new_k}-grams: out of order or not declared in \\data\\")
                k, seen, header_line, section = new_k, 0, lineno, str(new_k)
                if max_order is None or k <= max_order:
                    probs.append({})
                    backoffs.append({})
                continue
            if section == "data":
                key, _, value = line.partition("=")
                parts = key.split()
                if len(parts) != 2 or parts[0] != "ngram" or not parts[1].isdigit() or not value.strip().isdigit():
                    raise fail(lineno, f"expected 'ngram K=N' in \\data\\, got '{line}'")
                order = int(parts[1])
                if order != len(declared) + 1:
                    raise fail(lineno, f"'ngram {order}=' out of order in \\data\\")
                declared[order] = int(value)
                continue
            if section == "end":
                break
            # an entry of the k-grams section
            seen += 1
            if seen > declared[k]:
                raise fail(lineno, f"more \\{k}-grams: entries than the {declared[k]} \\data\\ declares")
            if max_order is not None and k > max_order:
                continue
            fields = line.split()
            if len(fields) not in (k + 1, k + 2):
                raise fail(lineno, f"a {k}-gram entry needs {k + 1} or {k + 2} fields, got {len(fields)}: '{line}'")
            try:
                logp = float(fields[0])
                bow = float(fields[k + 1]) if len(fields) == k + 2 else None
            except ValueError:
                raise fail(lineno, f"not a number in '{line}'") from None
            if math.isnan(logp) or (bow is not None and not math.isfinite(bow)):
                raise fail(lineno, f"a log10 probability or back-off weight is not a number: '{line}'")
            if logp > LOG10_TOLERANCE:
                positive.append(lineno)
            if structure_only:
                continue
            g = tuple(fields[1 : k + 1])
            table = probs[k - 1]
            if g in table or (g == (BOS,) and bos_seen):
                raise fail(lineno, f"{k}-gram '{' '.join(g)}' is listed twice")
            if k > 1:
                unigrams = probs[0]
                for w in g:
                    if (w,) not in unigrams and w != BOS:
                        raise fail(lineno, f"word '{w}' of '{' '.join(g)}' is not among the 1-grams")
                h = g[:-1]
                if h not in probs[k - 2] and not (h == (BOS,) and bos_seen):
                    raise fail(lineno, f"the history '{' '.join(h)}' of '{' '.join(g)}' is not among the {k - 1}-grams")
            if g == (BOS,):
                bos_seen = True
            else:
                table[g] = 10.0**logp
            if bow is not None:
                backoffs[k - 1][g] = 10.0**bow
    if section != "end":
        where = f"inside the \\{k}-grams: section ({seen} of {declared[k]} entries)" if k else "before any n-grams"
        raise AsrError(f"{path}: truncated: the file ends at line {lineno} {where}, without \\end\\")
    if not structure_only and (not probs or not probs[0]):
        raise AsrError(f"{path}: no 1-grams")
    if positive:
        log.warning(
            "%s: %d n-gram(s) with a log10 probability above 0 (a probability above 1), first at line(s) %s",
            path,
            len(positive),
            ", ".join(map(str, positive[:5])),
        )
    top = len(probs)
    for d in backoffs[top - 1 :]:
        d.clear()  # the top order's weights, if any, are never used
    return NgramLm(top, probs, backoffs, [], TextStats())


def arpa_counts(path: PathLike) -> List[int]:
    """The n-gram counts per order that the ``\\data\\`` header of ``path`` declares (the file is not read
    further: for models too large to load)."""
    counts: List[int] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.startswith("ngram ") and "=" in line:
                counts.append(int(line.split("=", 1)[1]))
            elif counts and line.startswith("\\"):
                break
    if not counts:
        raise AsrError(f"{path}: no \\data\\ header with 'ngram K=N' lines")
    return counts


# ---------------------------------------------------------------- scoring
def sentence_log10(lm: NgramLm, words: List[str]) -> tuple[float, int, int]:
    """``(log10 p(words </s> | <s>), predicted tokens, OOV tokens)``. A word outside the model's unigrams is
    scored as ``<unk>`` when the model has it, else skipped (counted as OOV; the history restarts after it, as
    SRILM does)."""
    has_unk = (UNK,) in lm.probs[0]
    total, n, oov = 0.0, 0, 0
    h: Ngram = (BOS,)
    keep = lm.order - 1
    for w in [*words, EOS]:
        if (w,) not in lm.probs[0]:
            oov += 1
            if not has_unk:
                h = ()
                continue
            w = UNK
        p = lm.prob(h, w)
        total += math.log10(p) if p > 0 else -99.0
        n += 1
        h = (*h, w)[-keep:] if keep else ()
    return total, n, oov


def perplexity(lm: NgramLm, sentences: Iterable[List[str]]) -> Dict[str, float]:
    """Perplexity over ``sentences`` (``</s>`` predicted, ``<s>`` not; OOVs as in :func:`sentence_log10`)."""
    total, n, oov, sents = 0.0, 0, 0, 0
    for words in sentences:
        lp, k, o = sentence_log10(lm, words)
        total, n, oov, sents = total + lp, n + k, oov + o, sents + 1
    if n == 0:
        raise AsrError("perplexity: no word to score")
    return {"ppl": 10 ** (-total / n), "log10_prob": total, "tokens": n, "oov": oov, "sentences": sents}
