"""The GMM system's phones, HMM topology and lexicon FST (Kaldi's lang dir, built from ours).

Phone ids: the non-silence phones keep their ids of ``tokens.txt`` (1..P; id 0 is epsilon here, blank there), the
silence phone gets P + 1 unless ``tokens.txt`` already has it, and the phone-level disambiguation symbols
``#0..#K`` follow. So a GMM phone id and the CTC token id of the same phone are equal.

Topology (Kaldi's defaults): 3 emitting left-to-right states for every non-silence phone; 5 states for silence,
the middle ones fully connected (Kaldi's ``utils/gen_topo.pl``). The lexicon FST allows optional silence at the
start and after every word with probability ``sil_prob`` (Kaldi's ``make_lexicon_fst.py --sil-prob``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from asrlib.errors import AsrError, PathLike
from asrlib.kaldi_imports import kaldifst, khg
from asrlib.lang.graphs import add_disambig
from asrlib.lang.lexicon import BLANK, read_lexicon, read_tokens, read_words

_NUM_NONSIL_STATES = 3
_NUM_SIL_STATES = 5


@dataclass
class GmmLang:
    """Phones, words and the lexicon of a GMM system (everything it needs from the lang dir)."""

    phones: Dict[str, int]  # phone -> id (non-silence + silence, no disambig)
    sil_phone: str
    words: Dict[str, int]  # words.txt
    lexicon: Dict[str, List[List[str]]]  # word -> pronunciations
    disambig: List[int] = field(default_factory=list)  # ids of #0..#K

    @property
    def sil_id(self) -> int:
        return self.phones[self.sil_phone]

    @property
    def nonsil_ids(self) -> List[int]:
        return sorted(i for p, i in self.phones.items() if p != self.sil_phone)

    @property
    def id2phone(self) -> Dict[int, str]:
        return {i: p for p, i in self.phones.items()}

    def phones_txt(self) -> str:
        rows = [("<eps>", 0)] + sorted(self.phones.items(), key=lambda kv: kv[1])
        rows += [(f"#{k}", i) for k, i in enumerate(self.disambig)]
        return "".join(f"{p} {i}\n" for p, i in rows)


def load_gmm_lang(lang_dir: PathLike, sil_phone: str = "SIL") -> GmmLang:
    """The GMM phone set and lexicon from ``lang_dir`` (``lexicon.txt``, ``tokens.txt``, ``words.txt``)."""
    lang_dir = Path(lang_dir)
    tokens = read_tokens(lang_dir / "tokens.txt")
    phones = {t: i for t, i in tokens.items() if t != BLANK}
    if any(i <= 0 for i in phones.values()):
        raise AsrError(f"{lang_dir}/tokens.txt: phones must have ids >= 1 (0 is the blank)")
    if sil_phone not in phones:
        phones[sil_phone] = max(phones.values()) + 1
    lexicon = read_lexicon(lang_dir / "lexicon.txt")
    words = {w: i for i, w in read_words(lang_dir / "words.txt").items()}
    _, max_k = add_disambig(lexicon)
    first = max(phones.values()) + 1
    return GmmLang(phones, sil_phone, words, lexicon, list(range(first, first + max_k + 1)))


def topology_text(nonsil: List[int], sil: List[int]) -> str:
    """Kaldi's text HMM topology: 3-state left-to-right non-silence phones, 5-state silence (gen_topo.pl)."""
    s = ["<Topology>", "<TopologyEntry>", "<ForPhones>", " ".join(map(str, nonsil)), "</ForPhones>"]
    for i in range(_NUM_NONSIL_STATES):
        s.append(f"<State> {i} <PdfClass> {i} <Transition> {i} 0.75 <Transition> {i + 1} 0.25 </State>")
    s += [f"<State> {_NUM_NONSIL_STATES} </State>", "</TopologyEntry>"]
    n = _NUM_SIL_STATES
    p = 1.0 / (n - 1)
    s += ["<TopologyEntry>", "<ForPhones>", " ".join(map(str, sil)), "</ForPhones>"]
    s.append("<State> 0 <PdfClass> 0 " + " ".join(f"<Transition> {j} {p}" for j in range(n - 1)) + " </State>")
    for i in range(1, n - 1):
        s.append(f"<State> {i} <PdfClass> {i} " + " ".join(f"<Transition> {j} {p}" for j in range(1, n)) + " </State>")
    s.append(f"<State> {n - 1} <PdfClass> {n - 1} <Transition> {n - 1} 0.75 <Transition> {n} 0.25 </State>")
    s += [f"<State> {n} </State>", "</TopologyEntry>", "</Topology>"]
    return "\n".join(s) + "\n"


def make_topology(text: str) -> "khg.HmmTopology":
    topo = khg.HmmTopology()
    topo.read(text)
    topo.check()
    return topo


def make_lexicon_fst_with_silence(
    lang: GmmLang, sil_prob: float = 0.5, word_disambig: Optional[int] = None
) -> "kaldifst.StdVectorFst":
    """L: phones -> words, optional silence at the start and after each word (cost -log sil_prob), pronunciations
    that are homophones or prefixes of others followed by their ``#k``. Output-label sorted (for composition).
    ``word_disambig``: the word id of ``#0`` in G (an n-gram's back-off arcs); L then passes it through with a
    ``#0:#0`` self-loop at the word-loop state (Kaldi's L_disambig)."""
    if not 0.0 < sil_prob < 1.0:
        raise AsrError(f"gmm.sil_prob must be in (0, 1), got {sil_prob}")
    sil_cost, nosil_cost = -math.log(sil_prob), -math.log(1.0 - sil_prob)
    fst = kaldifst.StdVectorFst()
    start, loop, sil = fst.add_state(), fst.add_state(), fst.add_state()
    fst.start = start
    fst.set_final(loop, 0.0)
    fst.add_arc(start, kaldifst.StdArc(0, 0, nosil_cost, loop))
    fst.add_arc(start, kaldifst.StdArc(0, 0, sil_cost, sil))
    fst.add_arc(sil, kaldifst.StdArc(lang.sil_id, 0, 0.0, loop))
    entries, _ = add_disambig(lang.lexicon)
    for word, pron, k in entries:
        if word not in lang.words:
            raise AsrError(f"lexicon word {word} is not in words.txt; rerun steps.prepare_lang")
        labels = [lang.phones[p] for p in pron] + ([lang.disambig[k]] if k > 0 else [])
        src = loop
        for i, lab in enumerate(labels[:-1]):
            dst = fst.add_state()
            fst.add_arc(src, kaldifst.StdArc(lab, lang.words[word] if i == 0 else 0, 0.0, dst))
            src = dst
        out = lang.words[word] if len(labels) == 1 else 0
        fst.add_arc(src, kaldifst.StdArc(labels[-1], out, nosil_cost, loop))
        fst.add_arc(src, kaldifst.StdArc(labels[-1], out, sil_cost, sil))
    if word_disambig is not None:
        fst.add_arc(loop, kaldifst.StdArc(lang.disambig[0], word_disambig, 0.0, loop))
    kaldifst.arcsort(fst, sort_type="olabel")
    return fst


def words_to_ids(lang: GmmLang, words: List[str]) -> Tuple[List[int], List[str]]:
    """Word ids of a transcript and the words that are out of vocabulary (not in the lexicon)."""
    oov = [w for w in words if w not in lang.lexicon or w not in lang.words]
    return [lang.words[w] for w in words if w not in oov], oov
