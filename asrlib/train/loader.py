"""The trainer's data path: a lazy cut manifest → lhotse's ``DynamicBucketingSampler`` → a ``DataLoader`` whose
workers read (or compute) the features and build padded batches.

* :class:`CutData`: one set (train or dev): its lazy cuts (:func:`asrlib.data.cuts.open_cuts`), what a batch's
  targets are (:class:`CtcTargets`, or the CE trainer's frame targets), its normalisation (:class:`Normaliser`).
  Cuts that cannot be trained on (no transcript, an OOV word, too long, too short for CTC) are filtered out as the
  sampler meets them and listed in the set's report file with the reason; a cut whose features or audio cannot be
  read in a worker is skipped, counted and listed in the epoch's report (``log/skipped_epoch<N>.txt``), and
  training goes on.
* Batches are a function of (seed, epoch, rank, world size): the sampler shuffles with its own RNG; the workers' random
  draws (joins, jitter, and SpecAugment with ``train.spec_augment_in: loader``:
  :class:`asrlib.train.augment.LoaderAugment`) come from RNGs seeded by the batch's place in the run; SpecAugment by
  default and ``train.noise_prob``'s noise run in the training process on the checkpointed global RNG. So a resumed run
  skips the batches done — the sampler re-reads only the cut metadata to get there — and sees the very batches an
  uninterrupted run would have seen, whatever the number of workers.
* Several learners: each builds the same sampler with its rank and the world size; lhotse gives every rank the same
  number of batches (the last ones split evenly), so the learners step in lockstep.
"""

from __future__ import annotations

import logging
import random
from itertools import islice
from dataclasses import dataclass
from functools import partial, reduce
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

from lhotse import CutSet
from lhotse.cut import MixedCut

from asrlib.config import LoaderConfig
from asrlib.data.cuts import open_cuts
from asrlib.errors import AsrError, PathLike
from asrlib.features.cmvn import SPEAKER_STATS, Cmvn, utterance_cmn
from asrlib.io.tables import read_table, write_table
from asrlib.train.augment import LoaderAugment
from asrlib.train.batch_plan import BatchPlan
from asrlib.train.concat import joined_features
from asrlib.train.jitter import move_ends

log = logging.getLogger(__name__)

FRAME_SHIFT = 0.01


# ------------------------------------------------------------------------------------------------ targets
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


def pad_features(feats: Sequence[np.ndarray]) -> Tuple[torch.Tensor, torch.Tensor]:
    """(N, T_max, D) zero-padded float32 batch and the (N,) lengths."""
    lens = [f.shape[0] for f in feats]
    x = np.zeros((len(feats), max(lens), feats[0].shape[1]), dtype=np.float32)  # numpy: no intra-op thread pool
    for i, f in enumerate(feats):
        x[i, : f.shape[0]] = f
    return torch.from_numpy(x), torch.tensor(lens, dtype=torch.long)


def num_frames(cut) -> int:
    return cut.num_frames if cut.has_features else int(round(cut.duration / FRAME_SHIFT))


class CtcTargets:
    """CTC targets of a cut: its transcript's tokens through the first pronunciation of each word in ``lang_dir``."""

    def __init__(self, lang_dir: PathLike, stack: int, max_frames: int = 3000) -> None:
        self.lang_dir = Path(lang_dir)
        self.lexicon = read_lexicon_first_pron(self.lang_dir / "lexicon.txt")
        self.tokens = read_token_ids(self.lang_dir / "tokens.txt")
        self.stack, self.max_frames = stack, max_frames

    def _ids(self, cut) -> List[int]:
        words = [w for s in cut.supervisions for w in (s.text or "").split()]
        return text_to_token_ids(words, self.lexicon, self.tokens)

    def check(self, cut) -> Optional[str]:
        """Why ``cut`` cannot be trained on (None: it can)."""
        if not any((s.text or "").strip() for s in cut.supervisions):
            return "empty transcript"
        try:
            ids = self._ids(cut)
        except KeyError as e:
            return f"OOV word {e.args[0]} (not in {self.lang_dir}/lexicon.txt)"
        n = num_frames(cut)
        if n > self.max_frames:
            return f"too long: {n} frames > max {self.max_frames} (memory budget)"
        if ctc_min_frames(ids) > n // self.stack:
            return f"CTC infeasible: {ctc_min_frames(ids)} tokens need more than the {n // self.stack} output frames"
        return None

    def targets(self, cut) -> List[int]:
        return self._ids(cut)

    def min_frames(self, ids: Sequence[int]) -> int:
        """The fewest fbank frames whose output frames can carry ``ids`` (CTC)."""
        return ctc_min_frames(ids) * self.stack

    def collate(self, feats: List[np.ndarray], targets: List[List[int]]) -> Dict[str, torch.Tensor]:
        x, lens = pad_features(feats)
        return {
            "feats": x,
            "feat_lens": lens,
            "targets": torch.tensor([t for ts in targets for t in ts], dtype=torch.long),
            "target_lens": torch.tensor([len(t) for t in targets], dtype=torch.long),
        }


# ------------------------------------------------------------------------------------------------ features
class Normaliser:
    """A cut's features as the network sees them: the mean normalisation ``cmn`` ("" / online: none here;
    utterance; speaker: minus the speaker's mean from the feature dir's ``cmvn_spk.scp``), then ``cmvn`` (global,
    and the online running mean when its ``online_prior`` is set)."""

    def __init__(self, cmvn: Cmvn, cmn: str = "", feats_dir: Optional[PathLike] = None) -> None:
        self.cmvn, self.cmn = cmvn, cmn
        self.speaker_mean: Dict[str, np.ndarray] = {}
        self.utt2spk: Dict[str, str] = {}
        if cmn == "speaker":
            from asrlib.kaldi_io import MatrixReader

            d = Path(feats_dir) if feats_dir is not None else None
            if d is None or not (d / SPEAKER_STATS).is_file() or not (d / "utt2spk").is_file():
                raise AsrError(
                    f"{d} has no per-speaker CMVN statistics ({SPEAKER_STATS}, utt2spk), needed with "
                    f"features.cmvn: speaker; compute them with python -m steps.compute_cmvn --speaker-only"
                )
            self.speaker_mean = {
                spk: Cmvn.from_stats(st)[0].mean for spk, st in MatrixReader(d / SPEAKER_STATS, double=True)
            }
            self.utt2spk = dict(read_table(d / "utt2spk"))

    def __call__(self, cut, feats: np.ndarray) -> np.ndarray:
        if self.cmn == "utterance":
            feats = utterance_cmn(feats)
        elif self.cmn == "speaker":
            spk = (cut.supervisions[0].speaker if cut.supervisions else None) or self.utt2spk.get(cut.id)
            if spk not in self.speaker_mean:
                raise AsrError(f"utterance '{cut.id}' has no speaker statistics (speaker {spk!r}): rerun compute_cmvn")
            feats = (feats - self.speaker_mean[spk]).astype(np.float32, copy=False)
        return self.cmvn.apply(feats)


class OnTheFlyFbank:
    """Features computed from a cut's audio in the worker (``features.on_the_fly``, speed-perturbed cuts)."""

    def __init__(self, num_mel_bins: int, sample_rate: int) -> None:
        from asrlib.features.fbank import FbankExtractor, FbankOptions

        self.extract = FbankExtractor(FbankOptions(num_mel_bins=num_mel_bins, sample_rate=sample_rate))
        self.sample_rate = sample_rate

    def __call__(self, cut) -> np.ndarray:
        if cut.sampling_rate != self.sample_rate:
            cut = cut.resample(self.sample_rate)
        return self.extract.features(cut.load_audio()[0])


def load_features(cut, on_the_fly: Optional[OnTheFlyFbank]) -> np.ndarray:
    """The cut's stored features (a join's: :func:`joined_features`), else (speed-perturbed copies, corpora without
    stored features) computed."""
    if cut.has_features:
        joined = joined_features(cut)
        return np.asarray(joined if joined is not None else cut.load_features(), dtype=np.float32)
    if on_the_fly is None:
        raise AsrError(f"cut {cut.id} has no stored features and features.on_the_fly is off")
    return on_the_fly(cut)


def _sources(cut) -> str:
    """Where a cut's input lies: its feature archive, else its audio (each track's, for a cut with noise mixed in)."""
    if cut.has_features:
        return cut.features.storage_path
    tracks = [t.cut for t in cut.tracks] if isinstance(cut, MixedCut) else [cut]
    return " + ".join(str(c.recording.sources[0].source) for c in tracks if c.has_recording)


class BatchDataset(torch.utils.data.Dataset):
    """Map-style dataset indexed by the sampler's CutSets: features (read or computed), normalised, with targets,
    padded. A cut whose features cannot be read is skipped and reported in the batch's ``skipped``; ``None`` (a
    learner's padding step) gives an empty batch. ``numpy``: a worker sends numpy arrays (:func:`_from_worker`;
    not when the DataLoader pins memory for CUDA, which pins tensors only). ``augment``: applied to the padded
    features of the batches that come with a seed (:class:`asrlib.train.batch_plan.BatchPlan`)."""

    def __init__(
        self,
        targets,
        normalise: Normaliser,
        on_the_fly: Optional[OnTheFlyFbank] = None,
        numpy: bool = True,
        augment: Optional[LoaderAugment] = None,
    ) -> None:
        self.targets, self.normalise, self.on_the_fly, self.numpy = targets, normalise, on_the_fly, numpy
        self.augment = augment

    def __getitem__(self, cuts) -> dict:
        if cuts is None:
            return {"ids": [], "skipped": []}
        plan = BatchPlan.of(cuts)
        cuts, moves, seed = plan.cuts, plan.moves, plan.seed
        feats, targets, ids, skipped = [], [], [], []
        for i, cut in enumerate(cuts):
            try:
                f = load_features(cut, self.on_the_fly)
                if f.ndim != 2 or not len(f) or not np.isfinite(f).all():
                    raise ValueError(f"unusable features of shape {f.shape} (or NaN/Inf)")
            except Exception as e:  # noqa: BLE001 - any unreadable input skips the cut, with its reason
                skipped.append((cut.id, f"cannot read {_sources(cut)}: {' '.join(str(e).split())[:200]}"))
                continue
            t = self.targets.targets(cut)
            if moves is not None:
                f = move_ends(f, *moves[i], min_frames=self.targets.min_frames(t))
            feats.append(self.normalise(cut, f))
            targets.append(t)
            ids.append(cut.id)
        batch = self.targets.collate(feats, targets) if feats else {}
        if feats and seed is not None and self.augment is not None:
            batch["feats"] = self.augment(batch["feats"], batch["feat_lens"], seed)
        if self.numpy and torch.utils.data.get_worker_info() is not None:
            batch = {k: v.numpy() for k, v in batch.items()}  # see _from_worker
        return {**batch, "ids": ids, "skipped": skipped}

    def __len__(self) -> int:  # not used: indices come from the sampler
        raise TypeError("BatchDataset is indexed by CutSets from a sampler")


# ------------------------------------------------------------------------------------------------ sets
@dataclass
class SamplerSettings:
    max_duration: float
    seed: int
    num_buckets: int = 10
    buffer_size: int = 10000
    bins_estimate_cuts: int = 2000
    world_size: int = 1
    rank: int = 0

    @classmethod
    def of(cls, tcfg, rank: int = 0, world_size: int = 1) -> "SamplerSettings":
        """The training sampler of a ``train`` config section."""
        return cls(
            tcfg.batch_seconds, tcfg.seed, tcfg.num_buckets, tcfg.bucket_buffer, tcfg.bucket_bins_cuts, world_size, rank
        )


def _perturbed(cut, factor: float):
    """``cut`` played ``factor`` times faster (lhotse's lazy resampling); its stored features no longer apply."""
    return cut.drop_features().perturb_speed(factor)


class CutData:
    """One set's lazy cuts with their targets and normalisation; :meth:`batches` yields the padded batches of an
    epoch through a DataLoader. ``excluded_path``: where the cuts that cannot be trained on are listed.
    ``speed_perturb`` factors (e.g. 0.9, 1.0, 1.1: Kaldi's 3-way speed perturbation): every cut also played at each
    factor != 1, a lazy lhotse transform whose features ``on_the_fly`` computes in the workers (no copy of the audio
    or of the features is written), the copies interleaved at random (``seed``). ``noise_mix``
    (:class:`asrlib.train.noise_mix.NoiseMix`): a noise corpus mixed into the epoch's batches (:meth:`mixed`), their
    features computed by ``on_the_fly`` too. ``concat`` (:class:`asrlib.train.concat.ConcatCuts`, CTC targets only):
    runs of each batch's cuts joined end to end (:meth:`mixed`, before the noise). ``jitter``
    (:class:`asrlib.train.jitter.BoundaryJitter`, CTC targets only): every cut's start and end moved by a few frames."""

    def __init__(
        self,
        cuts_path: PathLike,
        targets,
        normalise: Normaliser,
        loader: LoaderConfig = LoaderConfig(),
        excluded_path: Optional[PathLike] = None,
        on_the_fly: Optional[OnTheFlyFbank] = None,
        speed_perturb: Sequence[float] = (),
        seed: int = 0,
        noise_mix=None,
        concat=None,
        jitter=None,
    ) -> None:
        self.cuts_path = Path(cuts_path)
        self.cuts = open_cuts(self.cuts_path)
        factors = [float(f) for f in speed_perturb]
        if noise_mix is not None and on_the_fly is None:
            raise AsrError("noise mixing computes the mixed cuts' features on the fly: pass on_the_fly")
        self.noise_mix = noise_mix
        if concat is not None and not isinstance(targets, CtcTargets):
            raise AsrError("train.concat_prob joins cuts for CTC training only (set it to 0)")
        self.concat = concat
        if jitter is not None and not isinstance(targets, CtcTargets):
            raise AsrError("train.boundary_jitter moves cuts' ends for CTC training only (set it to 0)")
        self.jitter = jitter
        if any(f != 1.0 for f in factors):  # lazy copies, interleaved at random (seeded): no audio or features written
            if on_the_fly is None:
                raise AsrError("speed perturbation computes the perturbed cuts' features on the fly: pass on_the_fly")
            self.cuts = CutSet.mux(
                *[self.cuts if f == 1.0 else self.cuts.map(partial(_perturbed, factor=f)) for f in factors],
                seed=seed,
            )
        self.name = str(self.cuts_path)
        self.targets, self.normalise, self.loader_cfg = targets, normalise, loader
        self.excluded_path = Path(excluded_path) if excluded_path is not None else None
        self.on_the_fly = on_the_fly
        self.excluded: Dict[str, str] = {}
        self.keep: Optional[set] = None
        self.augment: Optional[LoaderAugment] = None
        self._loaders: Dict[int, tuple] = {}

    # ---------------------------------------------------------------- which cuts
    def usable(self, cut) -> bool:
        if self.keep is not None and cut.id not in self.keep:
            return False
        why = self.excluded.get(cut.id)
        if why is None and cut.id not in self.excluded:
            if not cut.has_features and (self.on_the_fly is None or not cut.has_recording):
                why = "no features (excluded at the feature stage or missing from feats.scp)"
            else:
                why = self.targets.check(cut)
            if why is not None:
                self.excluded[cut.id] = why
        return why is None

    def usable_cuts(self) -> Iterator:
        return (c for c in self.cuts if self.usable(c))

    def keep_random(self, n: int, seed: int) -> None:
        """Train on a seeded random ``n`` of the usable cuts only (all when ``n`` <= 0 or >= their number); one pass
        over the manifest, holding the ids."""
        if n <= 0:
            return
        ids = [c.id for c in self.usable_cuts()]
        if n < len(ids):
            self.keep = set(random.Random(seed).sample(sorted(ids), n))

    def write_report(self) -> int:
        """List the excluded cuts met so far (``utt reason``) in ``excluded_path``; returns their number."""
        if self.excluded_path is not None:
            write_table(self.excluded_path, sorted(self.excluded.items()))
        return len(self.excluded)

    def stats(self) -> Tuple[int, float]:
        """(number of usable cuts, their seconds): one pass over the manifest's metadata."""
        n, seconds = 0, 0.0
        for c in self.usable_cuts():
            n, seconds = n + 1, seconds + c.duration
        if not n:
            raise self._none_usable()
        return n, seconds

    def feature_dim(self) -> int:
        for cut in self.usable_cuts():
            return load_features(cut, self.on_the_fly).shape[1]
        raise self._none_usable()

    # ---------------------------------------------------------------- batches
    def set_augment(self, augment: Optional[LoaderAugment]) -> None:
        """SpecAugment in the workers (``train.spec_augment_in: loader``): each batch of :meth:`mixed` gets its seed,
        the workers apply ``augment`` with it. Set before the first :meth:`batches` (the loader keeps its dataset)."""
        self.close_workers()
        self.augment = augment

    def mixed(self, batches: Iterator, epoch: int, first: int) -> Iterator:
        """The CutSets ``batches`` of ``epoch`` (the first is batch number ``first``) with ``concat``, then
        ``noise_mix`` applied, then ``jitter``'s moves attached (:class:`asrlib.train.batch_plan.BatchPlan`), then the
        seed of the batch's SpecAugment (:meth:`set_augment`)."""
        attach = self.augment.attach if self.augment is not None else None
        steps = [f for f in (self.concat, self.noise_mix, self.jitter, attach) if f is not None]
        if not steps:
            return batches
        return (
            c if c is None else reduce(lambda cs, f: f(cs, epoch, i), steps, c) for i, c in enumerate(batches, first)
        )

    def sampler(self, s: SamplerSettings, shuffle: bool, keep=None):
        """lhotse's sampler over the cuts that ``keep`` (default :meth:`usable`) lets through, as it meets them."""
        from lhotse.dataset import DynamicBucketingSampler

        n = sum(1 for _ in islice(self.cuts, s.num_buckets))  # a set smaller than the buckets: fewer buckets
        buckets = {"num_buckets": min(s.num_buckets, n)} if n >= 2 else {"duration_bins": [1e9]}
        sampler = DynamicBucketingSampler(
            self.cuts,
            max_duration=s.max_duration,
            **buckets,
            shuffle=shuffle,
            drop_last=False,
            buffer_size=s.buffer_size,
            num_cuts_for_bins_estimate=s.bins_estimate_cuts,
            world_size=s.world_size,
            rank=s.rank,
            seed=s.seed,
        )
        return sampler.filter(keep or self.usable)

    def census(self, s: SamplerSettings) -> Tuple[int, int, float]:
        """One pass of the sampler over epoch 0's metadata (no features read): (this learner's batches, the usable
        cuts, their seconds). Every rank's sampler meets every cut (lhotse forms all batches and keeps each
        ``world_size``-th), so the counts and the exclusions are the whole set's."""
        tally = [0, 0.0]

        def counted(cut) -> bool:
            ok = self.usable(cut)
            if ok:
                tally[0], tally[1] = tally[0] + 1, tally[1] + cut.duration
            return ok

        sampler = self.sampler(s, shuffle=True, keep=counted)
        sampler.set_epoch(0)
        batches = sum(1 for _ in sampler)
        if not tally[0]:
            raise self._none_usable()
        return batches, tally[0], tally[1]

    def _none_usable(self) -> AsrError:
        """The error when no cut can be trained on, after listing why in the report file."""
        self.write_report()
        return AsrError(f"no usable utterance in {self.cuts_path}; see {self.excluded_path}")

    def close_workers(self) -> None:
        """Shut down the loaders' persistent workers now (the next :meth:`batches` starts new ones). Left to the
        garbage collector, they go with a trainer's reference cycles, in an order in which torch's shutdown no longer
        reaches them: it then waits 5 s for each worker before killing it (measured: a gc of 20 s after one test
        module's trainings had left 4 workers). Dropping the last reference to a DataLoader shuts its workers down at
        once."""
        self._loaders.clear()

    def batches(self, index_source: Iterator, workers: Optional[int] = None) -> Iterator[dict]:
        """Padded batches of the CutSets (or ``None`` padding) that ``index_source`` yields, read by the loader's
        workers (``workers``: override ``num_workers``)."""
        cfg = self.loader_cfg
        n = cfg.num_workers if workers is None else workers
        if n not in self._loaders:  # one DataLoader per worker count: persistent workers live across epochs
            holder = _IndexSource()
            pin = cfg.pin_memory and torch.cuda.is_available()
            loader = torch.utils.data.DataLoader(
                BatchDataset(self.targets, self.normalise, self.on_the_fly, numpy=not pin, augment=self.augment),
                sampler=holder,
                batch_size=None,
                collate_fn=_identity,
                num_workers=n,
                prefetch_factor=cfg.prefetch_factor if n else None,
                pin_memory=pin,
                persistent_workers=cfg.persistent_workers and n > 0,
                generator=torch.Generator().manual_seed(0),  # leaves the global RNG (checkpointed) untouched
                worker_init_fn=partial(worker_init, nice=cfg.worker_nice),
            )
            self._loaders[n] = (holder, loader)
        holder, loader = self._loaders[n]
        holder.source = index_source
        return _from_workers(loader) if n else iter(loader)


class _IndexSource(torch.utils.data.Sampler):
    source: Optional[Iterator] = None

    def __init__(self) -> None:
        pass

    def __iter__(self):
        return iter(self.source)


def _identity(x):
    return x


def _from_workers(loader: torch.utils.data.DataLoader) -> Iterator[dict]:
    """The batches of a DataLoader with workers, their result pipe widened first (:func:`widen_result_pipe`)."""
    it = iter(loader)
    widen_result_pipe(it)
    for batch in it:
        yield _from_worker(batch)


RESULT_PIPE_BYTES = 1 << 20  # Linux's default /proc/sys/fs/pipe-max-size: the most an unprivileged process may ask


def widen_result_pipe(it, nbytes: int = RESULT_PIPE_BYTES) -> int:
    """Let the pipe that carries the workers' batches to the trainer hold ``nbytes`` (Linux; elsewhere, or where the
    kernel refuses, it stays as it is). With the default 64 KiB, a worker's batch (a digits batch of 20 s is about
    0.6 MB of features) does not fit: the worker's feeder thread writes 64 KiB, waits until the trainer has read
    them, and so on, so the trainer's read of each batch waits on a low-priority process (``worker_nice``) about ten
    times. With 1 MiB the batch is in the pipe before the trainer asks for it: the trainer's wait for a batch fell
    from 1.65-1.95 to 1.22-1.38 ms (median over 150 batches, 2 workers, the digits recipe's batches, a busy step of
    80 ms between; docs/data.md). Returns the pipe's size (0: not known)."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        return 0
    queue = getattr(it, "_worker_result_queue", None)  # torch's DataLoader iterator (private, checked by a test)
    setsize, getsize = getattr(fcntl, "F_SETPIPE_SZ", None), getattr(fcntl, "F_GETPIPE_SZ", None)
    if queue is None or setsize is None:
        return 0
    fd = queue._reader.fileno()  # multiprocessing.Queue's reading end of its os.pipe()
    try:
        if fcntl.fcntl(fd, getsize) < nbytes:
            fcntl.fcntl(fd, setsize, nbytes)
    except OSError as e:  # EPERM over the user's pipe budget, EBUSY, ...: the pipe stays as it was
        log.debug("loader result pipe left at its size: %s", e)
    return fcntl.fcntl(fd, getsize)


def _from_worker(batch: dict) -> dict:
    """A worker's batch as tensors. Workers send numpy arrays, pickled through the pipe into memory the trainer
    reuses, rather than tensors in a fresh shared-memory segment per batch, whose every page the trainer would
    fault in on first touch (bench/train_throughput.py, 2 workers: trainer/bare ratio 0.785 and 0.787 in two
    runs against 0.752 and 0.760 with shared-memory tensors)."""
    return {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in batch.items()}


def worker_init(worker_id: int, nice: int = 0) -> None:
    """A forked worker (or the census's process, asrlib/train/census.py) drops its copies of the trainer's exp-dir
    lock (killed, the trainer releases it at once), dies with the trainer (a SIGKILLed trainer's workers would
    otherwise live on as orphans) and lowers its CPU priority by ``nice`` (train.loader.worker_nice), so that where
    cores are short the training step goes first."""
    import os

    from asrlib.io.stage import close_inherited_locks, die_with_parent

    close_inherited_locks()
    die_with_parent()
    if nice > 0:
        os.nice(min(nice, 19))


def epoch_cut_batches(data: CutData, s: SamplerSettings, epoch: int, skip: int, shuffle: bool = True) -> Iterator:
    """The sampler's CutSets of ``epoch`` after the first ``skip`` (resume: only metadata is read to get there)."""
    sampler = data.sampler(s, shuffle)
    sampler.set_epoch(epoch)
    it = iter(sampler)  # the sampler itself: iter() again would restart the epoch, so the rest is drawn by next()
    for _ in range(skip):
        if next(it, None) is None:
            break
    while True:
        try:
            yield next(it)
        except StopIteration:
            return


def dev_cut_batches(data: CutData, max_duration: float, rank: int, world_size: int) -> Iterator:
    """A learner's share of the dev set: the same unshuffled batches on every learner, every ``world_size``-th one
    (no cut duplicated: the dev sums are exact)."""
    s = SamplerSettings(max_duration=max_duration, seed=0)
    for i, cuts in enumerate(epoch_cut_batches(data, s, 0, 0, shuffle=False)):
        if i % world_size == rank:
            yield cuts


def write_skipped(path: Path, rows: List[Tuple[str, str]]) -> None:
    write_table(path, sorted(rows))


def open_set(
    feats_dir: PathLike,
    targets,
    cmvn_scp: PathLike,
    cmn: str = "",
    online_prior: Optional[float] = None,
    loader: LoaderConfig = LoaderConfig(),
    excluded_path: Optional[PathLike] = None,
    data_dir: Optional[PathLike] = None,
    speed_perturb: Sequence[float] = (),
    fbank: Optional[Tuple[int, int]] = None,
    seed: int = 0,
    noise_mix=None,
    concat=None,
    jitter=None,
) -> CutData:
    """A feature dir's set for training: its cut manifest (written first if it is missing or stale:
    :func:`asrlib.data.cuts.ensure_cuts`), ``targets``, and the normalisation of ``cmvn_scp`` after ``cmn``;
    ``fbank`` (mel bins, sample rate): features computed on the fly for cuts without stored ones (speed-perturbed
    copies, ``speed_perturb``, and cuts with ``noise_mix``'s noise); ``concat``, ``jitter``: :class:`CutData`'s."""
    from asrlib.data.cuts import ensure_cuts
    from asrlib.features.cmvn import load_cmvn

    cuts = ensure_cuts(feats_dir, data_dir)
    normalise = Normaliser(load_cmvn(cmvn_scp, online_prior=online_prior), cmn, feats_dir)
    on_the_fly = OnTheFlyFbank(*fbank) if fbank is not None else None
    return CutData(
        cuts, targets, normalise, loader, excluded_path, on_the_fly, speed_perturb, seed, noise_mix, concat, jitter
    )
