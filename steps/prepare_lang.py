"""Build the lang directory: CMUdict lexicon, tokens, words, and the decoding graphs T/L/G → TLG.fst.

    python -m steps.prepare_lang --text data/train/text --lang-dir data/lang --config recipes/digits/config.yaml \
        [--set lang.grammar=arpa --set lang.arpa=path/lm.arpa --set lang.ngram_order=2]
        [--set lang.grammar=arpa --set lang.lm_text=train/text --set lang.lm_text_has_utt_ids=true]
    python -m steps.prepare_lang --text data/train/text --lang-dir data/lang_test --config C --eval-set test

The vocabulary is every word of the Kaldi ``text`` file (``utt-id word word ...``). Outputs in ``--lang-dir``:
``lexicon.txt tokens.txt words.txt disambig.txt T.fst L.fst G.fst TLG.fst`` and ``.done`` (written last; a
finished directory is skipped — delete ``.done`` to rebuild). With ``lang.grammar: arpa`` and ``lang.lm_text``
instead of ``lang.arpa``, G's n-gram is first estimated into ``lm_<order>gram.arpa`` there (relative
``lm_text`` paths are files of the data dir, the lang dir's parent; see ``steps.train_lm`` for the estimator).
``--eval-set S`` takes the grammar and words of the lang dir that searches
set S (``decode.set_grammars``, ``decode.set_words``; its name is ``asrlib.config.set_lang_dir``'s).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from asrlib.cli import add_config_args, run_main, setup_logging
from asrlib.config import LangConfig, config_to_dict, lm_texts, load_config, set_lang_config
from asrlib.errors import AsrError
from asrlib.io.stage import is_done, mark_done
from asrlib.io.tables import read_table
from asrlib.lang.graphs import build_tlg, check_grammar
from asrlib.lang.lexicon import build_lexicon, write_lang_files


def vocabulary(text: Path) -> set[str]:
    """Words of a Kaldi ``text`` file, uppercase; an empty file is an AsrError."""
    if not text.is_file():
        raise AsrError(f"transcript file {text} does not exist")
    words = {w.upper() for _, rest in read_table(text) for w in rest.split()}
    if not words:
        raise AsrError(f"{text} holds no words; check the data preparation")
    return words


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_args(p)
    p.add_argument("--text", type=Path, required=True, help="Kaldi text file whose words form the vocabulary")
    p.add_argument("--lang-dir", type=Path, required=True)
    p.add_argument(
        "--eval-set", help="build the lang dir that searches this eval set (decode.set_grammars, decode.set_words)"
    )
    a = p.parse_args(argv)
    cfg = set_lang_config(load_config(a.config, a.overrides), a.eval_set)
    done = a.lang_dir / ".done"
    # a dir made before lang.grammar_words existed is complete when the setting is at its default
    if is_done(done, fingerprint=config_to_dict(cfg), defaults=config_to_dict(LangConfig())):
        print(f"prepare_lang: {a.lang_dir} complete; skipping")
        return 0
    lm_text = lm_texts(cfg, a.lang_dir.parent)
    check_grammar(cfg.grammar, cfg.arpa, lm_text)
    setup_logging(a.lang_dir / "log" / "prepare_lang.log")
    t0 = time.perf_counter()
    lexicon = build_lexicon(vocabulary(a.text))
    write_lang_files(a.lang_dir, lexicon)
    tlg = build_tlg(
        a.lang_dir,
        grammar=cfg.grammar,
        arpa=cfg.arpa,
        ngram_order=cfg.ngram_order,
        lm_text=lm_text,
        lm_text_has_utt_ids=cfg.lm_text_has_utt_ids,
        grammar_words=cfg.grammar_words,
    )
    info = {
        "words": len(lexicon),
        "pronunciations": sum(len(v) for v in lexicon.values()),
        "tokens": len({ph for v in lexicon.values() for p in v for ph in p}) + 1,
        "lang": config_to_dict(cfg),
        "tlg": str(tlg),
        "seconds": round(time.perf_counter() - t0, 3),
    }
    mark_done(done, info, fingerprint=config_to_dict(cfg))
    logging.getLogger("prepare_lang").info("done: %s", json.dumps(info))
    return 0


if __name__ == "__main__":
    run_main(main, writes=("--lang-dir",))
