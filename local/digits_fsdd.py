"""Multi-corpus training: the synthetic connected digits (local.digits, made at 8 kHz) mixed into every FSDD fold.

    python -m local.digits_fsdd --config recipes/digits_fsdd/config.yaml --out-dir data [--corpus-dir FSDD/recordings]

Layout in ``out_dir``: ``fsdd/`` (local.fsdd: ``all``, folds, speed perturbation), ``digits/`` (local.digits at
``data.sample_rate`` with ``data.size``, ``data.train_scale``, ``data.seed``, ``data.noise_fraction``), and for
every FSDD fold ``<fold>/{train,dev,test,test_synth}``: ``train`` is the fold's FSDD train set multiplexed with
the synthetic train set by lhotse's ``CutSet.mux`` with ``data.mix_weights`` = [FSDD weight, synthetic weight] (the
synthetic stream repeats as needed — a repeated utterance gets the id ``<utt>_repeat<i>`` — and the mix stops when
the FSDD stream ends, so the synthetic share is w_synth / (w_fsdd + w_synth) in expectation); ``dev``/``test`` are
the fold's FSDD speakers, ``test_synth`` the synthetic test voices (never heard in training). ``folds.txt`` lists the
folds, as for FSDD, so ``python -m local.fsdd report`` makes the same tables.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from asrlib.config import DataConfig
from asrlib.data.corpus import corpus_main, read_kaldi_tables, subset_data_dir, write_tables
from asrlib.errors import AsrError
from asrlib.io.stage import is_done, mark_done
from asrlib.io.tables import read_table_dict, write_table
from local.fsdd import is_fsdd_dir, prepare_fsdd

log = logging.getLogger("local.digits_fsdd")


def _cuts(data_dir: Path, sample_rate: int):
    """A lhotse CutSet of a Kaldi data dir with plain wav.scp paths and whole-file utterances."""
    import soundfile as sf
    from lhotse import CutSet, Recording, RecordingSet, SupervisionSegment, SupervisionSet
    from lhotse.audio import AudioSource

    t = read_kaldi_tables(data_dir)
    if "segments" in t:
        raise AsrError(f"{data_dir}: segments are not supported for mixing")
    recs, sups = [], []
    for utt, path in t["wav.scp"].items():
        n = sf.info(path).frames
        recs.append(
            Recording(
                id=utt,
                sources=[AudioSource(type="file", channels=[0], source=path)],
                sampling_rate=sample_rate,
                num_samples=n,
                duration=n / sample_rate,
            )
        )
        sups.append(
            SupervisionSegment(
                id=utt,
                recording_id=utt,
                start=0.0,
                duration=n / sample_rate,
                text=t["text"][utt],
                speaker=t["utt2spk"][utt],
            )
        )
    return CutSet.from_manifests(
        recordings=RecordingSet.from_recordings(recs), supervisions=SupervisionSet.from_segments(sups)
    )


def mix_train(
    fsdd_train: Path, synth_train: Path, dst: Path, weights: Sequence[float], sample_rate: int, seed: int = 0
) -> Dict[str, int]:
    """Write ``dst``: ``fsdd_train`` multiplexed with ``synth_train`` (repeated as needed) by ``weights``."""
    from lhotse import CutSet

    if len(weights) != 2 or min(weights) < 0 or weights[0] <= 0:
        raise AsrError(f"data.mix_weights must be [FSDD weight > 0, synthetic weight >= 0], got {list(weights)}")
    fsdd, synth = read_kaldi_tables(fsdd_train), read_kaldi_tables(synth_train)
    streams = [_cuts(fsdd_train, sample_rate)]
    if weights[1] > 0:
        streams.append(_cuts(synth_train, sample_rate).repeat(preserve_id=False))
    mixed = CutSet.mux(*streams, weights=list(weights), stop_early=True, seed=seed) if len(streams) > 1 else streams[0]
    wav: Dict[str, str] = {}
    text: Dict[str, str] = {}
    utt2spk: Dict[str, str] = {}
    counts = {"fsdd": 0, "synthetic": 0}
    seen: Dict[str, int] = {}
    for cut in mixed:
        base = cut.supervisions[0].id
        seen[base] = seen.get(base, 0) + 1
        utt = base if seen[base] == 1 else f"{base}_repeat{seen[base] - 1}"
        src = fsdd if base in fsdd["utt2spk"] else synth
        if base not in src["utt2spk"]:
            raise AsrError(f"mixing {fsdd_train} and {synth_train}: cut '{base}' is in neither")
        counts["fsdd" if src is fsdd else "synthetic"] += 1
        wav[utt], text[utt], utt2spk[utt] = src["wav.scp"][base], src["text"][base], src["utt2spk"][base]
    write_tables(dst, wav, text, utt2spk)
    return counts


def prepare_digits_fsdd(corpus_dir: Path, out_dir: Path, data: DataConfig, nj: int = 1) -> Dict[str, Path]:
    """Prepare the FSDD folds, the 8 kHz synthetic corpus and the mixed folds; returns ``{fold: data dir}``."""
    from local.digits import prepare_digits, split_counts

    out_dir = Path(out_dir)
    weights = [float(w) for w in (data.mix_weights or [0.75, 0.25])]
    fp = {
        "corpus_dir": str(Path(corpus_dir).resolve()),
        "weights": weights,
        "size": data.size,
        "seed": data.seed,
        "noise_fraction": data.noise_fraction,
        "sample_rate": data.sample_rate,
        "sp": list(data.speed_perturb),
        "level_db": data.level_db,
        **({"train_scale": data.train_scale} if data.train_scale != 1.0 else {}),
    }
    marker = out_dir / ".digits_fsdd.done"
    if is_done(marker, fingerprint=fp):
        log.info("digits+FSDD data in %s is complete; skipping", out_dir)
        return {k: Path(v) for k, v in read_table_dict(out_dir / "folds.txt").items()}
    folds = prepare_fsdd(corpus_dir, out_dir / "fsdd", data.speed_perturb, nj, data.sample_rate, data.level_db)
    prepare_digits(
        out_dir / "digits",
        seed=data.seed,
        noise_fraction=data.noise_fraction,
        nj=nj,
        sample_rate=data.sample_rate,
        counts=split_counts(data.size, data.train_scale),
    )
    mixed: Dict[str, Path] = {}
    info = {}
    for fold, d in sorted(folds.items()):
        dst = out_dir / fold
        info[fold] = mix_train(
            d / "train", out_dir / "digits" / "train", dst / "train", weights, data.sample_rate, data.seed
        )
        for s in ("dev", "test"):
            subset_data_dir(d / s, dst / s, lambda u, spk: True)
        subset_data_dir(out_dir / "digits" / "test", dst / "test_synth", lambda u, spk: True)
        mixed[fold] = dst
        log.info("%s: train = %d FSDD + %d synthetic utterances", fold, info[fold]["fsdd"], info[fold]["synthetic"])
    write_table(out_dir / "folds.txt", [(k, str(v)) for k, v in mixed.items()])
    mark_done(marker, {"train": info}, fingerprint=fp)
    return mixed


def _prepare(corpus_dir: Path, out_dir: Path, data: DataConfig, nj: int) -> None:
    prepare_digits_fsdd(corpus_dir, out_dir, data, nj)


def main(argv: Optional[List[str]] = None) -> None:
    corpus_main(_prepare, __doc__, is_fsdd_dir, "FSDD recordings folder ({digit}_{speaker}_{index}.wav files)", argv)


if __name__ == "__main__":
    main()
