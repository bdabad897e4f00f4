"""Kaldi data directories (``wav.scp``, ``text``, ``utt2spk``, ``spk2utt``, optional ``segments``/``feats.scp``).

Writing always goes through :func:`write_data_dir` (atomic, C byte-order sorted, ``spk2utt`` derived from
``utt2spk``). :func:`inspect_data_dir` reads a directory *tolerantly* and lists every structural problem it finds
(with the utterances a repair would have to drop); :func:`validate_data_dir` turns those problems into one clear
:class:`AsrError`; ``asrlib.data.validate.clean_data_dir`` uses them to repair (``--fix``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from asrlib.errors import AsrError, PathLike
from asrlib.io.tables import read_table, write_table

FIX_HINT = "python -m steps.validate_data_dir --data-dir {dir} --fix"


def byte_key(s: str) -> bytes:
    """Sort key giving Kaldi's C-locale byte order."""
    return s.encode("utf-8", errors="surrogateescape")


# ------------------------------------------------------------------------------------------------ writing
def write_data_dir(dir: PathLike, wav: Mapping[str, str], text: Mapping[str, str], utt2spk: Mapping[str, str]) -> None:
    """Write ``wav.scp``, ``text``, ``utt2spk`` and ``spk2utt`` into ``dir`` (each atomically, sorted).

    All three mappings must have the same utterance ids; utterance ids should start with their speaker id so that
    sorting by utterance also sorts by speaker (checked by :func:`validate_data_dir`).
    """
    dir = Path(dir)
    keys = set(wav)
    for name, table in (("text", text), ("utt2spk", utt2spk)):
        if set(table) != keys:
            diff = sorted(set(table) ^ keys, key=byte_key)[:5]
            raise AsrError(f"write_data_dir({dir}): {name} and wav.scp have different utterance ids, e.g. {diff}")
    bad = [k for k in keys if not k or any(c.isspace() for c in k)]
    if bad:
        raise AsrError(f"write_data_dir({dir}): utterance ids must be non-empty without whitespace: {bad[:5]}")
    dir.mkdir(parents=True, exist_ok=True)
    write_table(dir / "wav.scp", wav.items())
    write_table(dir / "text", text.items())
    write_table(dir / "utt2spk", utt2spk.items())
    write_table(dir / "spk2utt", spk2utt_rows(utt2spk))


def spk2utt_rows(utt2spk: Mapping[str, str]) -> List[Tuple[str, str]]:
    """``spk2utt`` rows (speaker, space-joined sorted utterances) derived from ``utt2spk``."""
    by_spk: Dict[str, List[str]] = {}
    for utt, spk in utt2spk.items():
        by_spk.setdefault(spk, []).append(utt)
    return [(spk, " ".join(sorted(utts, key=byte_key))) for spk, utts in by_spk.items()]


# ------------------------------------------------------------------------------------------------ reading
@dataclass
class KaldiDataDir:
    """A data directory read into memory (dicts keyed by utterance id; ``wav`` keyed by recording id)."""

    path: Path
    wav: Dict[str, str]
    text: Dict[str, str]
    utt2spk: Dict[str, str]
    spk2utt: Dict[str, List[str]]
    segments: Optional[Dict[str, Tuple[str, float, float]]] = None  # utt -> (recording, start, end)
    feats: Optional[Dict[str, str]] = None  # feats.scp

    @property
    def utterances(self) -> List[str]:
        """Utterance ids in C byte order."""
        return sorted(self.utt2spk, key=byte_key)


def read_data_dir(dir: PathLike, validate: bool = True) -> KaldiDataDir:
    """Read a data directory; with ``validate`` (default) it is first checked by :func:`validate_data_dir`."""
    dir = Path(dir)
    if validate:
        validate_data_dir(dir)
    elif not (dir / "wav.scp").is_file():
        raise AsrError(f"{dir}: not a data directory (no wav.scp)")

    def table(name: str) -> Dict[str, str]:
        return {k: v for k, v in read_table(dir / name)} if (dir / name).is_file() else {}

    utt2spk = table("utt2spk")
    spk2utt = {k: v.split() for k, v in table("spk2utt").items()}
    segments = None
    if (dir / "segments").is_file():
        segments = {k: _parse_segment(v, dir / "segments", k) for k, v in table("segments").items()}
    feats = table("feats.scp") if (dir / "feats.scp").is_file() else None
    return KaldiDataDir(dir, table("wav.scp"), table("text"), utt2spk, spk2utt, segments, feats)


def _parse_segment(value: str, path: Path, key: str) -> Tuple[str, float, float]:
    parts = value.split()
    try:
        if len(parts) != 3:
            raise ValueError
        rec, start, end = parts[0], float(parts[1]), float(parts[2])
    except ValueError:
        raise AsrError(
            f"{path}: bad line for '{key}': expected '<utt> <recording> <start> <end>', got '{key} {value}'"
        ) from None
    if not 0 <= start < end:
        raise AsrError(f"{path}: segment '{key}' has start {start} and end {end}; need 0 <= start < end")
    return rec, start, end


# ------------------------------------------------------------------------------------------------ checking
@dataclass
class TableLine:
    """One line of a table; ``value`` is None when the line is not valid UTF-8."""

    lineno: int
    key: str
    value: Optional[str]


def read_raw_table(path: Path) -> List[TableLine]:
    """Read a table without failing on bad lines (non-UTF-8 lines get ``value=None``); blank lines skipped."""
    rows: List[TableLine] = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            raw = raw.rstrip(b"\r\n")
            if not raw.strip():
                continue
            parts = raw.split(maxsplit=1)
            key = parts[0].decode("utf-8", errors="backslashreplace")
            try:
                value: Optional[str] = parts[1].decode("utf-8").strip() if len(parts) > 1 else ""
                parts[0].decode("utf-8")
            except UnicodeDecodeError:
                value = None
            rows.append(TableLine(lineno, key, value))
    return rows


@dataclass
class Problem:
    """A problem found in a data directory.

    ``utts`` are the utterances a repair excludes (with reason ``reason``); ``fixable=False`` problems cannot be
    repaired automatically; ``per_utt=True`` problems are ordinary per-utterance exclusions (e.g. a missing
    transcript) that cleaning handles even without ``--fix``.
    """

    file: str
    message: str
    reason: str = ""
    utts: Tuple[str, ...] = ()
    fixable: bool = True
    per_utt: bool = False


@dataclass
class RawDataDir:
    """A tolerant reading of a data directory: first occurrence of each key wins; lines kept for repair."""

    path: Path
    tables: Dict[str, List[TableLine]] = field(default_factory=dict)

    def dict(self, name: str) -> Dict[str, Optional[str]]:
        out: Dict[str, Optional[str]] = {}
        for line in self.tables.get(name, []):
            out.setdefault(line.key, line.value)
        return out

    def has(self, name: str) -> bool:
        return name in self.tables


REQUIRED = ("wav.scp", "utt2spk", "text")
PER_UTT_OPTIONAL = ("feats.scp", "utt2dur", "utt2num_frames", "utt2lang", "utt2gender")
OPTIONAL = ("spk2utt", "segments", "cmvn.scp") + PER_UTT_OPTIONAL


def inspect_data_dir(dir: PathLike) -> Tuple[RawDataDir, List[Problem]]:
    """Read ``dir`` tolerantly and return it together with every structural problem found."""
    dir = Path(dir)
    if not dir.is_dir():
        raise AsrError(f"data directory {dir} does not exist")
    missing = [n for n in REQUIRED if not (dir / n).is_file()]
    if missing:
        raise AsrError(
            f"{dir}: missing {', '.join(missing)}; a data directory needs {', '.join(REQUIRED)} "
            "(+ spk2utt, which --fix can regenerate)"
        )
    raw = RawDataDir(dir)
    for name in REQUIRED + OPTIONAL:
        if (dir / name).is_file():
            try:
                raw.tables[name] = read_raw_table(dir / name)
            except PermissionError:
                raise AsrError(f"{dir / name}: permission denied; make it readable (chmod +r)") from None
    problems: List[Problem] = []
    for name, lines in raw.tables.items():
        problems += _table_problems(dir, name, lines)

    segmented = raw.has("segments")
    utt_file = "segments" if segmented else "wav.scp"
    utts = set(raw.dict(utt_file))
    utt2spk = raw.dict("utt2spk")
    text = raw.dict("text")
    for u in sorted(utts - set(utt2spk), key=byte_key):
        problems.append(
            Problem("utt2spk", f"utterance '{u}' is in {utt_file} but missing in utt2spk", "missing-in-utt2spk", (u,))
        )
    for u in sorted(set(utt2spk) - utts, key=byte_key):
        problems.append(
            Problem(
                utt_file, f"utterance '{u}' is in utt2spk but missing in {utt_file}", f"missing-in-{utt_file}", (u,)
            )
        )
    for u in sorted((utts & set(utt2spk)) - set(text), key=byte_key):
        problems.append(
            Problem("text", f"utterance '{u}' has no line in text", "missing-transcript", (u,), per_utt=True)
        )
    for u in sorted(set(text) - utts - set(utt2spk), key=byte_key):
        problems.append(
            Problem(
                "text",
                f"utterance '{u}' is in text but missing in {utt_file} and utt2spk",
                f"missing-in-{utt_file}",
                (u,),
            )
        )
    if segmented:
        recs = set(raw.dict("wav.scp"))
        for line in raw.tables["segments"]:
            rec = (line.value or "").split()[:1]
            if rec and rec[0] not in recs:
                problems.append(
                    Problem(
                        "segments",
                        f"segment '{line.key}' refers to recording '{rec[0]}' which is missing in wav.scp",
                        "missing-recording",
                        (line.key,),
                    )
                )
    problems += _spk2utt_problems(raw, utt2spk)
    problems += _sort_consistency_problems(utt2spk)
    for name in PER_UTT_OPTIONAL:
        if not raw.has(name):
            continue
        keys = set(raw.dict(name))
        for u in sorted((utts & set(utt2spk)) - keys, key=byte_key):
            problems.append(Problem(name, f"utterance '{u}' is missing in {name}", f"missing-in-{name}", (u,)))
        extra = sorted(keys - utts, key=byte_key)
        if extra:
            problems.append(
                Problem(
                    name,
                    f"{name} has {len(extra)} utterance(s) not in {utt_file}, e.g. '{extra[0]}'",
                    f"extra-in-{name}",
                )
            )
    return raw, problems


def _table_problems(dir: Path, name: str, lines: List[TableLine]) -> List[Problem]:
    problems: List[Problem] = []
    path = dir / name
    seen: Dict[str, int] = {}
    unsorted_at: Optional[TableLine] = None
    prev: Optional[TableLine] = None
    for line in lines:
        if line.value is None:
            if name == "text":
                problems.append(
                    Problem(
                        name,
                        f"{path}:{line.lineno}: transcript of '{line.key}' is not valid UTF-8",
                        "non-utf8-transcript",
                        (line.key,),
                        per_utt=True,
                    )
                )
            else:
                problems.append(
                    Problem(
                        name,
                        f"{path}:{line.lineno}: line for '{line.key}' is not valid UTF-8",
                        f"non-utf8-in-{name}",
                        (line.key,),
                    )
                )
        elif line.value == "" and name not in ("text", "spk2utt"):
            problems.append(
                Problem(name, f"{path}:{line.lineno}: '{line.key}' has no value", f"empty-entry-in-{name}", (line.key,))
            )
        elif name == "segments":
            try:
                _parse_segment(line.value, path, line.key)
            except AsrError as e:
                problems.append(Problem(name, str(e), "bad-segment", (line.key,)))
        if line.key in seen:
            problems.append(
                Problem(
                    name,
                    f"{path}: duplicate id '{line.key}' (lines {seen[line.key]} and {line.lineno})",
                    "duplicate-id",
                    (line.key,) if name != "spk2utt" else (),
                )
            )
        else:
            seen[line.key] = line.lineno
        if unsorted_at is None and prev is not None and byte_key(line.key) < byte_key(prev.key):
            unsorted_at = line
            problems.append(
                Problem(
                    name,
                    f"{path} is not sorted: line {line.lineno} '{line.key}' comes after "
                    f"'{prev.key}' (sort with LC_ALL=C sort, or use --fix)",
                    "unsorted",
                )
            )
        prev = line
    return problems


def _spk2utt_problems(raw: RawDataDir, utt2spk: Dict[str, Optional[str]]) -> List[Problem]:
    if not raw.has("spk2utt"):
        return [
            Problem("spk2utt", f"{raw.path / 'spk2utt'} is missing (--fix regenerates it from utt2spk)", "no-spk2utt")
        ]
    problems: List[Problem] = []
    spk2utt = raw.dict("spk2utt")
    inverse: Dict[str, str] = {}
    for spk, utts in spk2utt.items():
        for u in (utts or "").split():
            inverse.setdefault(u, spk)
    for u, spk in utt2spk.items():
        if spk is None:
            continue
        if u not in inverse:
            problems.append(
                Problem(
                    "spk2utt",
                    f"utt2spk/spk2utt inconsistent: '{u}' (speaker '{spk}') is in utt2spk but not in spk2utt",
                    "spk2utt-inconsistent",
                )
            )
        elif inverse[u] != spk:
            problems.append(
                Problem(
                    "spk2utt",
                    f"utt2spk/spk2utt inconsistent: '{u}' has speaker '{spk}' in utt2spk but '{inverse[u]}' in spk2utt",
                    "spk2utt-inconsistent",
                )
            )
    for u in sorted(set(inverse) - set(utt2spk), key=byte_key):
        problems.append(
            Problem(
                "spk2utt",
                f"utt2spk/spk2utt inconsistent: '{u}' is in spk2utt (speaker '{inverse[u]}') but not in utt2spk",
                "spk2utt-inconsistent",
            )
        )
    return problems


def _sort_consistency_problems(utt2spk: Dict[str, Optional[str]]) -> List[Problem]:
    """Kaldi requires that sorting by utterance also sorts by speaker (utterance ids start with the speaker id)."""
    pairs = sorted(((u, s) for u, s in utt2spk.items() if s), key=lambda p: byte_key(p[0]))
    for (u1, s1), (u2, s2) in zip(pairs, pairs[1:]):
        if byte_key(s2) < byte_key(s1):
            return [
                Problem(
                    "utt2spk",
                    f"utterance order and speaker order disagree ('{u1}' of speaker '{s1}' "
                    f"sorts before '{u2}' of speaker '{s2}'); make every utterance id start with its "
                    "speaker id followed by '-' (e.g. '<spk>-<n>')",
                    "speaker-order",
                    fixable=False,
                )
            ]
    return []


def format_problems(dir: Path, problems: List[Problem], limit: int = 10) -> str:
    """Readable summary of ``problems`` (first ``limit``) with the command that repairs them."""
    lines = [f"  - {p.message}" for p in problems[:limit]]
    if len(problems) > limit:
        lines.append(f"  ... and {len(problems) - limit} more")
    msg = f"data directory {dir} has {len(problems)} problem(s):\n" + "\n".join(lines)
    if all(p.fixable for p in problems):
        msg += (
            f"\nTo sort the files, regenerate spk2utt and exclude inconsistent utterances (listed in "
            f"excluded.txt) run: {FIX_HINT.format(dir=dir)}"
        )
    else:
        msg += "\nSome of these cannot be repaired automatically; correct the files by hand."
    return msg


def validate_data_dir(dir: PathLike) -> None:
    """Raise :class:`AsrError` naming the file, the id and the remedy if ``dir`` is not a valid data directory.

    Checks: required files, UTF-8, duplicate ids, C byte-order sorting, every utterance present in wav.scp (or
    segments), utt2spk and text, spk2utt the exact inverse of utt2spk, and utterance/speaker order agreement.
    """
    dir = Path(dir)
    _, problems = inspect_data_dir(dir)
    if problems:
        raise AsrError(format_problems(dir, problems))
