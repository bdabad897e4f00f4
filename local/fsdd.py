"""Free Spoken Digit Dataset (FSDD): isolated English digits "0"-"9", ``{digit}_{speaker}_{index}.wav``, 8 kHz.

    python -m local.fsdd --config recipes/fsdd/config.yaml --out-dir data [--corpus-dir DIR/recordings] [--nj 2]
    python -m local.fsdd report --data data --exp exp [--method tlg]   # the rotation tables (RESULTS_fsdd.md)

Speaker-disjoint evaluation is a leave-one-speaker-out rotation over every speaker present: in fold
``loso_<spk>`` speaker ``<spk>`` is the test set, the next speaker in sorted order is dev, the others are train. The
dataset's own convention (indices 0-4 of every speaker and digit = test) is the speaker-dependent fold ``split04``
(dev = indices 5-9, train = 10 and up). Words: ``0`` -> ``ZERO`` ... ``9`` -> ``NINE``.

Output in ``out_dir``:

* ``all/``: every usable recording (with ``data.level_db`` < 0 level-normalised copies in ``wav_level/``; utterance
ids ``<spk>-<digit>_<spk>_<index>``, speaker ``<spk>``); with
  ``data.speed_perturb`` also ``all_sp/`` (the 3-way speed-perturbed copy; audio in ``wav_sp/``);
* ``train dev test`` = fold ``split04`` (what the Snakefile trains); ``loso_<spk>/{train,dev,test}`` for every
  speaker; with ``data.subsets`` containing ``loso4`` also ``loso4_<spk>/``: the same test speaker, but all four
  other speakers train (takes 5 and up) and their takes 0-4 are dev — a speaker-dependent dev set, so one more
  training speaker; train sets are taken from ``all_sp`` when speed perturbation is on;
* ``manifests/fsdd_{recordings,supervisions}_all.jsonl.gz``; ``folds.txt`` (``<fold> <data dir>``);
* ``excluded.txt``: files left out, with the reason (malformed name, unreadable audio); ``.fsdd.done`` last.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from asrlib.config import DataConfig
from asrlib.data.corpus import (
    check_speed_factors,
    corpus_main,
    save_manifest,
    subset_data_dir,
    write_excluded,
    write_tables,
)
from asrlib.errors import AsrError
from asrlib.io.atomic import write_text
from asrlib.io.stage import is_done, mark_done
from asrlib.io.tables import read_table_dict, write_table

log = logging.getLogger("local.fsdd")

NAME = re.compile(r"^([0-9])_([A-Za-z][A-Za-z0-9]*)_([0-9]+)\.wav$")
WORDS = ("ZERO", "ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX", "SEVEN", "EIGHT", "NINE")
TEST_INDICES = range(0, 5)  # the dataset's own test split
DEV_INDICES = range(5, 10)  # our dev part of the speaker-dependent fold
SPLIT_FOLD = "split04"
FAMILIES = ("loso", "split04")  # the default fold families (data.subsets may ask for loso4 too)


@dataclass(frozen=True)
class FsddFile:
    path: Path
    digit: int
    speaker: str
    index: int

    @property
    def utt(self) -> str:
        """``<speaker>-<file stem>``: starts with the speaker id, as Kaldi wants."""
        return f"{self.speaker}-{self.path.stem}"


def is_fsdd_dir(d: Path) -> bool:
    return d.is_dir() and any(NAME.match(p.name) for p in d.glob("*.wav"))


def scan(corpus_dir: Path) -> Tuple[List[FsddFile], List[Tuple[str, str]]]:
    """(well-named recordings, [(file name, reason)] for the files whose name does not follow the convention)."""
    good, bad = [], []
    for p in sorted(Path(corpus_dir).iterdir()):
        if p.name.startswith(".") or p.is_dir():
            continue
        m = NAME.match(p.name)
        if m is None:
            bad.append((p.name, "malformed-name: expected {digit}_{speaker}_{index}.wav, e.g. 3_jackson_12.wav"))
            continue
        good.append(FsddFile(p.resolve(), int(m.group(1)), m.group(2).lower(), int(m.group(3))))
    return good, bad


def speakers_of(files: Sequence[FsddFile]) -> List[str]:
    return sorted({f.speaker for f in files})


def folds(speakers: Sequence[str]) -> Dict[str, Tuple[List[str], str, str]]:
    """``{loso_<spk>: (train speakers, dev speaker, test speaker)}``: dev is the next speaker in sorted order."""
    spk = sorted(speakers)
    if len(spk) < 3:
        raise AsrError(f"leave-one-speaker-out needs at least 3 speakers (train, dev, test); found {spk}")
    out = {}
    for i, test in enumerate(spk):
        dev = spk[(i + 1) % len(spk)]
        out[f"loso_{test}"] = ([s for s in spk if s not in (test, dev)], dev, test)
    return out


def level_normalize(src: Path, dst: Path, level_db: float) -> str:
    """Write ``src`` scaled to an RMS level of ``level_db`` dBFS (16-bit, clipped at full scale) to ``dst``
    atomically, unless ``dst`` exists; returns ``dst``. FSDD's speakers were recorded up to 14 dB apart."""
    import numpy as np
    import soundfile as sf

    from asrlib.io.atomic import atomic_path

    if not dst.is_file():
        x, sr = sf.read(str(src), dtype="float64")
        rms = float(np.sqrt(np.mean(x**2))) or 1e-9
        y = np.clip(x * (10 ** (level_db / 20) / rms), -1.0, 32767 / 32768)
        with atomic_path(dst) as tmp:
            sf.write(str(tmp), np.round(y * 32768).astype(np.int16), sr, subtype="PCM_16", format="WAV")
    return str(dst.resolve())


def prepare_fsdd(
    corpus_dir: Path,
    out_dir: Path,
    speed_perturb: Sequence[float] = (),
    nj: int = 1,
    sample_rate: int = 8000,
    level_db: float = 0.0,
    families: Sequence[str] = FAMILIES,
) -> Dict[str, Path]:
    """Prepare FSDD in ``out_dir`` (see the module docstring); returns ``{fold: data dir}``. ``level_db < 0``
    scales every recording to that RMS level (copies in ``wav_level/``) before anything else. ``families``: which
    fold families to write (``loso``, ``split04``, ``loso4``; see the module docstring)."""
    import soundfile as sf
    from lhotse import Recording, RecordingSet, SupervisionSegment, SupervisionSet

    corpus_dir, out_dir = Path(corpus_dir).resolve(), Path(out_dir)
    factors = check_speed_factors(speed_perturb)
    families = list(families) or list(FAMILIES)
    unknown = [f for f in families if f not in ("loso", "split04", "loso4")]
    if unknown:
        raise AsrError(f"unknown FSDD fold families {unknown} (data.subsets): use loso, split04, loso4")
    fp = {"corpus_dir": str(corpus_dir), "speed_perturb": factors, "sample_rate": sample_rate, "level_db": level_db}
    if families != list(FAMILIES):
        fp["families"] = families
    marker = out_dir / ".fsdd.done"
    if is_done(marker, fingerprint=fp):
        log.info("FSDD data in %s is complete; skipping (delete %s to redo)", out_dir, marker)
        return {k: Path(v) for k, v in read_table_dict(out_dir / "folds.txt").items()}
    files, bad = scan(corpus_dir)
    if bad:
        log.warning(
            "%d file(s) in %s have malformed names and are left out (listed in %s): %s",
            len(bad),
            corpus_dir,
            out_dir / "excluded.txt",
            ", ".join(n for n, _ in bad[:5]),
        )
    recs, sups, usable = [], [], []
    for f in files:
        try:
            info = sf.info(str(f.path))
        except RuntimeError as e:
            bad.append((f.path.name, f"unreadable: {str(e).splitlines()[-1][:100]}"))
            continue
        if info.samplerate != sample_rate or info.channels != 1:
            bad.append(
                (
                    f.path.name,
                    f"format: {info.samplerate} Hz, {info.channels} channel(s); expected "
                    f"{sample_rate} Hz mono (data.sample_rate)",
                )
            )
            continue
        rec = Recording.from_file(f.path, recording_id=f.utt)
        recs.append(rec)
        sups.append(
            SupervisionSegment(
                id=f.utt,
                recording_id=f.utt,
                start=0.0,
                duration=rec.duration,
                channel=0,
                text=WORDS[f.digit],
                speaker=f.speaker,
                language="English",
                custom={"index": f.index},
            )
        )
        usable.append(f)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_excluded(out_dir, bad)
    if not usable:
        raise AsrError(
            f"{corpus_dir} holds no usable FSDD recording ({len(bad)} left out, reasons in "
            f"{out_dir / 'excluded.txt'}, e.g. {bad[:2]})"
        )
    speakers = speakers_of(usable)
    rotation = folds(speakers)
    save_manifest(RecordingSet.from_recordings(recs), out_dir / "manifests/fsdd_recordings_all.jsonl.gz")
    save_manifest(SupervisionSet.from_segments(sups), out_dir / "manifests/fsdd_supervisions_all.jsonl.gz")
    if level_db > 0:
        raise AsrError(f"data.level_db must be negative (dBFS) or 0 (off), got {level_db}")
    paths = {f.utt: str(f.path) for f in usable}
    if level_db < 0:
        (out_dir / "wav_level").mkdir(exist_ok=True)
        paths = {f.utt: level_normalize(f.path, out_dir / "wav_level" / f"{f.utt}.wav", level_db) for f in usable}
    write_tables(out_dir / "all", paths, {f.utt: WORDS[f.digit] for f in usable}, {f.utt: f.speaker for f in usable})
    train_src = out_dir / "all"
    if factors and factors != [1.0]:
        from asrlib.data.speed_perturb import speed_perturb_data_dir

        speed_perturb_data_dir(out_dir / "all", out_dir / "all_sp", factors, out_dir / "wav_sp", nj)
        train_src = out_dir / "all_sp"
    index = {f.utt: f.index for f in usable}

    def orig(utt: str) -> str:  # the unperturbed utterance id of a (possibly sp<f>-prefixed) one
        return utt.split("-", 1)[1] if utt.startswith("sp") and utt.split("-", 1)[1] in index else utt

    fold_dirs: Dict[str, Path] = {}
    for fold, (train_spk, dev_spk, test_spk) in rotation.items():
        if "loso" in families:
            d = out_dir / fold
            subset_data_dir(train_src, d / "train", lambda u, s: s.split("-")[-1] in train_spk)
            subset_data_dir(out_dir / "all", d / "dev", lambda u, s: s == dev_spk)
            subset_data_dir(out_dir / "all", d / "test", lambda u, s: s == test_spk)
            fold_dirs[fold] = d
        if "loso4" in families:  # all other speakers train; dev = their takes 0-4 (speaker-dependent dev)
            d = out_dir / fold.replace("loso_", "loso4_")
            subset_data_dir(
                train_src, d / "train", lambda u, s: s.split("-")[-1] != test_spk and index[orig(u)] not in TEST_INDICES
            )
            subset_data_dir(out_dir / "all", d / "dev", lambda u, s: s != test_spk and index[u] in TEST_INDICES)
            subset_data_dir(out_dir / "all", d / "test", lambda u, s: s == test_spk)
            fold_dirs[d.name] = d
    if "split04" in families and max(index.values()) >= DEV_INDICES.stop:
        subset_data_dir(train_src, out_dir / "train", lambda u, s: index[orig(u)] >= DEV_INDICES.stop)
        subset_data_dir(out_dir / "all", out_dir / "dev", lambda u, s: index[u] in DEV_INDICES)
        subset_data_dir(out_dir / "all", out_dir / "test", lambda u, s: index[u] in TEST_INDICES)
        fold_dirs[SPLIT_FOLD] = out_dir
    elif "split04" in families:
        log.warning(
            "no recording has an index >= %d: the speaker-dependent fold %s (train = indices >= %d) is left out",
            DEV_INDICES.stop,
            SPLIT_FOLD,
            DEV_INDICES.stop,
        )
    write_table(out_dir / "folds.txt", [(k, str(v)) for k, v in fold_dirs.items()])
    mark_done(
        marker,
        {
            "speakers": speakers,
            "utterances": len(usable),
            "excluded_files": len(bad),
            "folds": {f: {"train": r[0], "dev": r[1], "test": r[2]} for f, r in rotation.items()},
        },
        fingerprint=fp,
    )
    log.info(
        "FSDD: %d utterances of %d speakers %s; %d file(s) excluded; folds %s",
        len(usable),
        len(speakers),
        speakers,
        len(bad),
        ", ".join(fold_dirs),
    )
    return fold_dirs


# ------------------------------------------------------------------------------------------------ report
def per_speaker_accuracy(ref_text: Path, hyp_text: Path, utt2spk: Path) -> Dict[str, Tuple[float, int]]:
    """``{speaker: (word accuracy %, number of words)}`` with word accuracy = 100 - WER (Kaldi's %WER)."""
    from asrlib.score import score

    ref, hyp, spk = read_table_dict(ref_text), read_table_dict(hyp_text), read_table_dict(utt2spk)
    out: Dict[str, Tuple[float, int]] = {}
    for s in sorted(set(spk.values())):
        r = {u: t for u, t in ref.items() if spk.get(u) == s}
        res = score(r, {u: hyp[u] for u in r if u in hyp})
        out[s] = (100.0 - res.wer, res.num_words)
    return out


def rotation_table(
    data: Path, exp: Path, method: str = "tlg", title: str = "FSDD", family: str = "loso"
) -> Tuple[str, Dict]:
    """Markdown tables (a leave-one-speaker-out family and split04) from the decoded folds; also the numbers."""
    fold_dirs = {k: Path(v) for k, v in read_table_dict(data / "folds.txt").items()}
    prefix = f"{family}_"
    loso: Dict[str, Tuple[float, int]] = {}
    how = (
        "the next speaker is dev; the other speakers train"
        if family == "loso"
        else "all other speakers train (takes 5 and up), their takes 0-4 are dev"
    )
    lines = [
        f"## {title}: leave-one-speaker-out rotation, family {family} ({method} decoding)",
        "",
        f"Each speaker in turn is the test set (never heard in training); {how}. Word accuracy = 100 - %WER.",
        "",
        "| test speaker | dev speaker | train speakers | #words | word accuracy % |",
        "|---|---|---|---:|---:|",
    ]
    missing = []
    numbers: Dict = {}
    fsdd_speakers = {f.split("_", 1)[1] for f in fold_dirs if f.startswith(("loso_", "loso4_"))}
    if any((exp / f / f"decode_test_synth_{method}").is_dir() for f in fold_dirs):
        lines[-2] += " synthetic test voices %WER |"
        lines[-1] += "---:|"
    for fold, d in sorted(fold_dirs.items()):
        if not fold.startswith(prefix):
            continue
        hyp = exp / fold / f"decode_test_{method}" / "hyp.txt"
        if not hyp.is_file():
            missing.append(str(hyp))
            continue
        acc = per_speaker_accuracy(d / "test" / "text", hyp, d / "test" / "utt2spk")
        ((spk, (a, n)),) = acc.items()
        dev_spk = sorted(set(read_table_dict(d / "dev" / "utt2spk").values()))
        train_all = {s.split("-")[-1] for s in read_table_dict(d / "train" / "utt2spk").values()}
        train_spk = sorted(train_all & fsdd_speakers) + (["+ synthetic"] if train_all - fsdd_speakers else [])
        loso[spk] = (a, n)
        synth = exp / fold / f"decode_test_synth_{method}" / "wer.json"
        extra = ""
        if synth.is_file():  # digits_fsdd: the synthetic test voices, decoded by the same model
            w = json.loads(synth.read_text())["wer"]
            numbers.setdefault("synthetic_wer", {})[spk] = w
            extra = f" {w:.2f} |"
        lines.append(f"| {spk} | {', '.join(dev_spk)} | {', '.join(train_spk)} | {n} | {a:.2f} |{extra}")
    numbers["loso"] = {k: v[0] for k, v in loso.items()}
    if loso:
        mean = sum(a for a, _ in loso.values()) / len(loso)
        numbers["loso_mean"], numbers["loso_min"] = mean, min(a for a, _ in loso.values())
        lines.append(f"| **mean** | | | {sum(n for _, n in loso.values())} | **{mean:.2f}** |")
    hyp = exp / SPLIT_FOLD / f"decode_test_{method}" / "hyp.txt"
    if SPLIT_FOLD in fold_dirs and hyp.is_file():
        d = fold_dirs[SPLIT_FOLD]
        acc = per_speaker_accuracy(d / "test" / "text", hyp, d / "test" / "utt2spk")
        lines += [
            "",
            f"## {title}: the dataset's own split (indices 0-4 = test; speaker-dependent)",
            "",
            "| speaker | #words | word accuracy % |",
            "|---|---:|---:|",
        ]
        lines += [f"| {s} | {n} | {a:.2f} |" for s, (a, n) in acc.items()]
        tot = sum(n for _, n in acc.values())
        overall = sum(a * n for a, n in acc.values()) / tot
        lines.append(f"| **all** | {tot} | **{overall:.2f}** |")
        numbers["split04"] = {k: v[0] for k, v in acc.items()}
        numbers["split04_all"] = overall
    elif SPLIT_FOLD in fold_dirs:
        missing.append(str(hyp))
    if missing:
        lines += ["", "Not decoded yet: " + ", ".join(missing)]
    return "\n".join(lines) + "\n", numbers


def report_main(argv: List[str]) -> int:
    import argparse

    from asrlib.cli import run_main

    p = argparse.ArgumentParser(
        prog="python -m local.fsdd report", description="per-speaker tables of the FSDD folds -> EXP/RESULTS_fsdd.md"
    )
    p.add_argument("--data", type=Path, required=True, help="the data folder given to prepare (holds folds.txt)")
    p.add_argument("--exp", type=Path, required=True, help="holds one experiment folder per fold")
    p.add_argument("--method", default="tlg", choices=["tlg", "greedy", "isolated", "isolated_sa"])
    p.add_argument("--title", default="FSDD")
    p.add_argument("--family", default="loso", choices=["loso", "loso4"], help="which rotation to tabulate")

    def main(args_in):
        a = p.parse_args(args_in)
        if not (a.data / "folds.txt").is_file():
            raise AsrError(f"{a.data / 'folds.txt'} does not exist; run the data preparation first")
        text, numbers = rotation_table(a.data, a.exp, a.method, a.title, a.family)
        name = f"RESULTS_fsdd_{a.method}" + ("" if a.family == "loso" else f"_{a.family}")
        write_text(a.exp / f"{name}.md", text)
        from asrlib.io.atomic import write_json

        write_json(a.exp / f"{name}.json", numbers)
        print(text)
        return 0

    run_main(main, argv)
    return 0


def _prepare(corpus_dir: Path, out_dir: Path, data: DataConfig, nj: int) -> None:
    prepare_fsdd(corpus_dir, out_dir, data.speed_perturb, nj, data.sample_rate, data.level_db, data.subsets)


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:
        report_main(argv[1:])
        return
    corpus_main(_prepare, __doc__, is_fsdd_dir, "FSDD recordings folder ({digit}_{speaker}_{index}.wav files)", argv)


if __name__ == "__main__":
    main()
