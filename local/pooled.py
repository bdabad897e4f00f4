"""Several real corpora pooled into one training set, with one lexicon and one LM over all of them.

    python -m local.pooled --config recipes/an4_speechocean762/config.yaml --out-dir data \
        [--set data.pool.speechocean762=DIR]

``data.pool`` maps each corpus to its folder (``{an4: DIR, speechocean762: DIR}``; relative folders are relative to
the config file). Each corpus is prepared by its own ``local.<name>`` into ``out_dir/<name>`` with the config's
other data settings (speed perturbation, sample rate, ``max_speakers``; its own default dev speakers), then pooled:

- ``train`` = every corpus's training utterances (each once an epoch: the trainer's sampler shuffles the union, so
  a corpus is drawn in proportion to its size), ``dev`` = every corpus's dev utterances (the training loss);
- ``dev_<name>`` and ``test_<name>``: each corpus's own sets, decoded and scored apart (``data.eval_sets``);
- ``local/lm/train_text.txt``: the training transcripts of all corpora (one n-gram over them);
  ``local/dict/lexicon.txt``: the corpora's own pronunciation lexicons merged (AN4's dictionary), for
  ``lang.lexicon``.

Speaker and utterance ids get the corpus's name as a prefix (``an4_fash-...``, ``speechocean762_0001-...``), so no
two corpora share one and every utterance id still starts with its speaker's. ``spk2age`` / ``spk2gender`` come
along where a corpus has them. ``.pooled.done`` is written last; a finished folder is skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import logging
from pathlib import Path
from typing import Dict, List, Optional

from asrlib.config import DataConfig
from asrlib.data.corpus import corpus_main, locate_corpus, read_kaldi_tables, write_tables
from asrlib.errors import AsrError
from asrlib.io.atomic import atomic_open
from asrlib.io.stage import is_done, mark_done
from asrlib.io.tables import read_table, write_table

log = logging.getLogger("local.pooled")

# corpus -> (its module's test for a corpus folder, what the folder is): the corpora local.pooled can pool
POOLABLE = {
    "an4": ("is_an4_dir", "AN4 corpus (folder with etc/ and wav/)"),
    "speechocean762": ("is_speechocean762_dir", "speechocean762 corpus (a folder with WAVE/, train/, test/)"),
}
SPEAKER_TABLES = ("spk2age", "spk2gender")


def pool_dirs(sources: Dict[str, Path], dst: Path) -> int:
    """Write the Kaldi data dir ``dst`` holding every utterance of ``sources`` (``{corpus: data dir}``), ids
    prefixed with the corpus's name; returns the number of utterances."""
    wav: Dict[str, str] = {}
    text: Dict[str, str] = {}
    utt2spk: Dict[str, str] = {}
    spk_tables: Dict[str, Dict[str, str]] = {t: {} for t in SPEAKER_TABLES}
    for name, src in sources.items():
        t = read_kaldi_tables(src)
        if "segments" in t:
            raise AsrError(f"{src}: a data dir with segments cannot be pooled (whole-file utterances only)")
        for utt, path in t["wav.scp"].items():
            u = f"{name}_{utt}"
            wav[u], text[u], utt2spk[u] = path, t["text"][utt], f"{name}_{t['utt2spk'][utt]}"
        for tab in SPEAKER_TABLES:
            if (src / tab).is_file():
                spk_tables[tab].update({f"{name}_{k}": v for k, v in read_table(src / tab)})
    write_tables(dst, wav, text, utt2spk)
    for tab, rows in spk_tables.items():
        spks = set(utt2spk.values())
        if rows and spks <= set(rows):  # only where every speaker has one (a group report needs them all)
            write_table(dst / tab, [(k, v) for k, v in rows.items() if k in spks])
    return len(text)


def prepare_pooled(out_dir: Path, data: DataConfig, nj: int = 1, config_path: Optional[Path] = None) -> Dict:
    """Prepare every corpus of ``data.pool`` and pool them (see the module docstring); returns the utterance counts
    per set."""
    out_dir = Path(out_dir)
    if len(data.pool) < 2:
        raise AsrError(f"data.pool must name at least two corpora and their folders, got {data.pool}")
    unknown = sorted(set(data.pool) - set(POOLABLE))
    if unknown:
        raise AsrError(f"data.pool: cannot pool {unknown} (poolable: {', '.join(POOLABLE)})")
    if data.mix_weights:
        raise AsrError("data.mix_weights: local.pooled pools whole corpora (each utterance once an epoch); unset it")
    fp = {"pool": {k: str(v) for k, v in sorted(data.pool.items())}, "data": dataclasses.asdict(data)}
    marker = out_dir / ".pooled.done"
    if is_done(marker, fingerprint=fp):
        log.info("pooled data in %s is complete; skipping (delete %s to redo)", out_dir, marker)
        return {}
    parts: Dict[str, Path] = {}
    for name, folder in sorted(data.pool.items()):
        mod = importlib.import_module(f"local.{name}")
        test, what = POOLABLE[name]
        sub = dataclasses.replace(data, corpus=name, corpus_dir=folder, pool={}, dev_speakers=[], download_url="")
        corpus = locate_corpus(sub, config_path, None, out_dir / name, getattr(mod, test), what)
        mod._prepare(corpus, out_dir / name, sub, nj)
        parts[name] = out_dir / name
    counts = {
        "train": pool_dirs({n: d / "train" for n, d in parts.items()}, out_dir / "train"),
        "dev": pool_dirs({n: d / "dev" for n, d in parts.items()}, out_dir / "dev"),
    }
    for n, d in parts.items():
        for s in ("dev", "test"):
            counts[f"{s}_{n}"] = pool_dirs({n: d / s}, out_dir / f"{s}_{n}")
    with atomic_open(out_dir / "local" / "lm" / "train_text.txt") as f:
        for d in parts.values():
            f.write((d / "local" / "lm" / "train_text.txt").read_text())
    with atomic_open(out_dir / "local" / "dict" / "lexicon.txt") as f:
        for d in parts.values():
            lex = d / "local" / "dict" / "lexicon.txt"
            if lex.is_file():
                f.write(lex.read_text())
    mark_done(marker, {"utterances": counts}, fingerprint=fp)
    log.info("pooled %s: %s utterances", " + ".join(parts), counts)
    return counts


def main(argv: Optional[List[str]] = None) -> None:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", type=Path)
    pre.add_argument("--corpus-dir", type=Path)
    known = pre.parse_known_args(argv)[0]

    def prepare(corpus_dir: Optional[Path], out_dir: Path, data: DataConfig, nj: int) -> None:
        if known.corpus_dir is not None:
            raise AsrError("local.pooled takes each corpus's folder from data.pool (--set data.pool.NAME=DIR)")
        prepare_pooled(out_dir, data, nj, known.config)

    corpus_main(prepare, __doc__, lambda d: True, "corpora (data.pool)", argv, needs_corpus=False)


if __name__ == "__main__":
    main()
