"""Log-mel filterbank features for a Kaldi data directory, written as Kaldi archives by parallel jobs.

Features come from lhotse's :class:`lhotse.features.kaldi.extractors.Fbank` (``FbankConfig`` defaults in lhotse
1.33, checked in its source): 25 ms povey window, 10 ms frame shift, ``dither=0.0``, ``snip_edges=False`` (number
of frames = round(num_samples / 160) at 16 kHz, edges reflected), pre-emphasis 0.97, DC-offset removal, FFT size
rounded to a power of two, mel bins from ``low_freq=20`` Hz to ``high_freq=-400`` (i.e. Nyquist - 400 Hz), power
spectrum, log floored at float32 epsilon, input samples as floats in [-1, 1]. These are the settings icefall and
sherpa pass to kaldi-native-fbank (whose own struct defaults differ: ``dither=0.00003``, ``snip_edges=true``,
``high_freq=0``), so a model trained on these features can be served with kaldi-native-fbank configured the same
way. Only ``num_mel_bins`` and ``dither`` are exposed; with ``dither > 0`` the noise is seeded per utterance, so
results do not depend on ``nj``.

Output layout in ``out_dir``:

* ``feats.JOB.ark`` / ``feats.JOB.scp``, ``utt2num_frames.JOB``, ``excluded.JOB.txt`` and ``.job.JOB.json`` (the
  job's completion marker, holding a hash of its utterance list and settings) for JOB = 1..nj; a job whose marker
  matches is reused on a rerun, so an interrupted run resumes;
* ``feats.scp`` and ``utt2num_frames`` (all jobs, sorted by utterance id in C byte order);
* ``excluded.txt``: ``<utt-id> <reason>`` for every utterance that was dropped (unreadable audio, wrong sample rate
  or channel count, too short for one frame, NaN/Inf in the features).
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing as mp
import queue
import time
import traceback
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
from tqdm import tqdm

from asrlib.config import DataConfig, FeatureConfig
from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import disk_write_error, write_json
from asrlib.io.tables import read_table, read_table_dict, write_table
from asrlib.kaldi_io import write_compressed_matrices, write_matrices

log = logging.getLogger(__name__)

FRAME_SHIFT = 0.01  # seconds (lhotse FbankConfig default)
FRAME_LENGTH = 0.025  # seconds


@dataclass(frozen=True)
class FbankOptions:
    """Settings that change the features (part of every job's hash); the defaults are the config's
    (``features.*``, ``data.sample_rate``)."""

    num_mel_bins: int = FeatureConfig.num_mel_bins
    dither: float = FeatureConfig.dither
    sample_rate: int = DataConfig.sample_rate
    # Kaldi compressed matrices (kaldi_io.write_compressed_matrices) instead of float32
    compress: bool = FeatureConfig.compress


@dataclass(frozen=True)
class Segment:
    """One utterance: ``path`` and, for a ``segments`` entry, start/end in seconds (end < 0: to end of file)."""

    utt: str
    path: str
    start: float = 0.0
    end: float = -1.0


@dataclass
class FbankResult:
    feats_scp: Path
    num_utts: int
    num_excluded: int
    num_frames: int
    seconds: float


# ------------------------------------------------------------------------------------------------ input
def read_segments(data_dir: PathLike) -> List[Segment]:
    """The utterances of a Kaldi data dir (``wav.scp`` plus optional ``segments``), sorted by utterance id.

    ``wav.scp`` must hold plain file paths; a command pipe (``... |``) is an :class:`AsrError`.
    """
    data_dir = Path(data_dir)
    wav_scp = data_dir / "wav.scp"
    if not wav_scp.is_file():
        raise AsrError(f"{wav_scp} does not exist; {data_dir} is not a Kaldi data directory")
    wavs = read_table_dict(wav_scp)
    for rec, val in wavs.items():
        if val.endswith("|") or len(val.split()) != 1:
            raise AsrError(
                f"{wav_scp}: entry '{rec}' is '{val}'; only plain file paths are supported "
                f"(convert piped commands to WAV files first)"
            )
    segs: List[Segment] = []
    seg_file = data_dir / "segments"
    if seg_file.is_file():
        seen = set()
        for lineno, (utt, rest) in enumerate(read_table(seg_file), 1):
            parts = rest.split()
            try:
                rec, start, end = parts[0], float(parts[1]), float(parts[2])
                if len(parts) != 3:
                    raise ValueError
            except (IndexError, ValueError):
                raise AsrError(f"{seg_file}:{lineno}: expected '<utt> <recording> <start> <end>'") from None
            if rec not in wavs:
                raise AsrError(f"{seg_file}:{lineno}: recording '{rec}' is not in {wav_scp}")
            if utt in seen:
                raise AsrError(f"{seg_file}: duplicate utterance '{utt}'")
            if start < 0 or (0 <= end <= start):
                raise AsrError(f"{seg_file}:{lineno}: bad times start={start} end={end}")
            seen.add(utt)
            segs.append(Segment(utt, wavs[rec], start, end))
    else:
        segs = [Segment(rec, path) for rec, path in wavs.items()]
    segs.sort(key=lambda s: s.utt.encode("utf-8"))
    return segs


def split_jobs(segs: List[Segment], nj: int) -> List[List[Segment]]:
    """Split into ``nj`` contiguous chunks of near-equal size (fewer if there are fewer utterances)."""
    nj = max(1, min(nj, len(segs)))
    bounds = [round(i * len(segs) / nj) for i in range(nj + 1)]
    return [segs[bounds[i] : bounds[i + 1]] for i in range(nj)]


def _job_hash(segs: List[Segment], opts: FbankOptions) -> str:
    h = hashlib.sha1(json.dumps(asdict(opts), sort_keys=True).encode())
    for s in segs:
        h.update(f"{s.utt}\t{s.path}\t{s.start!r}\t{s.end!r}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------ one utterance
def _read_audio(seg: Segment, sample_rate: int) -> Tuple[Optional[np.ndarray], str]:
    """Return (mono float32 samples, "") or (None, reason)."""
    import soundfile as sf

    start = int(round(seg.start * sample_rate))
    stop = None if seg.end < 0 else int(round(seg.end * sample_rate))
    if not Path(seg.path).is_file():
        return None, f"cannot read audio {seg.path}: file not found"
    try:
        samples, sr = sf.read(seg.path, dtype="float32", always_2d=True, start=start, stop=stop)
    except Exception as e:  # noqa: BLE001 - any read failure excludes the utterance, with its reason
        msg = " ".join(str(e).split()) or type(e).__name__
        return None, f"cannot read audio {seg.path}: {msg}"
    if sr != sample_rate:
        return None, f"sample rate {sr} Hz, expected {sample_rate} Hz (resample the audio or set data.sample_rate)"
    if samples.shape[1] != 1:
        return None, f"{samples.shape[1]} channels; only mono audio is supported"
    return samples[:, 0], ""


class FbankExtractor:
    """lhotse Fbank with the module's settings: :meth:`features` of samples; :meth:`__call__` of a segment returns
    (feats or None, reason)."""

    def __init__(self, opts: FbankOptions) -> None:
        from lhotse import Fbank, FbankConfig

        self.opts = opts
        self.fbank = Fbank(
            FbankConfig(sampling_rate=opts.sample_rate, num_filters=opts.num_mel_bins, dither=opts.dither)
        )
        self.min_samples = int(round(FRAME_LENGTH * opts.sample_rate))

    def __call__(self, seg: Segment) -> Tuple[Optional[np.ndarray], str]:
        samples, reason = _read_audio(seg, self.opts.sample_rate)
        if samples is None:
            return None, reason
        if len(samples) < self.min_samples:
            return None, f"too short: {len(samples)} samples, need at least {self.min_samples} for one frame"
        import torch

        if self.opts.dither > 0:
            torch.manual_seed(zlib.crc32(seg.utt.encode("utf-8", "surrogateescape")))
        feats = self.features(samples)
        if not np.isfinite(feats).all():
            bad = int((~np.isfinite(feats).all(axis=1)).sum())
            return None, f"features contain NaN/Inf in {bad} of {len(feats)} frames (corrupt audio samples?)"
        return feats, ""

    def features(self, samples: np.ndarray) -> np.ndarray:
        """(T, num_mel_bins) float32 features of mono float samples in [-1, 1) at the options' sample rate."""
        import torch

        with torch.inference_mode():
            return np.asarray(self.fbank.extract(samples, self.opts.sample_rate), dtype=np.float32)


def compute_one(seg: Segment, opts: FbankOptions = FbankOptions()) -> Tuple[Optional[np.ndarray], str]:
    """Features of one utterance as (float32 (T, num_mel_bins), "") or (None, reason it is excluded)."""
    return FbankExtractor(opts)(seg)


# ------------------------------------------------------------------------------------------------ one job
def _job_files(out_dir: Path, job: int) -> Dict[str, Path]:
    return {
        "ark": out_dir / f"feats.{job}.ark",
        "scp": out_dir / f"feats.{job}.scp",
        "frames": out_dir / f"utt2num_frames.{job}",
        "excluded": out_dir / f"excluded.{job}.txt",
        "marker": out_dir / f".job.{job}.json",
    }


def _job_is_complete(out_dir: Path, job: int, job_hash: str) -> bool:
    files = _job_files(out_dir, job)
    if not all(files[k].is_file() for k in ("ark", "scp", "frames", "excluded", "marker")):
        return False
    try:
        return json.loads(files["marker"].read_text()).get("hash") == job_hash
    except (OSError, ValueError):
        return False


def _run_job(
    job: int, segs: List[Segment], opts: FbankOptions, out_dir: Path, job_hash: str, progress: "mp.Queue"
) -> None:
    """Compute one job's features; its marker is written last."""
    import torch

    torch.set_num_threads(1)
    extract = FbankExtractor(opts)
    files = _job_files(out_dir, job)
    files["marker"].unlink(missing_ok=True)
    frames: List[Tuple[str, str]] = []
    excluded: List[Tuple[str, str]] = []
    pending = 0

    def items() -> Iterator[Tuple[str, np.ndarray]]:
        nonlocal pending
        for seg in segs:
            feats, reason = extract(seg)
            pending += 1
            if pending >= 25:
                progress.put(("progress", pending))
                pending = 0
            if feats is None:
                excluded.append((seg.utt, reason))
                continue
            frames.append((seg.utt, str(len(feats))))
            yield seg.utt, feats

    (write_compressed_matrices if opts.compress else write_matrices)(files["ark"], items())
    write_table(files["frames"], frames)
    write_table(files["excluded"], excluded)
    write_json(files["marker"], {"hash": job_hash, "num_utts": len(frames), "num_excluded": len(excluded)})
    progress.put(("progress", pending))


def _job_main(
    job: int, segs: List[Segment], opts: FbankOptions, out_dir: Path, job_hash: str, progress: "mp.Queue"
) -> None:
    try:
        _run_job(job, segs, opts, out_dir, job_hash, progress)
    except BaseException as e:  # report to the parent, which raises; the exit code also says it failed
        err = e if isinstance(e, AsrError) else disk_write_error(e)
        if err is not None:  # e.g. the disk filled up: the parent repeats the message, no traceback
            progress.put(("fatal", job, str(err)))
        else:
            progress.put(("error", job, traceback.format_exc()))
        raise SystemExit(1)


def _mp_context():
    return mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")


def _run_jobs(
    todo: List[Tuple[int, List[Segment], str]], opts: FbankOptions, out_dir: Path, show_progress: bool
) -> None:
    if not todo:
        return
    ctx = _mp_context()
    q = ctx.Queue()
    procs = {
        job: ctx.Process(target=_job_main, args=(job, segs, opts, out_dir, h, q), daemon=True) for job, segs, h in todo
    }
    for p in procs.values():
        p.start()
    errors: List[str] = []
    fatal: List[str] = []
    total = sum(len(segs) for _, segs, _ in todo)
    with tqdm(total=total, desc=f"fbank {out_dir}", unit="utt", disable=not show_progress, mininterval=1.0) as bar:

        def handle(msg) -> None:
            if msg[0] == "progress":
                bar.update(msg[1])
            elif msg[0] == "fatal":
                fatal.append(msg[2])
            else:
                errors.append(f"job {msg[1]}:\n{msg[2]}")

        while any(p.is_alive() for p in procs.values()):
            try:
                handle(q.get(timeout=0.2))
            except queue.Empty:
                pass
        for p in procs.values():
            p.join()
        while True:
            try:
                handle(q.get_nowait())
            except queue.Empty:
                break
    if errors:
        raise RuntimeError("feature extraction job failed (a bug, not a data problem):\n" + "\n".join(errors))
    if fatal:
        raise AsrError(fatal[0])
    dead = [f"job {job} (exit code {p.exitcode})" for job, p in procs.items() if p.exitcode != 0]
    if dead:
        raise AsrError(
            f"feature jobs died: {', '.join(dead)} (out of memory or killed?); rerun to resume — "
            f"finished jobs in {out_dir} are reused"
        )


def _remove_stale_jobs(out_dir: Path, nj: int) -> None:
    """Delete per-job outputs of an earlier run with more jobs (so the directory describes one run)."""
    job = nj + 1
    while any(p.exists() for p in _job_files(out_dir, job).values()):
        for p in _job_files(out_dir, job).values():
            p.unlink(missing_ok=True)
        job += 1


# ------------------------------------------------------------------------------------------------ driver
def _plan_jobs(
    data_dir: Path,
    out_dir: Path,
    nj: int,
    num_mel_bins: int,
    dither: float,
    sample_rate: int,
    compress: bool,
    job: Optional[int] = None,
) -> Tuple[List[Segment], FbankOptions, List[List[Segment]]]:
    """The utterances, the settings and the split into jobs; ``out_dir`` made and cleared of temporary files (of
    job ``job`` alone when given)."""
    if nj < 1:
        raise AsrError(f"nj must be >= 1, got {nj}")
    if num_mel_bins < 1 or dither < 0:
        raise AsrError(f"bad fbank settings num_mel_bins={num_mel_bins} dither={dither}")
    segs = read_segments(data_dir)
    if not segs:
        raise AsrError(f"{data_dir} has no utterances")
    opts = FbankOptions(num_mel_bins=num_mel_bins, dither=float(dither), sample_rate=sample_rate, compress=compress)
    out_dir.mkdir(parents=True, exist_ok=True)
    for tmp in _stale_temps(out_dir, job):  # left by a killed earlier run (never a final file)
        tmp.unlink(missing_ok=True)
    return segs, opts, split_jobs(segs, nj)


def _stale_temps(out_dir: Path, job: Optional[int]) -> List[Path]:
    """Temporary files of the archive writer (all jobs', or job ``job``'s alone: the other jobs may be running)."""
    if job is None:
        return list(out_dir.glob(".tmp*.feats.*"))
    names = [p.name for k, p in _job_files(out_dir, job).items() if k != "ark" and k != "scp"]
    return [*out_dir.glob(f".tmp*.feats.{job}.*"), *[t for n in names for t in out_dir.glob(f".{n}.*.tmp")]]


def compute_fbank_job(
    data_dir: PathLike,
    out_dir: PathLike,
    job: int,
    nj: int,
    num_mel_bins: int = FeatureConfig.num_mel_bins,
    dither: float = FeatureConfig.dither,
    sample_rate: int = DataConfig.sample_rate,
    compress: bool = FeatureConfig.compress,
) -> Path:
    """Job ``job`` of ``nj`` alone (Kaldi's ``JOB=1:nj`` as separate cluster jobs): its ``feats.JOB.*`` files and,
    last, its marker ``.job.JOB.json``, which is returned; :func:`compute_fbank` with the same ``nj`` then reuses
    the finished jobs and only merges. A job past the split (a set of fewer than ``nj`` utterances) writes an empty
    marker. The jobs of one ``out_dir`` may run at the same time: each touches only its own files."""
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    if not 1 <= job <= nj:
        raise AsrError(f"job must be in 1..{nj}, got {job}")
    segs, opts, jobs = _plan_jobs(data_dir, out_dir, nj, num_mel_bins, dither, sample_rate, compress, job)
    marker = _job_files(out_dir, job)["marker"]
    if job > len(jobs):
        write_json(marker, {"hash": None, "num_utts": 0, "num_excluded": 0})
        return marker
    h = _job_hash(jobs[job - 1], opts)
    if _job_is_complete(out_dir, job, h):
        log.info("fbank job %d of %d already complete in %s", job, nj, out_dir)
    else:
        _run_jobs([(job, jobs[job - 1], h)], opts, out_dir, show_progress=False)
    return marker


def compute_fbank(
    data_dir: PathLike,
    out_dir: PathLike,
    nj: int = FeatureConfig.nj,
    num_mel_bins: int = FeatureConfig.num_mel_bins,
    dither: float = FeatureConfig.dither,
    sample_rate: int = DataConfig.sample_rate,
    show_progress: bool = True,
    compress: bool = FeatureConfig.compress,
) -> FbankResult:
    """Compute log-mel fbank for every utterance of ``data_dir`` into ``out_dir`` using ``nj`` processes (the
    settings' defaults are the config's: ``features.*``, ``data.sample_rate``; ``compress``: stored as Kaldi
    compressed matrices).

    Each job writes ``feats.JOB.ark/scp`` atomically with one torch thread; finished jobs with the same utterances
    and settings are reused. Then ``feats.scp``, ``utt2num_frames`` and ``excluded.txt`` are written (atomically,
    sorted). Excluded utterances are logged with their count; if every utterance is excluded this is an
    :class:`AsrError`. See the module docstring for the exact feature settings.
    """
    t0 = time.time()
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    segs, opts, jobs = _plan_jobs(data_dir, out_dir, nj, num_mel_bins, dither, sample_rate, compress)
    todo = []
    for job, job_segs in enumerate(jobs, 1):
        h = _job_hash(job_segs, opts)
        if _job_is_complete(out_dir, job, h):
            log.info("fbank job %d of %d already complete in %s, reused", job, len(jobs), out_dir)
        else:
            todo.append((job, job_segs, h))
    _run_jobs(todo, opts, out_dir, show_progress)
    _remove_stale_jobs(out_dir, nj)  # jobs len(jobs)+1..nj (fewer utterances than nj) keep their empty markers

    scp_rows: List[Tuple[str, str]] = []
    frame_rows: List[Tuple[str, str]] = []
    excluded: List[Tuple[str, str]] = []
    for job in range(1, len(jobs) + 1):
        files = _job_files(out_dir, job)
        scp_rows += read_table(files["scp"])
        frame_rows += read_table(files["frames"])
        excluded += read_table(files["excluded"])
    covered = {k for k, _ in scp_rows} | {k for k, _ in excluded}
    if len(covered) != len(segs) or len(scp_rows) + len(excluded) != len(segs):
        raise RuntimeError(f"fbank jobs in {out_dir} do not cover the {len(segs)} utterances of {data_dir}")
    write_table(out_dir / "excluded.txt", excluded)
    write_table(out_dir / "utt2num_frames", frame_rows)
    write_table(out_dir / "feats.scp", scp_rows)
    if excluded:
        log.warning(
            "%d of %d utterances excluded from %s, reasons in %s (first: %s %s)",
            len(excluded),
            len(segs),
            data_dir,
            out_dir / "excluded.txt",
            *excluded[0],
        )
    if not scp_rows:
        raise AsrError(f"all {len(segs)} utterances of {data_dir} were excluded; see {out_dir / 'excluded.txt'}")
    num_frames = sum(int(v) for _, v in frame_rows)
    res = FbankResult(out_dir / "feats.scp", len(scp_rows), len(excluded), num_frames, time.time() - t0)
    log.info(
        "fbank: %d utterances, %d frames (%.1f h) in %s, %.1f s",
        res.num_utts,
        num_frames,
        num_frames * FRAME_SHIFT / 3600,
        out_dir,
        res.seconds,
    )
    return res
