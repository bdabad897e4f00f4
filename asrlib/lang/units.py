"""Output units other than phones: sentencepiece word pieces (``lang.units: bpe``) and letters (``lang.units: char``),
each as a lexicon ``{WORD: [[unit, ...]]}`` that :func:`asrlib.lang.lexicon.write_lang_files` and
:func:`asrlib.lang.graphs.build_tlg` take exactly like a phone lexicon (so TLG, greedy matching, the recognizer and
the mobile bundle work unchanged: only ``tokens.txt`` holds pieces or letters instead of phones).

- bpe: a sentencepiece model (unigram by default, as ESPnet's ``nbpe`` recipes; or ``bpe``) trained on the training
  transcripts; a word's pronunciation is its deterministic (best) segmentation, e.g. ``ERASE`` -> ``▁E R A S E``.
  The pieces carry sentencepiece's word-start mark ``▁``, so a sequence of letters and a word spelled by the same
  letters stay apart.
- char: a word's letters after the word-start token ``▁`` (ESPnet's ``<space>``), e.g. ``GO`` -> ``▁ G O``.

    model = train_sentencepiece(["HELLO WORLD", ...], "data/lang/bpe.model", vocab_size=30)
    lex = bpe_lexicon(model, ["HELLO", "WORLD"])   # {"HELLO": [["▁HE", "LL", "O"]], ...}
    lex = char_lexicon(["HELLO"])                   # {"HELLO": [["▁", "H", "E", "L", "L", "O"]]}
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import atomic_path

log = logging.getLogger(__name__)

UNIT_TYPES = ("phone", "bpe", "char")
SP_MODEL_TYPES = ("unigram", "bpe")
WORD_START = "\u2581"  # sentencepiece's word-start mark "▁"


def train_sentencepiece(
    texts: Iterable[str],
    model_path: PathLike,
    vocab_size: int = 30,
    model_type: str = "unigram",
    character_coverage: float = 1.0,
) -> Path:
    """Train a sentencepiece model on ``texts`` (one sentence each, words separated by blanks; upper-cased) and
    write it to ``model_path`` atomically (a ``.model`` file, protobuf data; its ``.vocab`` beside it).

    No ``<s>``/``</s>`` pieces (CTC does not use them); ``<unk>`` is piece 0 and never part of a lexicon. A
    ``vocab_size`` below what the letters of the text need is an AsrError saying the smallest usable size."""
    import sentencepiece as spm

    if model_type not in SP_MODEL_TYPES:
        raise AsrError(f"lang.bpe_model_type must be one of {', '.join(SP_MODEL_TYPES)}, got {model_type!r}")
    sentences = [" ".join(t.upper().split()) for t in texts]
    sentences = [s for s in sentences if s]
    if not sentences:
        raise AsrError("sentencepiece: no text to train on")
    letters = {c for s in sentences for c in s if not c.isspace()}
    if vocab_size < len(letters) + 2:
        raise AsrError(
            f"lang.bpe_vocab_size {vocab_size} is too small: the text has {len(letters)} distinct letters, and "
            f"sentencepiece needs one piece per letter plus <unk> and ▁: use at least {len(letters) + 2}"
        )
    model_path = Path(model_path)
    model_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".spm.", dir=model_path.parent) as tmp:
        txt = Path(tmp) / "text.txt"
        txt.write_text("\n".join(sentences) + "\n", encoding="utf-8")
        prefix = Path(tmp) / "sp"
        try:
            spm.SentencePieceTrainer.train(
                input=str(txt),
                model_prefix=str(prefix),
                vocab_size=vocab_size,
                model_type=model_type,
                character_coverage=character_coverage,
                bos_id=-1,
                eos_id=-1,
                unk_id=0,
                input_sentence_size=100_000_000,
                shuffle_input_sentence=False,
                num_threads=1,
                minloglevel=2,
                hard_vocab_limit=False,
            )
        except RuntimeError as e:
            raise AsrError(f"sentencepiece could not train a {vocab_size}-piece {model_type} model: {e}") from None
        for suffix in (".model", ".vocab"):
            with atomic_path(model_path.with_suffix(suffix)) as dst:
                Path(dst).write_bytes(prefix.with_suffix(suffix).read_bytes())
    log.info("sentencepiece: %s model with %d pieces -> %s", model_type, vocab_size, model_path)
    return model_path


def load_sentencepiece(model_path: PathLike):
    """A ``sentencepiece.SentencePieceProcessor`` of ``model_path``; AsrError naming the file when unreadable."""
    import sentencepiece as spm

    model_path = Path(model_path)
    if not model_path.is_file():
        raise AsrError(f"sentencepiece model {model_path} does not exist")
    sp = spm.SentencePieceProcessor()
    try:
        sp.load(str(model_path))
    except (OSError, RuntimeError) as e:
        raise AsrError(f"{model_path}: not a sentencepiece model ({' '.join(str(e).split())[:150]})") from None
    return sp


def _words(words: Iterable[str]) -> List[str]:
    out = sorted({w.strip().upper() for w in words if w.strip()})
    if not out:
        raise AsrError("no words to build a lexicon for")
    return out


def bpe_lexicon(model, words: Iterable[str]) -> Dict[str, List[List[str]]]:
    """``{WORD: [[piece, ...]]}``: each word's best segmentation by ``model`` (a path or a loaded processor). A word
    with a letter the model never saw would need ``<unk>``: AsrError listing every such word."""
    sp = load_sentencepiece(model) if isinstance(model, (str, Path)) else model
    lex: Dict[str, List[List[str]]] = {}
    bad: List[str] = []
    for w in _words(words):
        ids = sp.encode(w)
        pieces = [sp.id_to_piece(i) for i in ids]
        if not pieces or sp.unk_id() in ids or any(p == WORD_START for p in pieces[1:]):
            bad.append(w)
            continue
        lex[w] = [pieces]
    if bad:
        raise AsrError(
            f"{len(bad)} word(s) hold letters the sentencepiece model has no piece for: {' '.join(bad[:30])}; train "
            f"it on text that has every letter of the vocabulary (steps.prepare_lang adds such words to it)"
        )
    return lex


def char_lexicon(words: Iterable[str], word_start: Optional[str] = WORD_START) -> Dict[str, List[List[str]]]:
    """``{WORD: [[▁, letter, ...]]}``: the letters of each word after the word-start token (``word_start=None``:
    letters only, as icefall's character lexicons for languages written without spaces)."""
    lex = {}
    for w in _words(words):
        if word_start and word_start in w:
            raise AsrError(f"word {w!r} holds the word-start token {word_start!r}")
        lex[w] = [([word_start] if word_start else []) + list(w)]
    return lex


def unit_lexicon(
    units: str,
    words: Iterable[str],
    bpe_model: Optional[PathLike] = None,
) -> Dict[str, List[List[str]]]:
    """The lexicon of ``words`` for ``lang.units`` ``bpe`` (needs ``bpe_model``) or ``char``."""
    if units == "bpe":
        if bpe_model is None:
            raise AsrError("lang.units bpe needs a sentencepiece model")
        return bpe_lexicon(bpe_model, words)
    if units == "char":
        return char_lexicon(words)
    raise AsrError(f"unit_lexicon is for bpe and char units, not {units!r} (lang.units: {', '.join(UNIT_TYPES)})")
