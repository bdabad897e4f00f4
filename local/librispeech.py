"""LibriSpeech (read English audiobooks, 16 kHz FLAC): ``<subset>/<speaker>/<chapter>/<spk>-<chapter>-<n>.flac``
plus one ``<spk>-<chapter>.trans.txt`` per chapter.

    python -m local.librispeech --config recipes/librispeech/config.yaml --out-dir data [--corpus-dir DIR/LibriSpeech]

The manifests come from lhotse's own ``prepare_librispeech`` for ``data.subsets`` (e.g. ``train-clean-100
dev-clean test-clean test-other``; the 960 h set adds ``train-clean-360 train-other-500``). Before that every
chapter is checked, because lhotse skips problems with a log line only: a flac without a transcript line, a
transcript line without its flac, a chapter without ``trans.txt``, an empty transcript — each is listed in
``<set>/excluded.txt`` with its reason, never dropped silently.

Sets: every ``train-*`` subset goes into ``train``; ``dev-clean`` -> ``dev``, ``dev-other`` -> ``dev_other``,
``test-clean`` -> ``test``, ``test-other`` -> ``test_other``. The FLAC files are read where they lie (``wav.scp``
lists them; validation and the feature stage read FLAC through soundfile): no converted copy of the corpus (it would
be about 115 GB for the 960 h set). Speakers are the LibriSpeech reader ids (utterance ids start with them, as
Kaldi wants).
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from asrlib.config import DataConfig
from asrlib.data.corpus import corpus_main, save_manifest, write_excluded, write_tables
from asrlib.errors import AsrError
from asrlib.io.stage import is_done, mark_done

log = logging.getLogger("local.librispeech")

SET_NAMES = {"dev-clean": "dev", "dev-other": "dev_other", "test-clean": "test", "test-other": "test_other"}
UTT = re.compile(r"^(\d+)-(\d+)-(\d+)$")


def set_name(subset: str) -> str:
    """The data dir a LibriSpeech subset goes to (``train-*`` -> ``train``)."""
    if subset.startswith("train-"):
        return "train"
    if subset in SET_NAMES:
        return SET_NAMES[subset]
    raise AsrError(
        f"unknown LibriSpeech subset '{subset}'; use train-clean-100, train-clean-360, train-other-500, "
        "dev-clean, dev-other, test-clean, test-other (or train-clean-5/dev-clean-2 of mini LibriSpeech)"
    )


def is_librispeech_dir(d: Path) -> bool:
    return d.is_dir() and any(
        (d / s).is_dir()
        for s in ("train-clean-100", "train-clean-5", "dev-clean", "dev-clean-2", "test-clean", "train-clean-360")
    )


def check_subset(subset_dir: Path) -> List[Tuple[str, str]]:
    """Problems of one subset as ``(utterance id or file, reason)`` rows (see the module docstring)."""
    problems: List[Tuple[str, str]] = []
    if not subset_dir.is_dir():
        raise AsrError(f"LibriSpeech subset {subset_dir} does not exist; remove it from data.subsets or download it")
    for chapter in sorted(p for p in subset_dir.glob("*/*") if p.is_dir()):
        spk, chap = chapter.parent.name, chapter.name
        flacs = {p.stem for p in chapter.glob("*.flac")}
        trans = chapter / f"{spk}-{chap}.trans.txt"
        if not trans.is_file():
            problems += [(u, f"missing-transcript-file: {trans} does not exist") for u in sorted(flacs)]
            continue
        lines: Dict[str, str] = {}
        for n, line in enumerate(trans.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            parts = line.split(maxsplit=1)
            if not UTT.match(parts[0]) or len(parts) < 2 or not parts[1].strip():
                problems.append((parts[0], f"bad-transcript-line: {trans}:{n}: expected '<spk>-<chapter>-<n> WORDS'"))
                continue
            lines[parts[0]] = parts[1]
        problems += [(u, f"missing-transcript: no line for it in {trans}") for u in sorted(flacs - set(lines))]
        problems += [
            (u, f"missing-audio: {chapter / (u + '.flac')} does not exist (line in {trans.name})")
            for u in sorted(set(lines) - flacs)
        ]
    return problems


def prepare_librispeech(corpus_dir: Path, out_dir: Path, subsets: Sequence[str], nj: int = 1) -> Dict[str, int]:
    """Manifests (lhotse) + Kaldi dirs of ``subsets``; returns ``{set: number of utterances}``."""
    from lhotse.recipes import prepare_librispeech as lhotse_prepare

    corpus_dir, out_dir = Path(corpus_dir).resolve(), Path(out_dir)
    if not subsets:
        raise AsrError(
            "data.subsets is empty: list the LibriSpeech subsets to prepare (e.g. [train-clean-100, "
            "dev-clean, test-clean, test-other])"
        )
    fp = {"corpus_dir": str(corpus_dir), "subsets": list(subsets)}
    marker = out_dir / ".librispeech.done"
    if is_done(marker, fingerprint=fp):
        log.info("LibriSpeech data in %s is complete; skipping", out_dir)
        return {}
    by_set: Dict[str, List[str]] = defaultdict(list)
    for s in subsets:
        by_set[set_name(s)].append(s)
    if "train" not in by_set or "dev" not in by_set:
        raise AsrError(
            f"data.subsets {list(subsets)} needs a train-* subset and dev-clean (the training step reads train and dev)"
        )
    excluded: Dict[str, List[Tuple[str, str]]] = {k: [] for k in by_set}
    for s in subsets:
        probs = check_subset(corpus_dir / s)
        excluded[set_name(s)] += probs
        if probs:
            log.warning(
                "%s: %d problem(s), listed in %s, e.g. %s %s",
                s,
                len(probs),
                out_dir / set_name(s) / "excluded.txt",
                *probs[0],
            )
    manifests = lhotse_prepare(corpus_dir, dataset_parts=list(subsets), output_dir=None, num_jobs=nj)
    counts: Dict[str, int] = {}
    for name, parts in by_set.items():
        recs = [r for p in parts for r in manifests[p]["recordings"]]
        sups = [sp for p in parts for sp in manifests[p]["supervisions"]]
        bad = {u for u, _ in excluded[name]}
        recs = [r for r in recs if r.id not in bad]
        rec_ids = {r.id for r in recs}
        sups = [sp for sp in sups if sp.id not in bad and sp.recording_id in rec_ids]
        for p in parts:
            save_manifest(manifests[p]["recordings"], out_dir / "manifests" / f"librispeech_recordings_{p}.jsonl.gz")
            save_manifest(
                manifests[p]["supervisions"], out_dir / "manifests" / f"librispeech_supervisions_{p}.jsonl.gz"
            )
        wav = {r.id: str(Path(r.sources[0].source).resolve()) for r in recs}  # the FLAC in place
        write_tables(out_dir / name, wav, {sp.id: sp.text for sp in sups}, {sp.id: sp.speaker for sp in sups})
        write_excluded(out_dir / name, excluded[name])
        counts[name] = len(sups)
    mark_done(marker, {"utterances": counts, "excluded": {k: len(v) for k, v in excluded.items()}}, fingerprint=fp)
    log.info("LibriSpeech: %s utterances in %s", counts, out_dir)
    return counts


def _prepare(corpus_dir: Path, out_dir: Path, data: DataConfig, nj: int) -> None:
    prepare_librispeech(corpus_dir, out_dir, data.subsets, nj)


def main(argv: Optional[List[str]] = None) -> None:
    corpus_main(
        _prepare, __doc__, is_librispeech_dir, "LibriSpeech folder (holding train-clean-100/, dev-clean/, ...)", argv
    )


if __name__ == "__main__":
    main()
