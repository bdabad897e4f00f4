"""Kaldi's yesno corpus: 60 recordings of one man saying eight Hebrew "yes"/"no" words, 8 kHz.

    python -m local.yesno --config recipes/yesno/config.yaml --out-dir data [--corpus-dir DIR/waves_yesno]

The manifests come from lhotse's own ``prepare_yesno`` (words ``YES``/``NO``). Two 30 + 30 splits (``data.split``):

- ``lhotse`` (the default): lhotse's own (sorted files, even positions train, odd test), the one icefall's yesno
  recipe uses;
- ``kaldi``: Kaldi's egs/yesno (``local/create_yesno_waves_test_train.pl``): the sorted file list's first half
  trains, the second half tests; the split behind Kaldi's published 0.00 %. Every training recording then starts
  with NO and all test recordings but one with YES (recipes/yesno/README.md measures what that does).

The two test sets share 15 recordings. File names are the labels (``1`` = yes, ``0`` = no, e.g.
``0_1_1_0_0_1_1_0.wav``); a ``.wav`` with another name is listed in ``excluded.txt`` and left out (lhotse would
stop on it). yesno has no dev split: ``dev`` holds the training recordings again; the trainer only logs its loss
(nothing is selected on it), and the recipe decodes ``test`` only.

Output in ``out_dir``: ``manifests/yesno_{recordings,supervisions}_{train,test}.jsonl.gz``; Kaldi data dirs
``train``, ``dev``, ``test`` (speaker ``global``, as in Kaldi; with ``data.speed_perturb`` ``train`` is the
perturbed set, ``train_nosp`` the original); ``excluded.txt``; ``.yesno.done`` (written last;
a finished folder is skipped).
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from asrlib.config import DataConfig
from asrlib.data.corpus import (
    check_speed_factors,
    corpus_main,
    load_manifest,
    save_manifest,
    write_excluded,
    write_kaldi_dir,
)
from asrlib.errors import AsrError
from asrlib.io.stage import is_done, mark_done

log = logging.getLogger("local.yesno")

SPLITS = ("kaldi", "lhotse")
NAME = re.compile(r"^[01](_[01]){7}\.wav$")
NUM_RECORDINGS = 60
SPEAKER = "global"


def is_yesno_dir(d: Path) -> bool:
    """True for a folder holding yesno-named wav files."""
    return d.is_dir() and any(NAME.match(p.name) for p in d.glob("*.wav"))


def scan(corpus_dir: Path) -> Tuple[List[Path], List[Tuple[str, str]]]:
    """(the well-named recordings, [(file name, reason)] for the other .wav files)."""
    good, bad = [], []
    for p in sorted(corpus_dir.glob("*.wav")):
        if NAME.match(p.name):
            good.append(p)
        else:
            bad.append((p.name, "malformed-name: expected eight 0/1 labels joined by '_' (e.g. 0_1_1_0_0_1_1_0.wav)"))
    return good, bad


def prepare_yesno(
    corpus_dir: Path, out_dir: Path, speed_perturb: Sequence[float] = (), nj: int = 1, split: str = "lhotse"
) -> Dict[str, Dict[str, object]]:
    """Manifests (lhotse's ``prepare_yesno``) and Kaldi dirs train/dev/test of the yesno corpus in ``corpus_dir``,
    split by ``split`` (``kaldi`` or ``lhotse``, module docstring).

    With ``speed_perturb`` factors (e.g. 0.9 1.0 1.1) ``train`` is the perturbed set (audio in ``wav_sp/``) and
    ``train_nosp`` the original. Returns lhotse's ``{"train"|"test": {"recordings": RecordingSet,
    "supervisions": SupervisionSet}}``.
    """
    from lhotse import RecordingSet, SupervisionSet
    from lhotse.recipes import prepare_yesno as lhotse_prepare_yesno

    corpus_dir, out_dir = Path(corpus_dir).resolve(), Path(out_dir)
    marker = out_dir / ".yesno.done"
    mdir = out_dir / "manifests"
    factors = check_speed_factors(speed_perturb)
    perturb = bool(factors) and factors != [1.0]
    split = split or "lhotse"
    if split not in SPLITS:
        raise AsrError(f"data.split for yesno must be one of {', '.join(SPLITS)}, not {split!r}")
    fp = {"corpus_dir": str(corpus_dir), "speed_perturb": factors, "split": split}
    if is_done(marker, fingerprint=fp):
        log.info("yesno data in %s is complete; skipping (delete %s to redo)", out_dir, marker)
        return {
            s: {
                "recordings": load_manifest(mdir / f"yesno_recordings_{s}.jsonl.gz", RecordingSet),
                "supervisions": load_manifest(mdir / f"yesno_supervisions_{s}.jsonl.gz", SupervisionSet),
            }
            for s in ("train", "test")
        }
    good, bad = scan(corpus_dir)
    if bad:
        log.warning(
            "%d file(s) in %s are not yesno recordings and are left out (listed in %s): %s",
            len(bad),
            corpus_dir,
            out_dir / "excluded.txt",
            ", ".join(n for n, _ in bad[:5]),
        )
    if len(good) != NUM_RECORDINGS:
        raise AsrError(
            f"{corpus_dir} holds {len(good)} yesno recordings, expected {NUM_RECORDINGS} (the lhotse/Kaldi "
            "30+30 split needs the complete corpus); re-extract waves_yesno.tar.gz"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    if bad:  # lhotse globs *.wav and asserts on any other name: give it a folder of the good files only
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=".yesno_links.") as links:
            for p in good:
                os.symlink(p, Path(links) / p.name)
            manifests = lhotse_prepare_yesno(links)
        for parts in manifests.values():  # point the recordings at the real files, not the removed links
            parts["recordings"] = RecordingSet.from_recordings(_repath(r, corpus_dir) for r in parts["recordings"])
    else:
        manifests = lhotse_prepare_yesno(corpus_dir)
    if split == "kaldi":
        manifests = kaldi_split(manifests)
    for part, parts in manifests.items():
        save_manifest(parts["recordings"], mdir / f"yesno_recordings_{part}.jsonl.gz")
        save_manifest(parts["supervisions"], mdir / f"yesno_supervisions_{part}.jsonl.gz")
        dirs = (("train_nosp" if perturb else "train"), "dev") if part == "train" else (part,)
        for d in dirs:
            write_kaldi_dir(out_dir / d, parts["recordings"], parts["supervisions"], speaker=lambda s: SPEAKER)
    if perturb:
        from asrlib.data.speed_perturb import speed_perturb_data_dir

        speed_perturb_data_dir(out_dir / "train_nosp", out_dir / "train", factors, out_dir / "wav_sp", nj)
    write_excluded(out_dir, bad)
    counts = {s: len(p["supervisions"]) for s, p in manifests.items()}
    mark_done(marker, {"utterances": counts, "excluded_files": len(bad)}, fingerprint=fp)
    log.info("yesno (%s split): %s utterances in %s", split, counts, out_dir)
    return manifests


def kaldi_split(manifests: Dict[str, Dict[str, object]]) -> Dict[str, Dict[str, object]]:
    """lhotse's train/test manifests re-split as Kaldi's egs/yesno does: recordings sorted by name (= id), the first
    half train, the second half test."""
    from lhotse import RecordingSet, SupervisionSet

    recs = sorted((r for p in manifests.values() for r in p["recordings"]), key=lambda r: r.id)
    sups = {s.recording_id: s for p in manifests.values() for s in p["supervisions"]}
    half = len(recs) // 2
    return {
        name: {
            "recordings": RecordingSet.from_recordings(part),
            "supervisions": SupervisionSet.from_segments(sups[r.id] for r in part),
        }
        for name, part in (("train", recs[:half]), ("test", recs[half:]))
    }


def _repath(rec, corpus_dir: Path):
    """``rec`` with its source path moved into ``corpus_dir`` (same file name)."""
    from lhotse.audio import AudioSource

    src = rec.sources[0]
    return rec.__class__(
        id=rec.id,
        sources=[AudioSource(type="file", channels=src.channels, source=str(corpus_dir / Path(src.source).name))],
        sampling_rate=rec.sampling_rate,
        num_samples=rec.num_samples,
        duration=rec.duration,
    )


def _prepare(corpus_dir: Path, out_dir: Path, data: DataConfig, nj: int) -> None:
    prepare_yesno(corpus_dir, out_dir, data.speed_perturb, nj, data.split)


def main(argv: Optional[List[str]] = None) -> None:
    corpus_main(_prepare, __doc__, is_yesno_dir, "yesno corpus (folder waves_yesno with 60 wav files)", argv)


if __name__ == "__main__":
    main()
