"""KenLM's ``lmplz`` as the n-gram estimator (``lang.lm_toolkit: kenlm``, ``steps.train_lm --toolkit kenlm``): the
same interpolated modified Kneser-Ney as :mod:`asrlib.lang.ngram` (their perplexities agree to 1e-5 on the same
text, docs/language-models.md), but in C++ with disk-based sorting, so that the text and the unpruned counts need not
fit in memory (LibriSpeech's 800 M words). ``tools/install_kenlm.sh`` builds it into ``.venv/bin/lmplz``.

The text is read twice as a stream by :func:`asrlib.lang.lm_text.read_sentences` (the same OOV, alphabet, length and
empty-line handling and report): once for the vocabulary, once into ``lmplz``'s standard input. lmplz refuses
``<unk>`` in its text, so a word ours would map to ``<unk>`` is written as ``<oov>`` and every n-gram holding it is
dropped (``--limit_vocab_file``); the model's ``<unk>`` then gets lmplz's interpolated probability. Count cut-offs
go to lmplz (``--prune``, the same rule as ours); entropy pruning to a target size is ours, on the ARPA read back.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence, Set

from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import atomic_path
from asrlib.lang.lm_text import read_sentences
from asrlib.lang.ngram_types import UNK, TextStats

log = logging.getLogger(__name__)

OOV_PLACEHOLDER = "<oov>"
LMPLZ_MEMORY = "20%"  # lmplz -S: its sort buffers (of physical memory); beyond them it sorts on disk


def find_lmplz() -> Optional[str]:
    """``lmplz`` beside this Python (``.venv/bin``, where tools/install_kenlm.sh puts it), else on PATH."""
    here = Path(sys.executable).parent / "lmplz"
    if here.is_file():
        return str(here)
    return shutil.which("lmplz")


def estimate_arpa_lmplz(
    texts: Sequence[PathLike],
    out: PathLike,
    order: int,
    vocab: Optional[Set[str]] = None,
    has_utt_ids: bool = False,
    uppercase: bool = False,
    cutoffs: Sequence[int] = (),
    alphabet: Optional[Set[str]] = None,
    max_word_len: int = 0,
    stats: Optional[TextStats] = None,
) -> TextStats:
    """Estimate an ``order``-gram of ``texts`` with lmplz into ``out`` (ARPA, atomically); see the module docstring.
    Returns what was read."""
    lmplz = find_lmplz()
    if lmplz is None:
        raise AsrError("lang.lm_toolkit kenlm needs KenLM's lmplz: run tools/install_kenlm.sh (or put lmplz on PATH)")
    if cutoffs and (cutoffs[0] != 0 or any(b < a for a, b in zip(cutoffs, cutoffs[1:]))):
        raise AsrError(f"LM count cut-offs must start with 0 and not decrease by order, got {list(cutoffs)}")
    stats = stats if stats is not None else TextStats()
    words: Set[str] = set()
    for sent in read_sentences(texts, has_utt_ids, vocab, uppercase, stats, alphabet, max_word_len):
        words.update(sent)
    if stats.sentences == 0:
        raise AsrError(f"LM text {', '.join(map(str, texts))} holds no words")
    words.discard(UNK)
    out = Path(out)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".lmplz_") as tmp, atomic_path(out) as arpa:
        vocab_file = Path(tmp) / "vocab.txt"
        vocab_file.write_text("\n".join(["<s>", "</s>", *sorted(words)]) + "\n", encoding="utf-8")
        cmd = [lmplz, "-o", str(order), "-S", LMPLZ_MEMORY, "-T", tmp, "--arpa", str(arpa)]
        cmd += ["--discount_fallback", "0.5", "0.5", "0.5", "--limit_vocab_file", str(vocab_file)]
        if any(cutoffs):
            cmd += ["--prune", *map(str, cutoffs)]
        log_path = Path(tmp) / "lmplz.log"
        with open(log_path, "wb") as err:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err)
            assert proc.stdin is not None
            try:
                for sent in read_sentences(texts, has_utt_ids, vocab, uppercase, None, alphabet, max_word_len):
                    line = " ".join(OOV_PLACEHOLDER if w == UNK else w for w in sent) + "\n"
                    proc.stdin.write(line.encode("utf-8"))
                proc.stdin.close()
            except BrokenPipeError:
                pass
            rc = proc.wait()
        if rc != 0:
            tail = "\n".join(log_path.read_text(errors="replace").strip().splitlines()[-6:])
            raise AsrError(f"lmplz failed (exit {rc}) estimating {out}:\n{tail}")
    return stats
