"""Word error rate with kaldialign (Levenshtein alignment with Kaldi's costs), Kaldi-style reports.

:func:`score` compares two ``utt -> text`` maps. An utterance of the reference that is missing from the hypothesis
counts as all deletions and is listed in :attr:`WerResult.missing`; a hypothesis utterance that is not in the
reference is an :class:`AsrError` (wrong reference set?).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, List, Mapping, Sequence, Tuple

import kaldialign

from asrlib.errors import AsrError

EPS = "***"  # Kaldi's ``align-text`` placeholder for an insertion/deletion


@dataclass
class UttAlignment:
    """One utterance: aligned (ref, hyp) word pairs (``EPS`` on one side for ins/del) and its counts."""

    utt: str
    pairs: List[Tuple[str, str]]
    cor: int
    sub: int
    ins: int
    dels: int
    missing: bool = False

    @property
    def errors(self) -> int:
        return self.sub + self.ins + self.dels


@dataclass
class WerResult:
    num_words: int
    errors: int
    ins: int
    dels: int
    subs: int
    wer: float  # percent
    num_utts: int
    sent_errors: int
    ser: float  # percent of utterances with at least one error
    missing: List[str] = field(default_factory=list)  # reference utterances without a hypothesis
    per_utt: List[UttAlignment] = field(default_factory=list, repr=False)

    def kaldi_wer_line(self) -> str:
        """``%WER 1.23 [ 4 / 325, 1 ins, 2 del, 1 sub ]``."""
        return (
            f"%WER {self.wer:.2f} [ {self.errors} / {self.num_words}, {self.ins} ins, {self.dels} del, "
            f"{self.subs} sub ]"
        )

    def kaldi_ser_line(self) -> str:
        return f"%SER {self.ser:.2f} [ {self.sent_errors} / {self.num_utts} ]"

    def summary(self) -> Dict:
        """JSON-serialisable totals (no per-utterance detail)."""
        d = asdict(self)
        d.pop("per_utt")
        d["wer"] = round(self.wer, 4)
        d["ser"] = round(self.ser, 4)
        return d


def align_words(ref: List[str], hyp: List[str]) -> Tuple[List[Tuple[str, str]], int, int, int, int]:
    """Align two word lists; returns (pairs, cor, sub, ins, del)."""
    pairs = [(r, h) for r, h in kaldialign.align(ref, hyp, EPS)] if (ref or hyp) else []
    cor = sub = ins = dels = 0
    for r, h in pairs:
        if r == EPS:
            ins += 1
        elif h == EPS:
            dels += 1
        elif r == h:
            cor += 1
        else:
            sub += 1
    return pairs, cor, sub, ins, dels


def errors_by_part(parts: Sequence[str], hyp: str) -> List[int]:
    """Errors of ``hyp`` aligned against the texts of ``parts`` joined in order (e.g. the utterances of a long
    recording), each counted to the part of its reference word; an insertion to the part of the reference word
    before it (the first part's before any). Their sum is the errors of the joined alignment."""
    owner = [i for i, t in enumerate(parts) for _ in t.split()]
    ref = [w for t in parts for w in t.split()]
    counts = [0] * len(parts)
    if not parts:
        return counts
    pairs, *_ = align_words(ref, hyp.split())
    done = 0  # reference words passed
    for r, h in pairs:
        if r == EPS:
            counts[owner[done - 1] if done else 0] += 1
            continue
        counts[owner[done]] += int(h != r)
        done += 1
    return counts


def score(ref: Mapping[str, str], hyp: Mapping[str, str]) -> WerResult:
    """Score hypothesis texts against reference texts (whitespace-separated words, compared exactly)."""
    if not ref:
        raise AsrError("the reference has no utterances")
    extra = [u for u in hyp if u not in ref]
    if extra:
        raise AsrError(
            f"{len(extra)} hypothesis utterances are not in the reference (e.g. {extra[:3]}); "
            f"scoring against the wrong set?"
        )
    for name, table in (("reference", ref), ("hypothesis", hyp)):
        bad = [u for u, t in table.items() if EPS in t.split()]
        if bad:
            raise AsrError(f"{name} text of '{bad[0]}' contains the reserved word '{EPS}'")
    per_utt: List[UttAlignment] = []
    missing: List[str] = []
    for utt in sorted(ref, key=lambda u: u.encode("utf-8")):
        r = ref[utt].split()
        if utt in hyp:
            pairs, cor, sub, ins, dels = align_words(r, hyp[utt].split())
            per_utt.append(UttAlignment(utt, pairs, cor, sub, ins, dels))
        else:
            missing.append(utt)
            per_utt.append(UttAlignment(utt, [(w, EPS) for w in r], 0, 0, 0, len(r), missing=True))
    num_words = sum(len(ref[u].split()) for u in ref)
    if num_words == 0:
        raise AsrError("the reference texts contain no words; WER is undefined")
    ins = sum(a.ins for a in per_utt)
    dels = sum(a.dels for a in per_utt)
    subs = sum(a.sub for a in per_utt)
    errors = ins + dels + subs
    sent_errors = sum(1 for a in per_utt if a.errors > 0 or a.missing)
    return WerResult(
        num_words=num_words,
        errors=errors,
        ins=ins,
        dels=dels,
        subs=subs,
        wer=100.0 * errors / num_words,
        num_utts=len(per_utt),
        sent_errors=sent_errors,
        ser=100.0 * sent_errors / len(per_utt),
        missing=missing,
        per_utt=per_utt,
    )


def format_per_utt(result: WerResult) -> str:
    """Kaldi ``per_utt`` style: for each utterance ``ref``/``hyp``/``op`` lines with columns padded to align,
    ``#csid`` counts (correct, substitutions, insertions, deletions), and an icefall-style ``align`` line
    (``word`` if correct, ``(ref->hyp)`` otherwise, ``*`` for a missing word)."""
    out: List[str] = []
    for a in result.per_utt:
        ops = ["I" if r == EPS else "D" if h == EPS else "C" if r == h else "S" for r, h in a.pairs]
        widths = [max(len(r), len(h)) for r, h in a.pairs]
        out.append(f"{a.utt} ref  " + " ".join(r.ljust(w) for (r, _), w in zip(a.pairs, widths)).rstrip())
        out.append(f"{a.utt} hyp  " + " ".join(h.ljust(w) for (_, h), w in zip(a.pairs, widths)).rstrip())
        out.append(f"{a.utt} op   " + " ".join(o.ljust(w) for o, w in zip(ops, widths)).rstrip())
        out.append(f"{a.utt} #csid {a.cor} {a.sub} {a.ins} {a.dels}" + ("  (no hypothesis)" if a.missing else ""))
        words = [r if r == h else f"({r.replace(EPS, '*')}->{h.replace(EPS, '*')})" for r, h in a.pairs]
        out.append(f"{a.utt} align " + " ".join(words))
    return "\n".join(out) + ("\n" if out else "")
