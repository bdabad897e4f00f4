"""speechocean762: read English of 250 Mandarin-L1 speakers (104 children aged 12 or under), 16 kHz. 2,500 training
utterances of 125 speakers, 2,500 test utterances of 125 other speakers (OpenSLR 101).

    python -m local.speechocean762 --config recipes/speechocean762/config.yaml --out-dir data --corpus-dir DIR

The corpus folder holds ``WAVE/SPEAKER<spk>/<utt>.WAV`` and, per part (``train``, ``test``), ``wav.scp`` (paths
relative to the corpus folder), ``text``, ``utt2spk``, ``spk2age`` and ``spk2gender``. Columns are separated by
tabs in the original and by blanks in the excerpt ``speechocean762_mini`` (whose audio is FLAC); both are read. The
audio is read where it lies (lhotse ``Recording``, ``wav.scp`` paths); no converted copy is written.

Sets: ``dev`` = the utterances of ``data.dev_speakers`` held out of the training part (default: 10 speakers, 5
children and 5 adults, spread evenly over each group's sorted speaker list), ``train`` = the other training speakers'
(with ``data.speed_perturb`` the perturbed set, audio in ``wav_sp/``; ``train_nosp`` the original), ``test`` = the
corpus's test part. ``data.max_speakers`` > 0 keeps only that many speakers of each set (tiny test runs).
Utterance ids are ``<spk>-<utt>`` (Kaldi's rule: they start with the speaker). Children are the speakers aged 12 or
under (``spk2age``); every supervision carries the speaker's gender and ``custom["age"]``.

Output in ``out_dir``: ``manifests/speechocean762_{recordings,supervisions}_{train,dev,test}.jsonl.gz``; Kaldi data
dirs ``train``, ``dev``, ``test`` (+ ``train_nosp``), each with ``spk2age`` and ``spk2gender`` besides the usual
tables; ``local/lm/train_text.txt`` (the training transcripts once each, without utterance ids: the n-gram's
text); ``excluded.txt`` (entries without audio or transcript, unreadable or malformed, each with its reason);
``.speechocean762.done`` (written last; a finished folder is skipped). A missing corpus file, or a folder that is not
the corpus, is an error naming what is missing.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from asrlib.config import DataConfig
from asrlib.data.corpus import (
    check_speed_factors,
    corpus_main,
    hold_out_speakers,
    load_set_manifests,
    whole_file_manifests,
    write_excluded,
    write_sets,
)
from asrlib.errors import AsrError
from asrlib.io.atomic import atomic_open
from asrlib.io.stage import is_done, mark_done
from asrlib.io.tables import write_table

log = logging.getLogger("local.speechocean762")

PARTS = ("train", "test")
TABLES = ("wav.scp", "text", "utt2spk", "spk2age", "spk2gender")
CHILD_MAX_AGE = 12  # children: aged 12 or under (the Interspeech 2020 children's ASR challenge's bound too)
DEV_PER_GROUP = 5
NAME = "speechocean762"


class Utt(NamedTuple):
    speaker: str
    words: str
    audio: Path


def is_speechocean762_dir(d: Path) -> bool:
    """True for a folder that looks like (part of) the corpus: ``WAVE/`` beside ``train/`` or ``test/``. A partial
    copy is accepted here so that :func:`check_layout` can say what it lacks."""
    return (d / "WAVE").is_dir() and any((d / p).is_dir() for p in PARTS) or all((d / p).is_dir() for p in PARTS)


def check_layout(corpus_dir: Path) -> None:
    """AsrError listing every file or folder of the corpus layout that ``corpus_dir`` lacks."""
    need = [corpus_dir / "WAVE"] + [corpus_dir / p / t for p in PARTS for t in TABLES]
    missing = [str(p.relative_to(corpus_dir)) for p in need if not p.exists()]
    if missing:
        raise AsrError(
            f"{corpus_dir} is not a complete speechocean762 folder: {', '.join(missing)} missing "
            "(expected WAVE/ and, in train/ and test/, " + ", ".join(TABLES) + ")"
        )


def read_columns(path: Path, bad: List[Tuple[str, str]]) -> Dict[str, str]:
    """``{key: rest}`` of a two-column table split at the first tab or blank run (the original uses tabs, the
    excerpt blanks); lines without a value or with a repeated key are listed in ``bad``."""
    out: Dict[str, str] = {}
    where = f"{path.parent.name}/{path.name}"
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        parts = line.strip().split(None, 1)
        if not parts:
            continue
        if len(parts) < 2 or not parts[1].strip():
            bad.append((f"{where}:{n}", f"malformed-line: expected 'KEY VALUE', got {line.strip()[:60]!r}"))
        elif parts[0] in out:
            bad.append((f"{where}:{n}", f"duplicate: repeats the key {parts[0]}"))
        else:
            out[parts[0]] = " ".join(parts[1].split())
    return out


def resolve_audio(corpus_dir: Path, rel: str) -> Optional[Path]:
    """The audio file a ``wav.scp`` entry names (relative to the corpus folder), whatever the case of its extension
    (the original's ``.WAV``; a copy may have been renamed ``.wav``); None when no such file exists."""
    p = Path(rel)
    p = p if p.is_absolute() else corpus_dir / p
    if p.is_file():
        return p
    for cand in (p.with_suffix(p.suffix.lower()), p.with_suffix(p.suffix.upper())):
        if cand.is_file():
            return cand
    return None


def scan_part(corpus_dir: Path, part: str) -> Tuple[Dict[str, Utt], Dict[str, int], Dict[str, str], list]:
    """``{utt: Utt}``, ``{speaker: age}``, ``{speaker: gender}`` of one part and the excluded items with reasons."""
    bad: List[Tuple[str, str]] = []
    t = {name: read_columns(corpus_dir / part / name, bad) for name in TABLES}
    ages: Dict[str, int] = {}
    for spk, age in t["spk2age"].items():
        try:
            ages[spk] = int(age)
        except ValueError:
            bad.append((f"{part}/spk2age:{spk}", f"malformed-age: {age!r} is not a whole number"))
    utts: Dict[str, Utt] = {}
    for utt, rel in t["wav.scp"].items():
        spk, words = t["utt2spk"].get(utt), t["text"].get(utt)
        if words is None:
            bad.append((utt, f"no-transcript: in {part}/wav.scp, not in {part}/text"))
        elif spk is None:
            bad.append((utt, f"no-speaker: not in {part}/utt2spk"))
        elif spk not in ages:
            bad.append((utt, f"no-age: speaker {spk} not in {part}/spk2age"))
        elif (audio := resolve_audio(corpus_dir, rel)) is None:
            bad.append((utt, f"missing-audio: {rel} (from {part}/wav.scp) does not exist"))
        else:
            utts[utt] = Utt(spk, " ".join(w.upper() for w in words.split()), audio.resolve())
    bad += [(u, f"no-audio: in {part}/text, not in {part}/wav.scp") for u in t["text"] if u not in t["wav.scp"]]
    return utts, ages, t["spk2gender"], bad


def is_child(age: int) -> bool:
    return age <= CHILD_MAX_AGE


def default_dev_speakers(ages: Dict[str, int], per_group: int = DEV_PER_GROUP) -> List[str]:
    """Up to ``per_group`` children and as many adults, spread evenly over each group's sorted speakers (one in ten
    of a group at most, so a small corpus keeps most of its speakers for training); at least one speaker when there
    are two or more."""
    out: List[str] = []
    for group in (
        sorted(s for s, a in ages.items() if is_child(a)),
        sorted(s for s, a in ages.items() if not is_child(a)),
    ):
        n = min(per_group, len(group) // 10)
        out += [group[int((i + 0.5) * len(group) / n)] for i in range(n)]
    if not out and len(ages) >= 2:
        out = [sorted(ages)[-1]]
    if not out:
        raise AsrError(f"{len(ages)} training speaker(s): too few to hold one out as dev (set data.dev_speakers)")
    return sorted(out)


def prepare_speechocean762(
    corpus_dir: Path,
    out_dir: Path,
    speed_perturb: Sequence[float] = (),
    nj: int = 1,
    sample_rate: int = 16000,
    dev_speakers: Sequence[str] = (),
    max_speakers: int = 0,
) -> Dict[str, Dict[str, object]]:
    """Manifests and Kaldi data dirs of speechocean762 (see the module docstring); returns lhotse's
    ``{"train"|"dev"|"test": {"recordings": RecordingSet, "supervisions": SupervisionSet}}``."""
    corpus_dir, out_dir = Path(corpus_dir).resolve(), Path(out_dir)
    factors = check_speed_factors(speed_perturb)
    perturb = bool(factors) and factors != [1.0]
    mdir = out_dir / "manifests"
    fp = {
        "corpus_dir": str(corpus_dir),
        "speed_perturb": factors,
        "sample_rate": sample_rate,
        "dev_speakers": sorted(dev_speakers),
        "max_speakers": max_speakers,
    }
    marker = out_dir / f".{NAME}.done"
    sets = ("train", "dev", "test")
    if is_done(marker, fingerprint=fp):
        log.info("speechocean762 data in %s is complete; skipping (delete %s to redo)", out_dir, marker)
        return load_set_manifests(mdir, NAME, sets)
    check_layout(corpus_dir)
    bad: List[Tuple[str, str]] = []
    parts: Dict[str, Dict[str, Utt]] = {}
    ages: Dict[str, int] = {}
    genders: Dict[str, str] = {}
    train_ages: Dict[str, int] = {}
    for part in PARTS:
        parts[part], a, g, b = scan_part(corpus_dir, part)
        bad += b
        ages.update(a)
        genders.update(g)
        if part == "train":
            train_ages = {s: a[s] for s in {u.speaker for u in parts[part].values()}}
    dev_spk = sorted(dev_speakers) or default_dev_speakers(train_ages)
    unknown = sorted(set(dev_spk) - set(train_ages))
    if unknown:
        raise AsrError(f"data.dev_speakers {unknown} are not training speakers ({' '.join(sorted(train_ages))})")
    split = hold_out_speakers(parts["train"], parts["test"], dev_spk, max_speakers, lambda v: v.speaker)
    manifests: Dict[str, Dict[str, object]] = {}
    for s in sets:
        entries = []
        for utt, (spk, words, audio) in sorted(split[s].items()):
            g = genders.get(spk, "").upper()
            fields = {"text": words, "speaker": spk, "language": "English", "custom": {"age": ages[spk]}}
            entries.append((f"{spk}-{utt}", audio, {**fields, "gender": g if g in ("F", "M") else None}))
        m = whole_file_manifests(entries, sample_rate, bad)
        if m is None:
            raise AsrError(f"speechocean762 {s} set is empty (excluded items in {out_dir / 'excluded.txt'})")
        manifests[s] = m
    out_dir.mkdir(parents=True, exist_ok=True)
    write_sets(out_dir, NAME, manifests, perturb)
    for s, m in manifests.items():
        d = out_dir / ("train_nosp" if s == "train" and perturb else s)
        spks = sorted({sup.speaker for sup in m["supervisions"]})
        write_table(d / "spk2age", [(k, str(ages[k])) for k in spks])
        write_table(d / "spk2gender", [(k, genders[k]) for k in spks if k in genders])
    if perturb:
        from asrlib.data.speed_perturb import speed_perturb_data_dir

        speed_perturb_data_dir(out_dir / "train_nosp", out_dir / "train", factors, out_dir / "wav_sp", nj)
    with atomic_open(out_dir / "local" / "lm" / "train_text.txt") as f:  # the LM's text: unperturbed, no ids
        f.writelines(sup.text + "\n" for sup in manifests["train"]["supervisions"])
    write_excluded(out_dir, bad)
    counts = {s: len(m["supervisions"]) for s, m in manifests.items()}
    speakers = {s: sorted({v.speaker for v in split[s].values()}) for s in sets}
    children = {s: sum(is_child(ages[k]) for k in v) for s, v in speakers.items()}
    mark_done(
        marker,
        {"utterances": counts, "speakers": speakers, "children": children, "excluded": len(bad)},
        fingerprint=fp,
    )
    log.info(
        "speechocean762: %s utterances (dev speakers %s; children per set %s); %d item(s) excluded (%s)",
        counts,
        " ".join(speakers["dev"]),
        children,
        len(bad),
        out_dir / "excluded.txt",
    )
    return manifests


def _prepare(corpus_dir: Path, out_dir: Path, data: DataConfig, nj: int) -> None:
    prepare_speechocean762(
        corpus_dir, out_dir, data.speed_perturb, nj, data.sample_rate, data.dev_speakers, data.max_speakers
    )


def main(argv: Optional[List[str]] = None) -> None:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:
        from local.speechocean762_report import report_main

        report_main(argv[1:])
        return
    corpus_main(
        _prepare, __doc__, is_speechocean762_dir, "speechocean762 corpus (a folder with WAVE/, train/, test/)", argv
    )


if __name__ == "__main__":
    main()
