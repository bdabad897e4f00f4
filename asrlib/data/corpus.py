"""Shared plumbing of the real-corpus preparation modules (``local/<corpus>.py``).

Every corpus module has a typed ``prepare_<corpus>(corpus_dir, out_dir, ...)`` function and a command line made by
:func:`corpus_main`, so stage 1 of every recipe (and the Snakefile's ``prepare_data`` rule) is the same call::

    python -m local.<corpus> --config recipes/<corpus>/config.yaml --out-dir data [--corpus-dir DIR] [--nj N]

``--corpus-dir`` defaults to the config's ``data.corpus_dir`` (relative to the config file's folder); when that
holds no corpus and ``data.download_url`` is set, the archive is downloaded into ``<out-dir>/download`` and
unpacked there (a ``.done`` marker makes that a one-time step).

Helpers here: lhotse manifests -> Kaldi data dirs (:func:`write_kaldi_dir`), subsets of a data dir
(:func:`subset_data_dir`), corpus-level exclusions (:func:`write_excluded`), atomic manifest writes, the check of
``data.speed_perturb`` factors.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tarfile
import urllib.request
import zipfile
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    TypeVar,
    Union,
)

from asrlib.cli import add_config_args, run_main, setup_logging
from asrlib.config import DataConfig, load_config
from asrlib.data.kaldi_dir import byte_key, spk2utt_rows
from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import atomic_path
from asrlib.io.stage import is_done, mark_done
from asrlib.io.tables import read_table, write_table

if TYPE_CHECKING:
    import lhotse

log = logging.getLogger(__name__)

T = TypeVar("T")
PrepareFn = Callable[[Path, Path, DataConfig, int], object]


# ------------------------------------------------------------------------------------------------ corpus location
def resolve_corpus_dir(corpus_dir: str, config_path: Optional[PathLike]) -> Optional[Path]:
    """``corpus_dir`` as a path: absolute as is, relative to the config file's folder, ``""`` -> None."""
    if not corpus_dir:
        return None
    p = Path(corpus_dir).expanduser()
    if not p.is_absolute() and config_path is not None:
        p = Path(config_path).resolve().parent / p
    return p


def download_corpus(url: str, download_dir: PathLike) -> Path:
    """Download ``url`` (http(s) or file://) into ``download_dir`` and unpack it (tar.* or zip); returns the folder
    it was unpacked into. Done once: a ``.done`` marker (written last) makes a rerun return at once."""
    download_dir = Path(download_dir)
    name = url.rstrip("/").rsplit("/", 1)[-1] or "corpus"
    unpacked = download_dir / (name.split(".")[0] + ".unpacked")
    marker = unpacked / ".done"
    if is_done(marker):
        return unpacked
    download_dir.mkdir(parents=True, exist_ok=True)
    archive = download_dir / name
    if not archive.is_file():
        log.info("downloading %s to %s", url, archive)
        try:
            with atomic_path(archive) as tmp, urllib.request.urlopen(url, timeout=60) as r, open(tmp, "wb") as f:
                shutil.copyfileobj(r, f, length=1 << 20)
        except OSError as e:  # URLError, HTTPError, timeouts are OSErrors
            raise AsrError(
                f"could not download {url}: {e}. Download it by hand and set data.corpus_dir "
                "(or --corpus-dir) to the unpacked folder"
            ) from None
    if unpacked.exists():
        shutil.rmtree(unpacked)  # a half-unpacked earlier attempt
    tmp_dir = download_dir / f".{unpacked.name}.tmp"
    if tmp_dir.exists():
        shutil.rmtree(tmp_dir)
    tmp_dir.mkdir()
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as z:
                for member in z.namelist():
                    _check_member(member, archive)
                z.extractall(tmp_dir)
        elif tarfile.is_tarfile(archive):
            with tarfile.open(archive) as t:
                for member in t.getmembers():
                    _check_member(member.name, archive)
                    if member.issym() or member.islnk():
                        raise AsrError(f"{archive}: refusing to unpack link '{member.name}'")
                t.extractall(tmp_dir)
        else:
            raise AsrError(f"{archive} is neither a tar nor a zip archive; delete it and check data.download_url")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError) as e:
        raise AsrError(f"{archive} is corrupt ({e}); delete it and run again to re-download") from None
    os.replace(tmp_dir, unpacked)
    mark_done(marker, {"url": url})
    return unpacked


def _check_member(name: str, archive: Path) -> None:
    if name.startswith("/") or ".." in Path(name).parts:
        raise AsrError(f"{archive}: unsafe path '{name}' in the archive; refusing to unpack it")


def find_dir(root: Path, is_corpus: Callable[[Path], bool], max_depth: int = 4) -> Optional[Path]:
    """The first folder under ``root`` (breadth first, ``root`` included) for which ``is_corpus`` holds."""
    level = [root]
    for _ in range(max_depth + 1):
        nxt: List[Path] = []
        for d in level:
            if is_corpus(d):
                return d
            nxt += sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))
        level = nxt
    return None


def locate_corpus(
    data: DataConfig,
    config_path: Optional[PathLike],
    cli_dir: Optional[Path],
    out_dir: Path,
    is_corpus: Callable[[Path], bool],
    what: str,
) -> Path:
    """The corpus folder: ``--corpus-dir``, else ``data.corpus_dir``, else (or when that holds no corpus) a download
    of ``data.download_url``. AsrError saying what to set when none of them gives a corpus."""
    given = cli_dir if cli_dir is not None else resolve_corpus_dir(data.corpus_dir, config_path)
    if given is not None:
        found = find_dir(given, is_corpus) if given.is_dir() else None
        if found is not None:
            return found
        if not data.download_url or cli_dir is not None:
            state = "does not exist" if not given.exists() else f"holds no {what}"
            raise AsrError(
                f"corpus folder {given} {state}; point --corpus-dir / data.corpus_dir at the {what}"
                + ("" if data.download_url else " or set data.download_url to download it")
            )
    if not data.download_url:
        raise AsrError(f"no corpus given: set data.corpus_dir (or --corpus-dir) to the {what}, or data.download_url")
    unpacked = download_corpus(data.download_url, out_dir / "download")
    found = find_dir(unpacked, is_corpus)
    if found is None:
        raise AsrError(f"the archive from {data.download_url} (unpacked in {unpacked}) holds no {what}")
    return found


# ------------------------------------------------------------------------------------------------ writing
def save_manifest(manifest, path: PathLike) -> None:
    """Write a lhotse manifest atomically (the temp name keeps the suffix lhotse picks the format from)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp{os.getpid()}.{path.name}")
    try:
        manifest.to_file(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_manifest(path: PathLike, kind=None):
    """A lhotse manifest (``.jsonl`` or ``.jsonl.gz``; ``kind``: RecordingSet, SupervisionSet, CutSet, or None for
    whatever the file holds), read completely; anything unreadable is an :class:`AsrError` naming the file and,
    where one line is at fault, the line."""
    path = Path(path)
    if not path.is_file():
        raise AsrError(f"manifest {path} does not exist")
    try:
        if kind is None:
            from lhotse import load_manifest as lhotse_load

            return lhotse_load(path)
        return kind.from_file(path)
    except Exception as e:  # noqa: BLE001 - gzip, JSON and lhotse's own errors all mean "not a manifest"
        line, reason = _bad_manifest_line(path)
        where = f"{path}:{line}" if line else str(path)
        why = reason or f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
        raise AsrError(f"{where}: not a readable lhotse manifest ({why})") from None


def _bad_manifest_line(path: Path) -> Tuple[int, str]:
    """The first line of a JSON-lines manifest that is not a JSON object, with why (0, "" if every line is)."""
    import gzip
    import json

    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    if not isinstance(json.loads(raw), dict):
                        return n, "not a JSON object"
                except ValueError as e:
                    return n, f"not JSON: {str(e)[:100]}"
    except Exception as e:  # noqa: BLE001 - a damaged gzip stream: OSError, EOFError, zlib.error
        return 0, f"damaged file: {' '.join(str(e).split())[:150]}"
    return 0, ""


def write_excluded(data_dir: PathLike, rows: Iterable[Tuple[str, str]]) -> int:
    """Write ``data_dir/excluded.txt`` (``<item> <reason>``, sorted); returns the count. The validation step keeps
    these lines (items not in the directory are carried over)."""
    rows = [(k, " ".join(v.split())) for k, v in rows]
    write_table(Path(data_dir) / "excluded.txt", rows)
    return len(rows)


def write_tables(
    data_dir: PathLike,
    wav: Mapping[str, str],
    text: Mapping[str, str],
    utt2spk: Mapping[str, str],
    segments: Optional[Mapping[str, Tuple[str, float, float]]] = None,
) -> None:
    """Write a Kaldi data dir (``wav.scp text utt2spk spk2utt`` [+ ``segments``]), each file atomic and sorted.

    Utterance ids must start with their speaker id (checked later by the validation step)."""
    data_dir = Path(data_dir)
    utts = set(segments) if segments is not None else set(wav)
    for name, table in (("text", text), ("utt2spk", utt2spk)):
        if set(table) != utts:
            diff = sorted(set(table) ^ utts, key=byte_key)[:5]
            raise AsrError(f"{data_dir}: {name} and the utterance list differ, e.g. {diff}")
    data_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("segments", "feats.scp", "cmvn.scp", "utt2dur", "utt2num_frames", ".validated"):
        if (data_dir / stale).exists() and (stale != "segments" or segments is None):
            (data_dir / stale).unlink()
    write_table(data_dir / "wav.scp", wav.items())
    if segments is not None:
        write_table(data_dir / "segments", [(u, f"{r} {s:.3f} {e:.3f}") for u, (r, s, e) in segments.items()])
    write_table(data_dir / "text", text.items())
    write_table(data_dir / "utt2spk", utt2spk.items())
    write_table(data_dir / "spk2utt", spk2utt_rows(utt2spk))


def write_kaldi_dir(
    data_dir: PathLike,
    recordings: "lhotse.RecordingSet",
    supervisions: "lhotse.SupervisionSet",
    speaker: Optional[Callable[["lhotse.SupervisionSegment"], str]] = None,
) -> int:
    """Kaldi data dir from lhotse manifests; returns the number of utterances.

    ``wav.scp`` holds each recording's file path (single-source, single-channel file recordings only); a
    ``segments`` file is written unless every supervision covers its whole recording and has the recording's id.
    ``speaker(sup)`` gives the speaker id (default ``sup.speaker``).
    """
    wav: Dict[str, str] = {}
    for rec in recordings:
        if len(rec.sources) != 1 or rec.sources[0].type != "file" or rec.num_channels != 1:
            raise AsrError(
                f"recording '{rec.id}' is not a single mono file ({rec.sources}); convert it to a mono WAV file first"
            )
        wav[rec.id] = str(Path(rec.sources[0].source).resolve())
    text: Dict[str, str] = {}
    utt2spk: Dict[str, str] = {}
    segs: Dict[str, Tuple[str, float, float]] = {}
    whole = True
    for sup in supervisions:
        rec = recordings[sup.recording_id]
        spk = speaker(sup) if speaker else sup.speaker
        if not spk:
            raise AsrError(f"supervision '{sup.id}' has no speaker")
        text[sup.id], utt2spk[sup.id] = sup.text or "", spk
        segs[sup.id] = (sup.recording_id, sup.start, sup.end)
        whole &= sup.id == sup.recording_id and sup.start == 0 and abs(sup.duration - rec.duration) < 1e-3
    if whole:
        write_tables(data_dir, {u: wav[u] for u in text}, text, utt2spk)
    else:
        used = {r for r, _, _ in segs.values()}
        write_tables(data_dir, {r: p for r, p in wav.items() if r in used}, text, utt2spk, segs)
    return len(text)


def hold_out_speakers(
    train: Mapping[str, T], test: Mapping[str, T], dev_speakers: Sequence[str], max_speakers: int, speaker: Callable
) -> Dict[str, Dict[str, T]]:
    """``{"train", "dev", "test": {utt: item}}``: the training utterances of ``dev_speakers`` (``speaker(item)``)
    held out as dev; with ``max_speakers`` > 0 only the first that many speakers (sorted) of each set kept."""
    if max_speakers < 0:
        raise AsrError(f"data.max_speakers must be >= 0, got {max_speakers}")
    held = set(dev_speakers)
    split = {
        "train": {u: v for u, v in train.items() if speaker(v) not in held},
        "dev": {u: v for u, v in train.items() if speaker(v) in held},
        "test": dict(test),
    }
    if max_speakers:
        for s, utts in split.items():
            keep = set(sorted({speaker(v) for v in utts.values()})[:max_speakers])
            split[s] = {u: v for u, v in utts.items() if speaker(v) in keep}
    return split


def whole_file_manifests(
    entries: Iterable[Tuple[str, Path, Dict[str, object]]], sample_rate: int, bad: List[Tuple[str, str]]
) -> Optional[Dict[str, object]]:
    """``{"recordings": RecordingSet, "supervisions": SupervisionSet}`` of whole-file utterances ``(id, audio file,
    supervision fields: text, speaker, gender, custom, ...)``, read where they lie; a file soundfile cannot read, or
    not ``sample_rate`` mono, is listed in ``bad`` with its reason instead. None when no utterance is left."""
    import soundfile as sf
    from lhotse import Recording, RecordingSet, SupervisionSegment, SupervisionSet

    recs, sups = [], []
    for uid, audio, fields in entries:
        try:
            info = sf.info(str(audio))
        except RuntimeError as e:
            bad.append((uid, f"unreadable: {audio}: {str(e).splitlines()[-1][:100]}"))
            continue
        if info.samplerate != sample_rate or info.channels != 1:
            got = f"{info.samplerate} Hz, {info.channels} channel(s)"
            bad.append((uid, f"format: {got}, expected {sample_rate} Hz mono (data.sample_rate)"))
            continue
        rec = Recording.from_file(audio, recording_id=uid)
        recs.append(rec)
        sups.append(SupervisionSegment(id=uid, recording_id=uid, start=0.0, duration=rec.duration, channel=0, **fields))
    if not recs:
        return None
    return {"recordings": RecordingSet.from_recordings(recs), "supervisions": SupervisionSet.from_segments(sups)}


def load_set_manifests(mdir: PathLike, name: str, sets: Sequence[str]) -> Dict[str, Dict[str, object]]:
    """The manifests :func:`write_sets` saved: ``{set: {"recordings": ..., "supervisions": ...}}``."""
    from lhotse import RecordingSet, SupervisionSet

    return {
        s: {
            "recordings": load_manifest(Path(mdir) / f"{name}_recordings_{s}.jsonl.gz", RecordingSet),
            "supervisions": load_manifest(Path(mdir) / f"{name}_supervisions_{s}.jsonl.gz", SupervisionSet),
        }
        for s in sets
    }


def write_sets(out_dir: PathLike, name: str, manifests: Mapping[str, Mapping[str, object]], perturb: bool) -> None:
    """Save each set's manifests (``out_dir/manifests/<name>_{recordings,supervisions}_<set>.jsonl.gz``) and write
    its Kaldi data dir ``out_dir/<set>``; with ``perturb`` the training set's goes to ``train_nosp`` (the caller
    writes its speed-perturbed copy to ``train``: asrlib.data.speed_perturb)."""
    out_dir = Path(out_dir)
    for s, m in manifests.items():
        save_manifest(m["recordings"], out_dir / "manifests" / f"{name}_recordings_{s}.jsonl.gz")
        save_manifest(m["supervisions"], out_dir / "manifests" / f"{name}_supervisions_{s}.jsonl.gz")
        write_kaldi_dir(out_dir / ("train_nosp" if s == "train" and perturb else s), m["recordings"], m["supervisions"])


def read_kaldi_tables(data_dir: PathLike) -> Dict[str, Dict[str, str]]:
    """``{name: {key: value}}`` for the tables of a data dir that exist (wav.scp, segments, text, utt2spk)."""
    d = Path(data_dir)
    return {n: dict(read_table(d / n)) for n in ("wav.scp", "segments", "text", "utt2spk") if (d / n).is_file()}


def subset_data_dir(src: PathLike, dst: PathLike, keep: Union[Set[str], Callable[[str, str], bool]]) -> int:
    """Copy the utterances of ``src`` selected by ``keep`` (a set of utterance ids, or ``keep(utt, speaker)``) into
    ``dst`` (tables only; audio paths are shared). Returns the number kept; zero is an AsrError."""
    t = read_kaldi_tables(src)
    sel = keep if callable(keep) else (lambda u, s: u in keep)  # noqa: E731
    utts = {u for u, s in t["utt2spk"].items() if sel(u, s)}
    if not utts:
        raise AsrError(f"no utterance of {src} selected for {dst}")
    pick = lambda name: {k: v for k, v in t[name].items() if k in utts}  # noqa: E731
    if "segments" in t:
        segs = {}
        for u, v in pick("segments").items():
            r, s, e = v.split()
            segs[u] = (r, float(s), float(e))
        recs = {r for r, _, _ in segs.values()}
        write_tables(dst, {r: p for r, p in t["wav.scp"].items() if r in recs}, pick("text"), pick("utt2spk"), segs)
    else:
        write_tables(dst, pick("wav.scp"), pick("text"), pick("utt2spk"))
    return len(utts)


# ------------------------------------------------------------------------------------------------ command line
def corpus_main(
    prepare: PrepareFn,
    description: str,
    is_corpus: Callable[[Path], bool],
    what: str,
    argv: Optional[List[str]] = None,
    needs_corpus: bool = True,
) -> None:
    """The command line shared by every ``local/<corpus>.py``: parse, find (or download) the corpus, prepare."""

    def main(args_in: Optional[List[str]]) -> int:
        p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
        add_config_args(p, required=False, help="recipe YAML; its data section gives corpus_dir, download_url, ...")
        p.add_argument("--out-dir", type=Path, required=True, help="the recipe's data folder")
        p.add_argument("--corpus-dir", type=Path, help="the corpus (default: data.corpus_dir of the config)")
        p.add_argument("--nj", type=int, default=2, help="parallel jobs")
        a = p.parse_args(args_in)
        if a.overrides and not a.config:
            raise AsrError("--set needs --config (the overrides change that config's values)")
        data = load_config(a.config, a.overrides).data if a.config else DataConfig()
        setup_logging()
        out_dir = a.out_dir.resolve()
        corpus = locate_corpus(data, a.config, a.corpus_dir, out_dir, is_corpus, what) if needs_corpus else a.corpus_dir
        if a.nj < 1:
            raise AsrError(f"--nj must be >= 1, got {a.nj}")
        prepare(corpus, out_dir, data, a.nj)
        return 0

    run_main(main, argv)


def check_speed_factors(factors: Sequence[float]) -> List[float]:
    """``data.speed_perturb`` as floats in (0.5, 2); an empty list or ``[1.0]`` means no perturbation."""
    out = [float(f) for f in factors]
    bad = [f for f in out if not 0.5 < f < 2.0]
    if bad:
        raise AsrError(f"data.speed_perturb factors must lie in (0.5, 2), got {bad}")
    if len(set(out)) != len(out):
        raise AsrError(f"data.speed_perturb has a repeated factor: {out}")
    return out
