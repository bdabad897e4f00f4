"""Reading the text an n-gram LM is estimated from: the vocabulary (a Kaldi ``words.txt`` or a word list), the
alphabet, and the sentences as a stream, with the words set aside (OOV, bad characters, too long: mapped to
``<unk>``) and the empty lines counted in a :class:`~asrlib.lang.ngram_types.TextStats` and listed in a report."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set

from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import atomic_open
from asrlib.lang.ngram_types import BOS, EOS, UNK, TextStats

_NOT_WORDS = re.compile(r"^(<eps>|<s>|</s>|#\d+)$")  # symbols of a Kaldi words.txt that are not words


def read_vocabulary(path: PathLike) -> Set[str]:
    """The words of a Kaldi ``words.txt`` (first column) or of a word list, without ``<eps>``, ``<s>``, ``</s>``
    and the disambiguation symbols ``#0``, ``#1``, ..."""
    path = Path(path)
    if not path.is_file():
        raise AsrError(f"vocabulary {path} does not exist")
    words = set()
    with open(path, encoding="utf-8", errors="strict") as f:
        for line in f:
            parts = line.split()
            if parts and not _NOT_WORDS.match(parts[0]):
                words.add(parts[0])
    if not words:
        raise AsrError(f"vocabulary {path} holds no words")
    return words


def read_alphabet(path: PathLike) -> Set[str]:
    """The characters allowed in words: the single-character units of a ``tokens.txt`` (first column; ``<blk>``,
    ``#k`` and other multi-character symbols ignored, ``▁`` too), or every non-space character of any other file."""
    path = Path(path)
    if not path.is_file():
        raise AsrError(f"alphabet file {path} does not exist")
    lines = path.read_text(encoding="utf-8").splitlines()
    if lines and all(len(ln.split()) == 2 and ln.split()[1].isdigit() for ln in lines if ln.strip()):
        chars = {ln.split()[0] for ln in lines if ln.strip() and len(ln.split()[0]) == 1} - {"\u2581"}
    else:
        chars = {c for ln in lines for c in ln if not c.isspace()}
    if not chars:
        raise AsrError(f"{path} gives no characters for the alphabet")
    return chars


def read_sentences(
    texts: Sequence[PathLike],
    has_utt_ids: bool = False,
    vocab: Optional[Set[str]] = None,
    uppercase: bool = False,
    stats: Optional[TextStats] = None,
    alphabet: Optional[Set[str]] = None,
    max_word_len: int = 0,
) -> Iterator[List[str]]:
    """The word lists of the non-empty lines of ``texts`` (one sentence a line; with ``has_utt_ids`` the first
    column, a Kaldi utterance id, is dropped), read as a stream (memory does not grow with the text).
    ``uppercase`` upper-cases every word but ``<unk>``; with ``vocab`` other words become ``<unk>``, and so do words
    with a character outside ``alphabet`` or longer than ``max_word_len`` (> 0) characters, each counted and
    listed in ``stats``. Empty lines are skipped and counted. ``stats`` is updated as lines are read."""
    stats = stats if stats is not None else TextStats()
    intern: Dict[str, str] = {}  # one string object per word type: n-gram keys share them
    for path in map(Path, texts):
        if not path.is_file():
            raise AsrError(f"LM text {path} does not exist")
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                try:
                    words = raw.decode("utf-8").split()
                except UnicodeDecodeError as e:
                    raise AsrError(
                        f"{path}:{lineno}: not valid UTF-8 ({e.reason}); re-encode the file as UTF-8"
                    ) from None
                if has_utt_ids:
                    words = words[1:]
                if not words:
                    stats.empty_lines += 1
                    if len(stats.empty_examples) < 10:
                        stats.empty_examples.append(f"{path}:{lineno}")
                    continue
                if BOS in words or EOS in words:
                    raise AsrError(
                        f"{path}:{lineno}: the text holds '{BOS}' or '{EOS}'; sentence boundaries are "
                        "added by the estimator, remove them from the text"
                    )
                if uppercase:
                    words = [UNK if w.lower() == UNK else w.upper() for w in words]
                if alphabet is not None or max_word_len > 0:
                    words = [_screen(w, alphabet, max_word_len, stats) for w in words]
                if vocab is not None:
                    oov = [w for w in words if w not in vocab and w != UNK]
                    if oov:
                        stats.oov_tokens += len(oov)
                        stats.oov_words.update(oov)
                        words = [w if w in vocab else UNK for w in words]
                stats.sentences += 1
                stats.tokens += len(words)
                yield [intern.setdefault(w, w) for w in words]


def _screen(word: str, alphabet: Optional[Set[str]], max_len: int, stats: TextStats) -> str:
    """``word``, or ``<unk>`` (counted in ``stats``) when it has a character outside ``alphabet`` or is longer
    than ``max_len``."""
    if word == UNK:
        return word
    if alphabet is not None and not alphabet.issuperset(word):
        stats.bad_char_words[word] += 1
    elif max_len > 0 and len(word) > max_len:
        stats.too_long_words[word] += 1
    else:
        return word
    stats.oov_tokens += 1
    return UNK


def text_summary(s: TextStats) -> Dict[str, int]:
    """What the text reader saw, as counts."""
    return {
        "sentences": s.sentences,
        "tokens": s.tokens,
        "oov_tokens": s.oov_tokens,
        "oov_types": len(s.oov_words),
        "bad_char_words": len(s.bad_char_words),
        "too_long_words": len(s.too_long_words),
        "empty_lines": s.empty_lines,
    }


def write_text_report(stats: TextStats, path: Path) -> None:
    """List what the text reader set aside (empty lines; OOV, bad-character and too-long words with counts) in
    ``path``, atomically; nothing is written (and an old report is removed) when there is nothing to list."""
    sections = [
        ("oov", "word not in the vocabulary", stats.oov_words),
        ("bad_chars", "character outside the alphabet", stats.bad_char_words),
        ("too_long", "word longer than the limit", stats.too_long_words),
    ]
    if not stats.empty_lines and not any(c for _, _, c in sections):
        path.unlink(missing_ok=True)
        return
    with atomic_open(path) as f:
        f.write(f"# empty lines skipped: {stats.empty_lines}")
        f.write(f" (first: {' '.join(stats.empty_examples)})\n" if stats.empty_examples else "\n")
        for tag, what, counter in sections:
            f.write(f"# {tag} ({what}, mapped to {UNK}): {sum(counter.values())} tokens, {len(counter)} words\n")
            for w, c in counter.most_common():
                f.write(f"{tag}\t{w}\t{c}\n")
