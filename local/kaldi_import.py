"""Existing Kaldi data dirs in and out of the pipeline.

    # stage 1 of a recipe with data.corpus: kaldi_import (corpus_dir holds the Kaldi dirs train/ dev/ test/ ...):
    python -m local.kaldi_import --config recipes/<name>/config.yaml --out-dir data
    # one dir:
    python -m local.kaldi_import import --src /path/kaldi/data/train --dst data/train [--fix] [--base-dir DIR]
    python -m local.kaldi_import export --src data/train --dst kaldi/train [--feats-dir data/fbank/train]
    python -m local.kaldi_import check --dir kaldi/train       # the checks of Kaldi's utils/validate_data_dir.sh

**Import** reads ``wav.scp`` (plain paths, ``command |`` pipes, ``foo.ark:123`` wave-archive entries), optional
``segments``, ``text``, ``utt2spk``/``spk2utt``, optional ``feats.scp``/``cmvn.scp``. The features stage reads
plain files only, so every pipe or archive entry is *materialised* and its WAV output written to
``<dst>/wav/<recording>.wav``. A pipe runs a program named by whoever wrote the ``wav.scp``: it is refused (an error
naming the file and line) unless the user allows pipes (``--allow-pipes``, ``data.allow_pipes: true``); an allowed
command runs once, without a shell when it is one plain command (no ``|``, ``;``, ``&``, redirections, ``$``,
backquotes or wildcards; else ``bash -c`` with ``pipefail``), in ``--base-dir``, for at most
:data:`PIPE_TIMEOUT_S` seconds; a failing command, non-WAV output or a missing file
excludes the recording's utterances, each listed in ``<dst>/excluded.txt`` with the reason. A source dir that is
unsorted or inconsistent (utt2spk vs spk2utt, utterances missing from text/wav.scp/segments, duplicates) is an
error that lists the problems; with ``--fix`` it is repaired (sorted, spk2utt regenerated) and the inconsistent
utterances are excluded and listed. ``feats.scp``/``cmvn.scp`` are checked to be readable and carried over with
absolute paths (the pipeline computes its own features; they are kept for reference and for re-export).

**Export** writes a dir Kaldi's tools read: absolute audio paths, ``segments`` when present, ``utt2dur``, and with
``--feats-dir`` our ``feats.scp`` (Kaldi binary matrices) plus a per-speaker ``cmvn.scp`` (each speaker points at
the global CMVN stats, so ``apply-cmvn --utt2spk`` works). Utterances without features are left out and listed.
The result is checked like ``utils/validate_data_dir.sh`` (sorted, consistent, no missing entries).
"""

from __future__ import annotations

import argparse
import io
import logging
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from asrlib.config import DataConfig
from asrlib.data.corpus import corpus_main, write_excluded, write_tables
from asrlib.data.kaldi_dir import byte_key, format_problems, inspect_data_dir
from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import atomic_path
from asrlib.io.stage import is_done, mark_done
from asrlib.io.tables import read_table, write_table

log = logging.getLogger("local.kaldi_import")

PIPE_TIMEOUT_S = 600
SHELL_SYNTAX = set("|&;<>()$`*?~{}[]\n")  # a command with any of these needs a shell


# ------------------------------------------------------------------------------------------------ audio entries
def wav_entry_kind(entry: str) -> str:
    """``pipe`` (``cmd |``), ``ark`` (``file.ark:offset``) or ``file``."""
    entry = entry.strip()
    if entry.endswith("|"):
        return "pipe"
    head, _, tail = entry.rpartition(":")
    if head and tail.isdigit() and not Path(entry).exists():
        return "ark"
    return "file"


def pipe_argv(cmd: str) -> Optional[List[str]]:
    """The argument list of a wav.scp command that is one plain program call (run without a shell), or None when it
    needs a shell (pipes inside it, ``;``, redirections, ``$``, wildcards, ... or unbalanced quotes)."""
    if SHELL_SYNTAX & set(cmd):
        return None
    try:
        return shlex.split(cmd) or None
    except ValueError:
        return None


def read_entry_audio(entry: str, base_dir: Path) -> Tuple[Optional[np.ndarray], int, str]:
    """(int16 samples (n,) or (n, channels), sample rate, "") or (None, 0, reason) for one wav.scp entry."""
    import soundfile as sf

    kind = wav_entry_kind(entry)
    if kind == "pipe":
        cmd = entry.strip()[:-1].strip()
        argv = pipe_argv(cmd)
        try:
            r = subprocess.run(
                argv or ["bash", "-c", f"set -o pipefail; {cmd}"],
                cwd=base_dir,
                capture_output=True,
                timeout=PIPE_TIMEOUT_S,
            )
        except FileNotFoundError:
            return None, 0, f"pipe-failed: program not found: {cmd}"
        except subprocess.TimeoutExpired:
            return None, 0, f"pipe-failed: command ran over {PIPE_TIMEOUT_S} s: {cmd}"
        if r.returncode != 0:
            err = r.stderr.decode(errors="replace").strip().splitlines()
            return None, 0, f"pipe-failed: exit {r.returncode} from '{cmd}': {err[-1][:150] if err else ''}"
        try:
            x, sr = sf.read(io.BytesIO(r.stdout), dtype="int16")
        except Exception as e:  # noqa: BLE001 - the reason names the command
            return None, 0, f"pipe-not-audio: output of '{cmd}' is not WAV audio ({str(e).splitlines()[-1][:80]})"
        return x, sr, ""
    if kind == "ark":
        import kaldi_native_io as kio

        path = entry.strip().rpartition(":")[0]
        p = Path(path) if Path(path).is_absolute() else base_dir / path
        if not p.is_file():
            return None, 0, f"missing-file: wave archive {p} does not exist"
        try:
            w = kio.read_wave(f"{p}:{entry.strip().rpartition(':')[2]}")
        except Exception as e:  # noqa: BLE001
            return None, 0, f"unreadable: wave archive entry {entry}: {str(e).splitlines()[-1][:100]}"
        data = np.asarray(w.data)  # (channels, samples), Kaldi keeps int16 values as float
        x = np.round(data.T).astype(np.int16)
        return (x[:, 0] if x.shape[1] == 1 else x), int(w.sample_freq), ""
    p = Path(entry.strip())
    p = p if p.is_absolute() else base_dir / p
    if not p.is_file():
        return None, 0, f"missing-file: {p} does not exist"
    return None, 0, ""  # a plain file is used where it is


def materialise(rec: str, entry: str, wav_dir: Path, base_dir: Path) -> Tuple[Optional[str], str]:
    """A plain WAV path for one wav.scp entry, writing ``wav_dir/<rec>.wav`` for pipes/archives (reused if present).

    Returns (path, "") or (None, reason)."""
    import soundfile as sf

    kind = wav_entry_kind(entry)
    if kind == "file":
        p = Path(entry.strip())
        p = (p if p.is_absolute() else base_dir / p).resolve()
        return (str(p), "") if p.is_file() else (None, f"missing-file: {p} does not exist (check wav.scp / --base-dir)")
    out = (wav_dir / f"{rec}.wav").resolve()
    if out.is_file():
        return str(out), ""
    x, sr, reason = read_entry_audio(entry, base_dir)
    if x is None:
        return None, reason
    if x.ndim == 2 and x.shape[1] > 1:
        return None, (
            f"multi-channel: {kind} entry gives {x.shape[1]} channels; select one in the command "
            "(e.g. sph2pipe -c 1, sox ... remix 1)"
        )
    if len(x) == 0:
        return None, f"zero-length: {kind} entry gives no samples"
    with atomic_path(out) as tmp:
        sf.write(str(tmp), x.reshape(-1), sr, subtype="PCM_16", format="WAV")
    return str(out), ""


# ------------------------------------------------------------------------------------------------ import
@dataclass
class ImportReport:
    num_utts: int
    num_materialised: int
    excluded: Dict[str, str] = field(default_factory=dict)
    repairs: List[str] = field(default_factory=list)


def import_kaldi_dir(
    src: PathLike,
    dst: PathLike,
    fix: bool = False,
    base_dir: Optional[PathLike] = None,
    wav_dir: Optional[PathLike] = None,
    allow_pipes: bool = False,
) -> ImportReport:
    """Import the Kaldi data dir ``src`` into ``dst`` (see the module docstring); ``allow_pipes``: run the
    ``cmd |`` entries of its wav.scp (else they are an error)."""
    src, dst = Path(src), Path(dst)
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    wav_dir = Path(wav_dir) if wav_dir is not None else dst / "wav"
    raw, problems = inspect_data_dir(src)
    problems = [p for p in problems if p.reason != "no-spk2utt"]  # spk2utt is regenerated anyway
    hard = [p for p in problems if not p.per_utt]
    unfixable = [p for p in hard if not p.fixable]
    if unfixable or (hard and not fix):
        msg = format_problems(src, unfixable or hard).replace(
            "python -m steps.validate_data_dir --data-dir",
            f"python -m local.kaldi_import import --fix --dst {dst} --src",
        )
        raise AsrError(msg)
    excluded: Dict[str, str] = {}
    for p in problems:
        for u in p.utts:
            excluded.setdefault(u, f"{p.reason}: {p.message}")
    repairs = sorted({f"{p.file}: {p.reason}" for p in hard if not p.utts})
    wav = {k: v for k, v in raw.dict("wav.scp").items() if v is not None}
    text = {k: v for k, v in raw.dict("text").items() if v is not None}
    utt2spk = {k: v for k, v in raw.dict("utt2spk").items() if v is not None}
    segs_raw = raw.dict("segments") if raw.has("segments") else None
    utts = [u for u in sorted(utt2spk, key=byte_key) if u not in excluded]
    rec_of = {u: (segs_raw[u] or "").split()[0] for u in utts} if segs_raw is not None else {u: u for u in utts}

    paths: Dict[str, str] = {}
    bad_rec: Dict[str, str] = {}
    recs = sorted(set(rec_of.values()), key=byte_key)
    pipes = [r for r in recs if r in wav and wav_entry_kind(wav[r]) == "pipe"]
    if pipes and not allow_pipes:
        scp = src / "wav.scp"
        lines = scp.read_text(encoding="utf-8", errors="replace").splitlines()
        line = next((i for i, ln in enumerate(lines, 1) if ln.split(maxsplit=1)[:1] == [pipes[0]]), 0)
        raise AsrError(
            f"{scp}:{line}: '{wav[pipes[0]].strip()}' is a command (a pipe), and {len(pipes)} of its {len(recs)} "
            f"recordings are; running them runs whatever program the file names, so asrlib does not unless told: "
            f"read the commands, then pass --allow-pipes (python -m local.kaldi_import import) or set "
            f"data.allow_pipes: true (a recipe's stage 1)"
        )
    n_mat = 0
    from tqdm import tqdm

    for rec in tqdm(recs, desc=f"import {src}", unit="rec", disable=len(recs) < 50, mininterval=1.0):
        path, reason = materialise(rec, wav[rec], wav_dir, base)
        if path is None:
            bad_rec[rec] = reason
        else:
            paths[rec] = path
            n_mat += wav_entry_kind(wav[rec]) != "file"
    for u in utts:
        if rec_of[u] in bad_rec:
            excluded.setdefault(u, bad_rec[rec_of[u]])
    kept = [u for u in utts if u not in excluded]
    if not kept:
        write_excluded(dst, excluded.items())
        raise AsrError(f"every utterance of {src} was excluded; reasons in {dst / 'excluded.txt'}")
    segs = None
    if segs_raw is not None:
        segs = {}
        for u in kept:
            r, s, e = segs_raw[u].split()
            segs[u] = (r, float(s), float(e))
        wav_out = {r: paths[r] for r in {segs[u][0] for u in kept}}
    else:
        wav_out = {u: paths[u] for u in kept}
    write_tables(dst, wav_out, {u: text[u] for u in kept}, {u: utt2spk[u] for u in kept}, segs)
    for name, keys in (("feats.scp", set(kept)), ("cmvn.scp", {utt2spk[u] for u in kept})):
        if raw.has(name):
            rows = _absolute_scp(src / name, base, keys)
            write_table(dst / name, rows)
    write_excluded(dst, excluded.items())
    if excluded:
        log.warning(
            "import %s: %d of %d utterances excluded (see %s)",
            src,
            len(excluded),
            len(utt2spk) + len(set(excluded) - set(utt2spk)),
            dst / "excluded.txt",
        )
    log.info(
        "imported %s -> %s: %d utterances, %d recordings materialised from pipes/archives", src, dst, len(kept), n_mat
    )
    return ImportReport(len(kept), n_mat, excluded, repairs)


def _absolute_scp(scp: Path, base: Path, keys: set) -> List[Tuple[str, str]]:
    """Rows of a feats/cmvn scp restricted to ``keys``, ark paths made absolute; the first entry must be readable."""
    from asrlib.kaldi_io import read_matrix

    rows = []
    for k, v in read_table(scp):
        if k not in keys:
            continue
        path, sep, off = v.rpartition(":")
        if not sep or not off.isdigit():
            raise AsrError(f"{scp}: entry '{k}' is '{v}'; only 'file.ark:offset' entries can be carried over")
        p = Path(path)
        rows.append((k, f"{(p if p.is_absolute() else base / p).resolve()}:{off}"))
    if rows:
        try:
            read_matrix(rows[0][1])
        except Exception as e:  # noqa: BLE001
            raise AsrError(
                f"{scp}: cannot read '{rows[0][0]}' at {rows[0][1]} ({e}); fix the paths or use "
                "--base-dir (relative paths are relative to it)"
            ) from None
    return rows


# ------------------------------------------------------------------------------------------------ export + check
def export_kaldi_dir(
    src: PathLike, dst: PathLike, feats_dir: Optional[PathLike] = None, base_dir: Optional[PathLike] = None
) -> int:
    """Export our data dir ``src`` to ``dst`` for Kaldi's tools (see the module docstring); returns #utterances."""
    import soundfile as sf

    src, dst = Path(src), Path(dst)
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    raw, problems = inspect_data_dir(src)
    hard = [p for p in problems if not p.per_utt]
    if hard:
        raise AsrError(format_problems(src, hard))
    wav = {k: v for k, v in raw.dict("wav.scp").items() if v}
    text = {k: v or "" for k, v in raw.dict("text").items()}
    utt2spk = {k: v for k, v in raw.dict("utt2spk").items() if v}
    segs = None
    if raw.has("segments"):
        segs = {}
        for u, v in raw.dict("segments").items():
            r, s, e = (v or "").split()
            segs[u] = (r, float(s), float(e))
    excluded: List[Tuple[str, str]] = []
    feats: Dict[str, str] = {}
    if feats_dir is not None:
        fscp = Path(feats_dir) / "feats.scp"
        if not fscp.is_file():
            raise AsrError(f"{fscp} does not exist; compute features first (steps.compute_fbank)")
        for k, v in read_table(fscp):
            path, _, off = v.rpartition(":")
            p = Path(path)
            feats[k] = f"{(p if p.is_absolute() else base / p).resolve()}:{off}"
    utts = sorted(utt2spk, key=byte_key)
    if feats_dir is not None:
        excluded = [
            (u, "no-features: excluded at the feature stage (see its excluded.txt)") for u in utts if u not in feats
        ]
        utts = [u for u in utts if u in feats]
    if not utts:
        raise AsrError(f"nothing to export from {src}")
    abs_wav: Dict[str, str] = {}
    for r, p in wav.items():
        if wav_entry_kind(p) != "file":
            abs_wav[r] = p
        else:
            q = Path(p)
            abs_wav[r] = str((q if q.is_absolute() else base / q).resolve())
    keep = set(utts)
    if segs is not None:
        segs = {u: segs[u] for u in utts}
        wav_out = {r: abs_wav[r] for r in {v[0] for v in segs.values()}}
    else:
        wav_out = {u: abs_wav[u] for u in utts}
    write_tables(dst, wav_out, {u: text[u] for u in utts}, {u: utt2spk[u] for u in utts}, segs)
    dur: Dict[str, str] = {}
    for u in utts:
        if segs is not None:
            dur[u] = f"{segs[u][2] - segs[u][1]:.3f}"
        else:
            dur[u] = f"{sf.info(wav_out[u]).duration:.3f}"
    write_table(dst / "utt2dur", dur.items())
    if feats_dir is not None:
        write_table(dst / "feats.scp", [(u, feats[u]) for u in utts])
        cmvn = Path(feats_dir) / "cmvn.scp"
        if cmvn.is_file():
            rows = read_table(cmvn)
            if rows:
                path, _, off = rows[0][1].rpartition(":")
                p = Path(path)
                stats = f"{(p if p.is_absolute() else base / p).resolve()}:{off}"
                write_table(dst / "cmvn.scp", [(s, stats) for s in {utt2spk[u] for u in keep}])
    write_excluded(dst, excluded)
    problems = check_kaldi_dir(dst)
    if problems:
        raise AsrError(f"exported {dst} does not pass the Kaldi checks:\n  - " + "\n  - ".join(problems[:10]))
    log.info(
        "exported %s -> %s: %d utterances (%d left out, listed in %s)",
        src,
        dst,
        len(utts),
        len(excluded),
        dst / "excluded.txt",
    )
    return len(utts)


def check_kaldi_dir(d: PathLike) -> List[str]:
    """The checks of Kaldi's ``utils/validate_data_dir.sh``; returns the problems found (empty = valid).

    Sorted unique keys (C order) in every table; spk2utt == utt2spk inverted; text, feats.scp, utt2dur cover exactly
    the utterances; segments cover them and name recordings of wav.scp (and every recording is used); cmvn.scp
    covers exactly the speakers; utterance order agrees with speaker order; audio files exist; no empty lines."""
    d = Path(d)
    _, problems = inspect_data_dir(d)
    out = [p.message for p in problems]
    tables: Dict[str, List[str]] = {}
    for name in ("wav.scp", "segments", "text", "utt2spk", "spk2utt", "feats.scp", "cmvn.scp", "utt2dur"):
        if (d / name).is_file():
            lines = (d / name).read_bytes().split(b"\n")
            if lines and lines[-1] == b"":
                lines.pop()
            if any(not ln.strip() for ln in lines):
                out.append(f"{d / name}: has empty lines")
            tables[name] = [ln.split(maxsplit=1)[0].decode("utf-8", "replace") for ln in lines if ln.strip()]
            keys = tables[name]
            if len(set(keys)) != len(keys) and not any("duplicate" in m and name in m for m in out):
                out.append(f"{d / name}: duplicate keys")
    utts = set(tables.get("utt2spk", []))
    spks = set(tables.get("spk2utt", []))
    for name in ("text", "feats.scp", "utt2dur"):
        if name in tables and set(tables[name]) != utts:
            diff = sorted(set(tables[name]) ^ utts, key=byte_key)[:3]
            msg = f"{d / name}: utterances differ from utt2spk, e.g. {diff}"
            if msg not in out:
                out.append(msg)
    if "cmvn.scp" in tables and set(tables["cmvn.scp"]) != spks:
        out.append(
            f"{d / 'cmvn.scp'}: speakers differ from spk2utt, e.g. "
            f"{sorted(set(tables['cmvn.scp']) ^ spks, key=byte_key)[:3]}"
        )
    if "segments" in tables:
        used = {v.split()[0] for _, v in read_table(d / "segments")}
        unused = sorted(set(tables["wav.scp"]) - used, key=byte_key)
        if unused:
            out.append(f"{d / 'wav.scp'}: {len(unused)} recording(s) not used by segments, e.g. {unused[0]}")
    elif "wav.scp" in tables and set(tables["wav.scp"]) != utts:
        out.append(f"{d / 'wav.scp'}: utterances differ from utt2spk")
    if (d / "wav.scp").is_file():
        for r, v in read_table(d / "wav.scp"):
            if wav_entry_kind(v) == "file" and not Path(v).is_file():
                out.append(f"{d / 'wav.scp'}: audio of '{r}' not found: {v}")
                break
    return list(dict.fromkeys(out))


# ------------------------------------------------------------------------------------------------ command lines
def is_kaldi_root(d: Path) -> bool:
    """A folder holding Kaldi data dirs (``train/wav.scp``) or being one."""
    return (d / "wav.scp").is_file() or (d / "train" / "wav.scp").is_file()


def _prepare(corpus_dir: Path, out_dir: Path, data: DataConfig, nj: int) -> None:
    """Stage 1 for ``data.corpus: kaldi_import``: import corpus_dir/{train, dev, eval sets}."""
    marker = out_dir / ".kaldi_import.done"
    sets = list(dict.fromkeys(["train", "dev"] + list(data.eval_sets)))
    fp = {"corpus_dir": str(corpus_dir), "sets": sets}
    if is_done(marker, fingerprint=fp):
        log.info("Kaldi dirs of %s already imported into %s; skipping", corpus_dir, out_dir)
        return
    missing = [s for s in sets if not (corpus_dir / s / "wav.scp").is_file()]
    if missing:
        raise AsrError(
            f"{corpus_dir} lacks the Kaldi data dir(s) {missing} (each needs wav.scp, text, utt2spk); "
            "set data.eval_sets to the sets it has"
        )
    counts = {
        s: import_kaldi_dir(
            corpus_dir / s, out_dir / s, base_dir=corpus_dir.parent, allow_pipes=data.allow_pipes
        ).num_utts
        for s in sets
    }
    mark_done(marker, {"utterances": counts}, fingerprint=fp)


def _sub_main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m local.kaldi_import", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    pi = sub.add_parser("import", help="Kaldi data dir -> pipeline data dir")
    pi.add_argument("--src", type=Path, required=True)
    pi.add_argument("--dst", type=Path, required=True)
    pi.add_argument("--fix", action="store_true", help="repair unsorted/inconsistent files, exclude what cannot be")
    pi.add_argument(
        "--base-dir",
        type=Path,
        help="relative paths in wav.scp/feats.scp and pipe commands are relative to this (default: the current folder)",
    )
    pi.add_argument(
        "--allow-pipes",
        action="store_true",
        help="run the `cmd |` entries of wav.scp (they run any program the file names: read them first)",
    )
    pe = sub.add_parser("export", help="pipeline data dir -> Kaldi data dir")
    pe.add_argument("--src", type=Path, required=True)
    pe.add_argument("--dst", type=Path, required=True)
    pe.add_argument("--feats-dir", type=Path, help="our feature dir (feats.scp, cmvn.scp) to export too")
    pe.add_argument("--base-dir", type=Path, help="relative paths are relative to this (default: current folder)")
    pc = sub.add_parser("check", help="check a data dir like Kaldi's utils/validate_data_dir.sh")
    pc.add_argument("--dir", type=Path, required=True)
    a = p.parse_args(argv)
    from asrlib.cli import setup_logging

    setup_logging()
    if a.cmd == "import":
        r = import_kaldi_dir(a.src, a.dst, a.fix, a.base_dir, allow_pipes=a.allow_pipes)
        print(
            f"{a.dst}: {r.num_utts} utterances, {r.num_materialised} recordings materialised, "
            f"{len(r.excluded)} excluded (see {a.dst / 'excluded.txt'})"
            + "".join(f"\n  repaired: {x}" for x in r.repairs)
        )
    elif a.cmd == "export":
        n = export_kaldi_dir(a.src, a.dst, a.feats_dir, a.base_dir)
        print(f"{a.dst}: {n} utterances; passes the validate_data_dir.sh checks")
    else:
        problems = check_kaldi_dir(a.dir)
        if problems:
            raise AsrError(f"{a.dir} fails the Kaldi data dir checks:\n  - " + "\n  - ".join(problems[:20]))
        print(f"{a.dir}: OK")
    return 0


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in ("import", "export", "check"):
        from asrlib.cli import run_main

        run_main(lambda args: _sub_main(args), list(argv))
        return
    corpus_main(_prepare, __doc__, is_kaldi_root, "Kaldi data dirs (train/wav.scp, ...)", argv)


if __name__ == "__main__":
    main()
