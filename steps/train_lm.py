"""Estimate a word n-gram language model (interpolated modified Kneser-Ney) from text and write it as ARPA.

    python -m steps.train_lm --text data/train_nosp/text --has-utt-ids --order 3 --words data/lang/words.txt \
        --out data/local/lm/lm_3gram.arpa [--uppercase] [--config recipes/switchboard/config.yaml --set ...] \
        [--cutoffs 0 0 1] [--prune-target 1000000] [--alphabet-from data/lang_char/tokens.txt] [--max-word-len 30]
    python -m steps.train_lm --prune-arpa big.arpa --prune-target 1000000 --out lm_pruned.arpa

One sentence a line (``--has-utt-ids``: a Kaldi ``text`` file, the first column is dropped); ``<s>``/``</s>`` are
added. With ``--words`` (a ``words.txt`` or a word list) words outside it become ``<unk>`` and are counted. With
``--config``, ``--order``, ``--has-utt-ids``, ``--cutoffs``, ``--prune-target`` and ``--toolkit`` default to
``lang.ngram_order``, ``lang.lm_text_has_utt_ids``, ``lang.lm_count_cutoffs``, ``lang.lm_prune_target`` and
``lang.lm_toolkit`` (``kenlm``: KenLM's lmplz estimates, for text too large for ours; tools/install_kenlm.sh).
``--cutoffs`` drops rare n-grams by count, ``--prune-target`` then prunes by relative entropy down to that many
n-grams (all orders).
``--prune-arpa`` entropy-prunes an existing ARPA file instead (e.g. KenLM's ``lmplz`` output for text too large for
our pure-Python estimator; see docs/language-models.md). Words with a character outside ``--alphabet-from`` (the
units of a ``tokens.txt`` or a file of characters) or longer than ``--max-word-len`` become ``<unk>``; they, the
OOVs and the empty lines are listed in ``<out>.report``.
Logs the sentences, tokens, OOVs and the n-grams per order (also kept in the marker ``.<name>.done`` beside
``--out``, written last); rerun with the same texts (by content) and settings, it is skipped. The lang stage
(``steps.prepare_lang`` with ``lang.lm_text``) calls the same estimator (asrlib/lang/ngram.py).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import List, Optional

from asrlib.cli import add_config_args, run_main, setup_logging
from asrlib.config import load_config
from asrlib.io.stage import dir_lock
from asrlib.errors import AsrError
from asrlib.lang.lm_text import read_alphabet
from asrlib.lang.ngram import build_arpa
from asrlib.lang.prune import prune_arpa_file


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_args(p, required=False)
    p.add_argument("--text", type=Path, nargs="+", help="text file(s), one sentence a line")
    p.add_argument("--prune-arpa", type=Path, help="prune this ARPA file (with --prune-target) instead of estimating")
    p.add_argument("--order", type=int, help="n-gram order (default: lang.ngram_order of --config, else 3)")
    p.add_argument("--words", type=Path, help="vocabulary (words.txt or a word list); other words become <unk>")
    p.add_argument(
        "--has-utt-ids",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the first column of every line is an utterance id (a Kaldi text file)",
    )
    p.add_argument("--uppercase", action="store_true", help="upper-case the words (as the lexicon's are)")
    p.add_argument("--cutoffs", type=int, nargs="+", help="count cut-offs per order, e.g. 0 0 1")
    p.add_argument("--prune-target", type=int, help="entropy-prune to this many n-grams (lang.lm_prune_target)")
    p.add_argument("--alphabet-from", type=Path, help="tokens.txt or a file of the allowed characters")
    p.add_argument("--max-word-len", type=int, default=0, help="longer words become <unk> (0: no limit)")
    p.add_argument("--toolkit", choices=["ours", "kenlm"], help="estimator (lang.lm_toolkit; kenlm: KenLM's lmplz)")
    p.add_argument("--out", type=Path, required=True, help="the ARPA file to write")
    a = p.parse_args(argv)
    lang = load_config(a.config, a.overrides).lang if a.config else None
    order = a.order if a.order is not None else (lang.ngram_order if lang else 3)
    has_ids = a.has_utt_ids if a.has_utt_ids is not None else bool(lang and lang.lm_text_has_utt_ids)
    cutoffs = a.cutoffs if a.cutoffs is not None else ((lang.lm_count_cutoffs or []) if lang else [])
    target = a.prune_target if a.prune_target is not None else (lang.lm_prune_target if lang else 0)
    alphabet = read_alphabet(a.alphabet_from) if a.alphabet_from else None
    toolkit = a.toolkit or (lang.lm_toolkit if lang else "ours")
    if a.prune_arpa:
        if not target or a.text:
            raise AsrError("--prune-arpa takes --prune-target (> 0) and no --text")
        with dir_lock(a.out.parent):
            setup_logging(a.out.parent / "log" / f"train_lm.{a.out.stem}.log")
            info = prune_arpa_file(a.prune_arpa, a.out, target, a.order)
        logging.getLogger("train_lm").info("done: %s", json.dumps(info))
        return 0
    if not a.text:
        raise AsrError("--text is required (or --prune-arpa)")
    with dir_lock(a.out.parent):
        setup_logging(a.out.parent / "log" / f"train_lm.{a.out.stem}.log")
        info = build_arpa(
            a.text, a.out, order, a.words, has_ids, a.uppercase, target, cutoffs, alphabet, a.max_word_len, toolkit
        )
    if info["skipped"]:
        print(f"train_lm: {a.out} complete; skipping")
        return 0
    logging.getLogger("train_lm").info("done: %s", json.dumps(info))
    return 0


if __name__ == "__main__":
    run_main(main, writes=())  # locks the directory of --out itself (run_main locks directories named by options)
