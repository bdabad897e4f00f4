"""Speed perturbation of a Kaldi data dir (Kaldi's ``perturb_data_dir_speed_3way.sh``, ESPnet's ``speed_perturb``).

Each factor f != 1 gives a copy of every recording played f times faster (tempo and pitch change together, like
``sox speed f``), made with lhotse's ``Speed`` transform (band-limited resampling, no external tool) and written
as a 16-bit WAV, so ``wav.scp`` keeps plain paths. Ids follow Kaldi: utterance, speaker and recording ids get the
prefix ``sp<f>-`` (``sp0.9-george-3_george_12``), so sorting by utterance still sorts by speaker; ``segments``
times are divided by f. Factor 1.0 keeps the original entries unchanged.

    python -m local.speed_perturb --src data/train_nosp --dst data/train --wav-dir data/wav_sp --factors 0.9 1.0 1.1
"""

from __future__ import annotations

import logging
from multiprocessing import Pool
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np
from tqdm import tqdm

from asrlib.data.corpus import check_speed_factors, read_kaldi_tables, write_tables
from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import atomic_path

log = logging.getLogger(__name__)


def prefix(factor: float) -> str:
    """Kaldi's id prefix for a speed factor: ``sp0.9-``."""
    return f"sp{factor:g}-"


def perturb_samples(samples: np.ndarray, sample_rate: int, factor: float) -> np.ndarray:
    """``samples`` (float, mono) played ``factor`` times faster at the same sample rate: about len/factor samples."""
    from lhotse.augmentation.torchaudio import Speed

    return Speed(factor=factor)(samples.astype(np.float32)[None, :], sample_rate)[0]


def perturb_file(src: str, dst: str, factor: float) -> Tuple[str, int]:
    """Write ``src`` sped up by ``factor`` to ``dst`` (16-bit WAV, atomically); an existing readable ``dst`` is kept.
    Returns (dst, number of samples)."""
    import soundfile as sf

    if Path(dst).is_file():
        try:
            return dst, sf.info(dst).frames
        except RuntimeError:
            log.warning("%s is unreadable; perturbing again", dst)
    try:
        x, sr = sf.read(src, dtype="float32", always_2d=True)
    except Exception as e:  # noqa: BLE001 - reported with the file name
        raise AsrError(f"speed perturbation: cannot read {src}: {e}") from None
    if x.shape[1] != 1:
        raise AsrError(f"speed perturbation: {src} has {x.shape[1]} channels; only mono audio is supported")
    y = np.clip(perturb_samples(x[:, 0], sr, factor), -1.0, 32767 / 32768)
    with atomic_path(dst) as tmp:
        sf.write(str(tmp), np.round(y * 32768).astype(np.int16), sr, subtype="PCM_16", format="WAV")
    return dst, len(y)


def _job(args: Tuple[str, str, float]) -> Tuple[str, int]:
    return perturb_file(*args)


def _one_thread() -> None:
    """Pool initializer: one torch thread per worker (several threads per process oversubscribe the cores)."""
    import torch

    torch.set_num_threads(1)


def speed_perturb_data_dir(
    src: PathLike, dst: PathLike, factors: Sequence[float], wav_dir: PathLike, nj: int = 1
) -> int:
    """Write ``dst``: the utterances of ``src`` once per factor (see the module docstring); returns their number.

    Perturbed audio goes to ``wav_dir/sp<f>/<recording>.wav``; a rerun reuses the finished files.
    """
    factors = check_speed_factors(factors)
    if not factors:
        raise AsrError("speed perturbation needs at least one factor")
    t = read_kaldi_tables(src)
    for name in ("wav.scp", "text", "utt2spk"):
        if name not in t:
            raise AsrError(f"{src}: missing {name}")
    bad = [r for r, p in t["wav.scp"].items() if p.rstrip().endswith("|") or len(p.split()) != 1]
    if bad:
        raise AsrError(
            f"{src}/wav.scp: '{bad[0]}' is not a plain file path; import the dir with local.kaldi_import "
            "first (it materialises pipe commands)"
        )
    jobs: List[Tuple[str, str, float]] = []
    wav: Dict[str, str] = {}
    text: Dict[str, str] = {}
    utt2spk: Dict[str, str] = {}
    segs: Dict[str, Tuple[str, float, float]] = {} if "segments" in t else None  # type: ignore[assignment]
    for f in factors:
        pre = "" if f == 1.0 else prefix(f)
        for rec, path in t["wav.scp"].items():
            if f == 1.0:
                wav[rec] = path
            else:
                out = str(Path(wav_dir).resolve() / f"sp{f:g}" / f"{rec}.wav")
                jobs.append((path, out, f))
                wav[pre + rec] = out
        for utt, spk in t["utt2spk"].items():
            utt2spk[pre + utt] = pre + spk
            text[pre + utt] = t["text"].get(utt, "")
            if segs is not None:
                rec, s, e = t["segments"][utt].split()
                segs[pre + utt] = (pre + rec, float(s) / f, float(e) / f)
    missing = [u for u in t["utt2spk"] if u not in t["text"]]
    if missing:
        raise AsrError(f"{src}: utterance '{missing[0]}' has no transcript; validate the dir first")
    if jobs:
        for d in {Path(o).parent for _, o, _ in jobs}:
            d.mkdir(parents=True, exist_ok=True)
        bar = dict(total=len(jobs), desc=f"speed perturbation {src}", unit="rec", mininterval=1.0)
        if nj == 1 or len(jobs) < 8:
            for j in tqdm(jobs, **bar):
                perturb_file(*j)
        else:
            with Pool(nj, initializer=_one_thread) as pool:
                for _ in tqdm(pool.imap_unordered(_job, jobs, chunksize=16), **bar):
                    pass
    write_tables(dst, wav, text, utt2spk, segs)
    log.info("speed perturbation %s -> %s: factors %s, %d utterances", src, dst, factors, len(utt2spk))
    return len(utt2spk)
