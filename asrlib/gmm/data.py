"""Which utterances a GMM stage can use, and why the others cannot (never dropped silently)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np
from tqdm import tqdm

from asrlib.errors import AsrError, PathLike
from asrlib.io.tables import read_table
from asrlib.kaldi_io import MatrixReader
from asrlib.gmm.align import GraphCompiler
from asrlib.gmm.lang import GmmLang
from asrlib.gmm.train import UttData

Excluded = List[Tuple[str, str]]


def select_utterances(
    text: PathLike, feats: MatrixReader, lang: GmmLang
) -> Tuple[List[Tuple[str, List[str]]], Excluded]:
    """``[(utt, words)]`` of the utterances of ``text`` that have features and only in-lexicon words, and
    ``[(utt, reason)]`` for the rest."""
    text = Path(text)
    if not text.is_file():
        raise AsrError(f"{text} does not exist; run the data preparation stage first")
    keep: List[Tuple[str, List[str]]] = []
    excluded: Excluded = []
    for utt, trans in read_table(text):
        words = trans.split()
        if utt not in feats:
            excluded.append((utt, f"no features (excluded at the feature stage or missing from {feats.scp_path})"))
        elif not words:
            excluded.append((utt, "empty transcript"))
        else:
            oov = sorted({w for w in words if w not in lang.lexicon or w not in lang.words})
            if oov:
                excluded.append((utt, f"OOV word(s) {' '.join(oov)} (not in the lexicon)"))
            else:
                keep.append((utt, words))
    return keep, excluded


def random_subset(items: Sequence, n: int, seed: int) -> List:
    """``n`` items chosen with ``seed`` (all when n <= 0 or n >= len), in their original order."""
    if n <= 0 or n >= len(items):
        return list(items)
    idx = sorted(random.Random(seed).sample(range(len(items)), n))
    return [items[i] for i in idx]


def load_data(
    utts: Sequence[Tuple[str, List[str]]],
    feats: MatrixReader,
    featurize,
    compiler: GraphCompiler,
    lang: GmmLang,
    desc: str = "graphs",
) -> List[UttData]:
    """Features (through ``featurize``: raw fbank -> GMM features) and training graphs of ``utts``."""
    out = []
    for utt, words in tqdm(utts, desc=desc, unit="utt", mininterval=2.0):
        x = featurize(feats[utt])
        out.append(
            UttData(utt, np.ascontiguousarray(x, dtype=np.float32), compiler.compile([lang.words[w] for w in words]))
        )
    return out


def transcripts(utts: Sequence[Tuple[str, List[str]]]) -> Dict[str, List[str]]:
    return {u: w for u, w in utts}
