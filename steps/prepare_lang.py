"""Build the lang directory: lexicon, tokens, words, and the decoding graphs T/L/G → TLG.fst.

    python -m steps.prepare_lang --text data/train/text --lang-dir data/lang --config recipes/digits/config.yaml \
        [--set lang.grammar=arpa --set lang.arpa=path/lm.arpa --set lang.ngram_order=2]
        [--set lang.grammar=arpa --set lang.lm_text=train/text --set lang.lm_text_has_utt_ids=true]
    python -m steps.prepare_lang --text data/train/text --lang-dir data/lang_test --config C --eval-set test

The vocabulary is every word of the Kaldi ``text`` file (``utt-id word word ...``). Outputs in ``--lang-dir``:
``lexicon.txt tokens.txt words.txt disambig.txt T.fst L.fst G.fst TLG.fst`` and ``.done`` (written last; a
finished directory is skipped — delete ``.done`` to rebuild). With ``lang.grammar: arpa`` and ``lang.lm_text``
instead of ``lang.arpa``, G's n-gram is first estimated into ``lm_<order>gram.arpa`` there (relative
``lm_text`` paths are files of the data dir, the lang dir's parent; see ``steps.train_lm`` for the estimator).
Units (``lang.units``): ``phone`` (default) pronounces each word from ``lang.lexicon`` (whose words join the
vocabulary), then CMUdict, then the G2P of ``lang.g2p`` (the words it pronounced: ``g2p_words.txt``); ``bpe`` trains
a sentencepiece model on the ``--text`` transcripts (``bpe.model``) and spells every word in its pieces; ``char``
spells words in letters (asrlib/lang/units.py). ``--eval-set S`` takes the grammar and words of the lang dir that
searches set S (``decode.set_grammars``, ``decode.set_words``; its name is ``asrlib.config.set_lang_dir``'s).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Iterable, Optional

from asrlib.cli import add_config_args, run_main, setup_logging
from asrlib.config import LangConfig, config_to_dict, lm_texts, load_config, set_lang_config
from asrlib.errors import AsrError
from asrlib.io.atomic import atomic_open
from asrlib.io.stage import is_done, mark_done
from asrlib.io.tables import read_table
from asrlib.lang.graphs import build_tlg, check_grammar
from asrlib.lang.lexicon import build_lexicon, build_lexicon_from, read_pronunciations, write_lang_files
from asrlib.lang.open_vocab import background_words, check_weight


def vocabulary(text: Path) -> set[str]:
    """Words of a Kaldi ``text`` file, uppercase; an empty file is an AsrError."""
    if not text.is_file():
        raise AsrError(f"transcript file {text} does not exist")
    words = {w.upper() for _, rest in read_table(text) for w in rest.split()}
    if not words:
        raise AsrError(f"{text} holds no words; check the data preparation")
    return words


def data_path(p: str, lang_dir: Path) -> Path:
    """A ``lang.lexicon`` / ``lang.g2p`` path: relative ones are files of the data dir (the lang dir's parent)."""
    q = Path(p).expanduser()
    return q if q.is_absolute() else lang_dir.parent / q


def make_lexicon(cfg: LangConfig, text: Path, lang_dir: Path, extra: Iterable[str] = ()):
    """The lexicon of the vocabulary (the words of ``text``, of ``lang.lexicon`` and ``extra``: an open
    vocabulary's) in ``lang.units``, and ``{word: source}``. With a G2P, the words it pronounced are listed in
    ``lang_dir/g2p_words.txt``."""
    words = vocabulary(text) | set(extra)
    given = read_pronunciations(data_path(cfg.lexicon, lang_dir)) if cfg.lexicon else {}
    words |= set(given)
    if cfg.units in ("bpe", "char"):
        from asrlib.lang.units import train_sentencepiece, unit_lexicon

        model = None
        if cfg.units == "bpe":
            sentences = [rest for _, rest in read_table(text)]
            letters = {c for t in sentences for c in t.upper()}
            rare = sorted(w for w in words if set(w.upper()) - letters)  # e.g. an open vocabulary's J or Q words
            if rare:
                logging.getLogger("prepare_lang").info(
                    "sentencepiece: %d vocabulary word(s) hold letters the transcripts lack, so they join its "
                    "training text once each: %s",
                    len(rare),
                    " ".join(rare[:20]),
                )
            model = train_sentencepiece(
                sentences + rare, lang_dir / "bpe.model", cfg.bpe_vocab_size, cfg.bpe_model_type
            )
        return unit_lexicon(cfg.units, words, model), {w: cfg.units for w in words}
    if not cfg.lexicon and not cfg.g2p:
        lexicon = build_lexicon(words)  # CMUdict alone, as before lang.lexicon existed
        return lexicon, {w: "cmudict" for w in lexicon}
    g2p = None
    if cfg.g2p:
        from asrlib.lang.g2p import cmudict_g2p, load_g2p

        def g2p(ws):
            logging.getLogger("prepare_lang").info("G2P for %d word(s): %s", len(ws), " ".join(ws[:20]))
            if cfg.g2p == "cmudict":
                model = cmudict_g2p(lang_dir.parent / "local" / "g2p_cmudict")
            else:
                model = load_g2p(data_path(cfg.g2p, lang_dir))
            res = model.predict(ws)
            return res.prons, res.skipped

    lexicon, sources = build_lexicon_from(words, given, g2p)
    from_g2p = sorted(w for w, s in sources.items() if s == "g2p")
    if from_g2p:
        with atomic_open(lang_dir / "g2p_words.txt") as f:
            for w in from_g2p:
                for p in lexicon[w]:
                    f.write(f"{w} {' '.join(p)}\n")
    return lexicon, sources


def open_vocab_arpa(cfg: LangConfig, lang_dir: Path, lm_text, background) -> Optional[Path]:
    """With ``lang.vocab_lm_weight`` > 0: the transcripts' n-gram (over the whole vocabulary, into
    ``lm_<order>gram_text.arpa``) interpolated with the open vocabulary's unigram into ``lm_<order>gram.arpa``
    (asrlib/lang/open_vocab.py); None otherwise (G's n-gram is estimated as usual)."""
    if cfg.vocab_lm_weight <= 0 or cfg.grammar != "arpa" or cfg.arpa:
        return None
    from asrlib.lang.arpa import read_arpa, write_arpa
    from asrlib.lang.ngram import build_arpa
    from asrlib.lang.open_vocab import interpolate, unigram_lm

    text_arpa = lang_dir / f"lm_{cfg.ngram_order}gram_text.arpa"
    info = build_arpa(
        lm_text,
        text_arpa,
        cfg.ngram_order,
        words=lang_dir / "words.txt",
        has_utt_ids=cfg.lm_text_has_utt_ids,
        uppercase=True,
        prune_target=cfg.lm_prune_target,
        cutoffs=cfg.lm_count_cutoffs or (),
        toolkit=cfg.lm_toolkit,
    )
    eos = info["sentences"] / (info["tokens"] + info["sentences"])
    mixed = interpolate(read_arpa(text_arpa), unigram_lm(background, eos), cfg.vocab_lm_weight)
    out = lang_dir / f"lm_{cfg.ngram_order}gram.arpa"
    write_arpa(mixed, out)
    logging.getLogger("prepare_lang").info(
        "G: %s interpolated with %d words' unigram (weight %g) -> %s",
        text_arpa.name,
        len(background),
        cfg.vocab_lm_weight,
        out,
    )
    return out


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
    check_weight(cfg.vocab_lm_weight, [cfg.vocab_source])
    if cfg.vocab_lm_weight > 0 and (cfg.grammar != "arpa" or cfg.arpa):
        raise AsrError(
            "lang.vocab_lm_weight mixes the open vocabulary into the n-gram estimated from lang.lm_text "
            "(lang.grammar arpa without lang.arpa); set it to 0 here"
        )
    background = background_words(cfg.vocab_source, cfg.vocab_size)
    lexicon, sources = make_lexicon(cfg, a.text, a.lang_dir, background)
    write_lang_files(a.lang_dir, lexicon)
    tlg = build_tlg(
        a.lang_dir,
        grammar=cfg.grammar,
        arpa=cfg.arpa or open_vocab_arpa(cfg, a.lang_dir, lm_text, background),
        ngram_order=cfg.ngram_order,
        lm_text=lm_text,
        lm_text_has_utt_ids=cfg.lm_text_has_utt_ids,
        grammar_words=cfg.grammar_words,
        lm_prune_target=cfg.lm_prune_target,
        lm_count_cutoffs=cfg.lm_count_cutoffs or (),
        lm_toolkit=cfg.lm_toolkit,
    )
    info = {
        "words": len(lexicon),
        "pronunciations": sum(len(v) for v in lexicon.values()),
        "tokens": len({ph for v in lexicon.values() for p in v for ph in p}) + 1,
        "units": cfg.units,
        "open_vocabulary": len(background),
        "sources": {k: sum(1 for v in sources.values() if v == k) for k in sorted(set(sources.values()))},
        "lang": config_to_dict(cfg),
        "tlg": str(tlg),
        "seconds": round(time.perf_counter() - t0, 3),
    }
    mark_done(done, info, fingerprint=config_to_dict(cfg))
    logging.getLogger("prepare_lang").info("done: %s", json.dumps(info))
    return 0


if __name__ == "__main__":
    run_main(main, writes=("--lang-dir",))
