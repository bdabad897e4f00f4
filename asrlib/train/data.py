"""Training data: features from a Kaldi feats.scp, CMVN, transcripts mapped to CTC token ids, length buckets.

Batches are a pure function of (seed, epoch, shard): the sampler holds no hidden iterator state, so a resumed run
regenerates exactly the batches an uninterrupted run would have seen and skips the ones already done.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from tqdm import tqdm

from asrlib.features.cmvn import Cmvn, load_cmvn, open_features
from asrlib.errors import AsrError
from asrlib.io.tables import read_table, write_table

log = logging.getLogger(__name__)


def read_lexicon_first_pron(lexicon_txt: Path) -> Dict[str, List[str]]:
    """word → phones of its first pronunciation in ``lexicon.txt``."""
    lex: Dict[str, List[str]] = {}
    for word, prons in read_table(lexicon_txt):
        lex.setdefault(word, prons.split())
    return lex


def read_token_ids(tokens_txt: Path) -> Dict[str, int]:
    return {tok: int(i) for tok, i in read_table(tokens_txt)}


def text_to_token_ids(words: Sequence[str], lexicon: Dict[str, List[str]], tokens: Dict[str, int]) -> List[int]:
    ids: List[int] = []
    for w in words:
        if w not in lexicon:
            raise KeyError(w)
        ids.extend(tokens[p] for p in lexicon[w])
    return ids


def ctc_min_frames(ids: Sequence[int]) -> int:
    """Fewest output frames that can carry ``ids`` under CTC (one blank between repeated tokens)."""
    return len(ids) + sum(1 for a, b in zip(ids, ids[1:]) if a == b)


@dataclass
class Utterance:
    utt: str
    num_frames: int
    token_ids: List[int]


class FeatureSet:
    """Normalised features of a set's utterances, read from a Kaldi archive, optionally kept in memory; the
    datasets' shared part (``reader``, ``cmvn``, ``utts`` and ``name`` are set by the subclass)."""

    reader: "object"
    cmvn: Cmvn
    utts: List["Utterance"]
    name: str = ""
    _cache: Dict[str, np.ndarray]

    def _init_features(self, feats_scp: Path, cmn: str, cmvn: Cmvn) -> None:
        self.reader = open_features(feats_scp, cmn)
        self.cmvn = cmvn
        self.name = str(feats_scp)
        self._cache = {}

    def features(self, utt: str) -> np.ndarray:
        """The utterance's normalised features (callers must not modify them: they may be the cached array)."""
        cached = self._cache.get(utt)
        if cached is not None:
            return cached
        return self.cmvn.apply(np.asarray(self.reader[utt], dtype=np.float32))

    def preload(self, max_mb: float) -> bool:
        """Read and normalise every utterance's features once and keep them in memory if they fit in ``max_mb``
        (float32; <= 0: never); an epoch then reads no archive. The same arrays as :meth:`features` would make, so
        training is bit for bit the same. Returns whether the set was loaded."""
        dim = self.features(self.utts[0].utt).shape[1]
        mb = self.total_frames() * dim * 4 / 2**20
        if not 0 < mb <= max_mb:
            if max_mb > 0:
                log.info(
                    "features of %s: %.0f MB > train.feature_cache_mb %.0f: read from the archives each batch",
                    self.name,
                    mb,
                    max_mb,
                )
            return False
        t0 = time.perf_counter()
        self._cache = {
            u.utt: self.features(u.utt)
            for u in tqdm(self.utts, desc=f"loading {self.name}", unit="utt", mininterval=2.0, leave=False)
        }
        log.info(
            "features of %s in memory: %d utterances, %.0f MB, read in %.1f s",
            self.name,
            len(self._cache),
            mb,
            time.perf_counter() - t0,
        )
        return True

    def total_frames(self) -> int:
        return sum(u.num_frames for u in self.utts)


def report_excluded(excluded: List[Tuple[str, str]], kept: int, source: Path, path: Optional[Path]) -> None:
    """List the utterances a dataset left out (``utt reason`` lines in ``path``, when given) and log their count."""
    if path is not None:
        write_table(path, excluded)
    if excluded:
        log.warning("excluded %d of %d utterances of %s (see %s)", len(excluded), len(excluded) + kept, source, path)


class CtcDataset(FeatureSet):
    """Utterances with features, normalised by global CMVN (after the mean normalisation ``cmn``, if any; before
    the online one when ``online_prior`` is given), and CTC targets.

    Utterances with no features, an OOV word or a transcript too long for the network's output frames are excluded
    and listed (with the reason) in ``excluded_path`` — never dropped silently.
    """

    def __init__(
        self,
        feats_scp: Path,
        text: Path,
        lang_dir: Path,
        cmvn_scp: Path,
        stack: int,
        excluded_path: Optional[Path] = None,
        max_frames: int = 3000,
        cmn: str = "",
        online_prior: Optional[float] = None,
    ):
        self._init_features(Path(feats_scp), cmn, load_cmvn(cmvn_scp, online_prior=online_prior))
        lexicon = read_lexicon_first_pron(Path(lang_dir) / "lexicon.txt")
        tokens = read_token_ids(Path(lang_dir) / "tokens.txt")
        num_frames = self._num_frames(Path(feats_scp))
        self.utts: List[Utterance] = []
        excluded: List[Tuple[str, str]] = []
        for utt, trans in read_table(text):
            if utt not in num_frames:
                excluded.append((utt, "no features (excluded at the feature stage or missing from feats.scp)"))
                continue
            words = trans.split()
            if not words:
                excluded.append((utt, "empty transcript"))
                continue
            try:
                ids = text_to_token_ids(words, lexicon, tokens)
            except KeyError as e:
                excluded.append((utt, f"OOV word {e.args[0]} (not in {lang_dir}/lexicon.txt)"))
                continue
            n = num_frames[utt]
            if n > max_frames:
                excluded.append((utt, f"too long: {n} frames > max {max_frames} (memory budget)"))
                continue
            if ctc_min_frames(ids) > n // stack:
                excluded.append(
                    (utt, f"CTC infeasible: {ctc_min_frames(ids)} tokens need more than the {n // stack} output frames")
                )
                continue
            self.utts.append(Utterance(utt, n, ids))
        report_excluded(excluded, len(self.utts), text, excluded_path)
        if not self.utts:
            raise AsrError(f"no usable utterance in {text} with {feats_scp}; see {excluded_path}")
        self.by_id = {u.utt: u for u in self.utts}

    def _num_frames(self, feats_scp: Path) -> Dict[str, int]:
        u2n = feats_scp.parent / "utt2num_frames"
        if u2n.is_file():
            return {k: int(v) for k, v in read_table(u2n)}
        return {k: self.reader[k].shape[0] for k, _ in read_table(feats_scp)}

    def keep_random(self, n: int, seed: int) -> None:
        """Keep a seeded random ``n`` of the usable utterances (all of them when ``n`` <= 0 or >= their number)."""
        if 0 < n < len(self.utts):
            self.utts = sorted(random.Random(seed).sample(self.utts, n), key=lambda u: u.utt)
            self.by_id = {u.utt: u for u in self.utts}


def make_batches(utts: Sequence[Utterance], max_frames_per_batch: int, seed: int, epoch: int) -> List[List[str]]:
    """Length-bucketed batches (sorted by length, packed up to a padded-frame budget), in a seeded random order."""
    order = sorted(utts, key=lambda u: (u.num_frames, u.utt))
    batches: List[List[str]] = []
    cur: List[str] = []
    cur_max = 0
    for u in order:
        new_max = max(cur_max, u.num_frames)
        if cur and new_max * (len(cur) + 1) > max_frames_per_batch:
            batches.append(cur)
            cur, new_max = [], u.num_frames
        cur.append(u.utt)
        cur_max = new_max
    if cur:
        batches.append(cur)
    random.Random(seed * 100003 + epoch).shuffle(batches)
    return batches


def collate(ds: CtcDataset, utt_ids: Sequence[str]) -> Dict[str, torch.Tensor]:
    feats = [ds.features(u) for u in utt_ids]
    lens = torch.tensor([f.shape[0] for f in feats], dtype=torch.long)
    x = torch.zeros(len(feats), int(lens.max()), feats[0].shape[1])
    for i, f in enumerate(feats):
        x[i, : f.shape[0]] = torch.from_numpy(f)
    targets = [torch.tensor(ds.by_id[u].token_ids, dtype=torch.long) for u in utt_ids]
    return {
        "feats": x,
        "feat_lens": lens,
        "targets": torch.cat(targets),
        "target_lens": torch.tensor([len(t) for t in targets], dtype=torch.long),
    }


def freq_warp(x: torch.Tensor, max_warp: float) -> torch.Tensor:
    """Vocal-tract-length-style perturbation on (N, T, D) filterbank features: each utterance's mel axis is stretched
    by a random factor in [1 - max_warp, 1 + max_warp] (linear interpolation between bins, edges clamped), which
    imitates a speaker with a shorter or longer vocal tract. Uses the global torch RNG (checkpointed)."""
    n, _, d = x.shape
    alpha = 1.0 + (torch.rand(n, 1) * 2 - 1) * max_warp
    pos = (torch.arange(d, dtype=torch.float32).unsqueeze(0) * alpha).clamp(0, d - 1)  # (N, D) source bins
    lo = pos.floor().long()
    hi = (lo + 1).clamp(max=d - 1)
    w = (pos - lo).unsqueeze(1)
    lo_v = x.gather(2, lo.unsqueeze(1).expand(-1, x.shape[1], -1))
    hi_v = x.gather(2, hi.unsqueeze(1).expand(-1, x.shape[1], -1))
    return lo_v * (1 - w) + hi_v * w


def spec_augment(
    x: torch.Tensor,
    lens: torch.Tensor,
    num_freq_masks: int = 2,
    max_f: int = 10,
    num_time_masks: int = 2,
    max_t_frac: float = 0.05,
    max_warp: float = 0.0,
) -> torch.Tensor:
    """Optional frequency warping, then frequency and time masking (zeros after CMVN = the mean).
    Uses the global torch RNG (checkpointed)."""
    x = freq_warp(x, max_warp) if max_warp > 0 else x.clone()
    n, _, d = x.shape
    for i in range(n):
        for _ in range(num_freq_masks):
            f = int(torch.randint(0, max_f + 1, (1,)))
            f0 = int(torch.randint(0, max(1, d - f), (1,)))
            x[i, :, f0 : f0 + f] = 0
        t_len = int(lens[i])
        max_t = max(1, int(t_len * max_t_frac))
        for _ in range(num_time_masks):
            t = int(torch.randint(0, max_t + 1, (1,)))
            t0 = int(torch.randint(0, max(1, t_len - t), (1,)))
            x[i, t0 : t0 + t] = 0
    return x
