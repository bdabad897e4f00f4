"""The embedded default corpus: synthetic connected digits (TIDIGITS-like), spoken by espeak-ng and flite voices.

    python -m local.digits --out-dir data [--size 1.0] [--train-scale 1.0] [--seed 0] [--noise-fraction 0.3] [--nj 2]
                           [--splits train dev test]

A *speaker* is (engine, voice/accent, variant), e.g. espeak-ng accent ``en-gb-scotland`` with variant ``+f2``, or
the flite voice ``slt``. Speakers are disjoint between train, dev and test: the espeak-ng voice variants (timbres)
and the flite voices used for dev and for test are never heard in training. Every utterance is 1-7 digit words,
synthesised with a per-utterance speaking rate and pitch, resampled to ``sample_rate`` mono 16-bit, and a
``noise_fraction`` of them get white / pink / babble-like noise at 10-30 dB SNR and extra leading/trailing silence.
Everything is derived from ``seed``: the same seed gives byte-identical wavs, whatever ``nj``.

Output under ``out_dir``: ``wav/<split>/<utt>.wav``; lhotse manifests
``manifests/digits_{recordings,supervisions,cuts}_<split>.jsonl.gz``; Kaldi data dirs ``<split>/{wav.scp,text,
utt2spk,spk2utt}``; ``speakers.txt``; ``.digits.<split>.done`` / ``.digits.done`` markers. Interrupted runs resume:
finished wavs (written atomically) are not synthesised again.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from multiprocessing import Pool
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

import numpy as np
import soundfile as sf
from tqdm import tqdm

from asrlib.cli import add_config_args, run_main, setup_logging
from asrlib.config import DataConfig, load_config
from asrlib.data.corpus import save_manifest
from asrlib.data.kaldi_dir import byte_key, write_data_dir
from asrlib.data.noise import NOISE_KINDS, shaped_noise
from asrlib.errors import AsrError
from asrlib.io.atomic import atomic_path, write_json, write_text
from asrlib.io.stage import is_done, mark_done

if TYPE_CHECKING:
    import lhotse

log = logging.getLogger("local.digits")

WORDS = ("ZERO", "ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX", "SEVEN", "EIGHT", "NINE", "OH")
SPLITS = ("train", "dev", "test")
DEFAULT_COUNTS = {"train": 3000, "dev": 300, "test": 300}
GENERATOR_VERSION = 1  # bump when the synthesis recipe changes (invalidates old outputs)
FLITE_SHARE = 0.25  # fraction of each split spoken by flite voices (when the split has any)

# English accents of espeak-ng (mbrola voices need extra packages and are not used).
ESPEAK_ACCENTS = (
    "en-us",
    "en-gb",
    "en-gb-scotland",
    "en-gb-x-rp",
    "en-029",
    "en-gb-x-gbclan",
    "en-gb-x-gbcwmd",
    "en-us-nyc",
)
# Voice variants (timbres) per split: disjoint, so dev/test voices are never heard in training.
ESPEAK_VARIANTS = {
    "train": ("m1", "m2", "m4", "m5", "m7", "m8", "f1", "f3", "f5", "klatt", "klatt3", "klatt5", "klatt6"),
    "dev": ("m3", "f2", "klatt2"),
    "test": ("m6", "f4", "klatt4"),
}
# flite voices per split (kal and kal16 are the same talker, so both stay in train) and their typical F0 (Hz).
FLITE_VOICES = {"train": ("kal", "kal16", "awb"), "dev": ("slt",), "test": ("rms",)}
FLITE_F0 = {"kal": 90.0, "kal16": 90.0, "awb": 130.0, "rms": 100.0, "slt": 170.0}
FLITE_F0_RANGE = (0.85, 1.2)  # an utterance's mean F0: the voice's FLITE_F0 x uniform(range) (data.train_flite_f0)
# flite has only two distinct talkers for training, so each training flite voice is also spoken through a sox `pitch`
# shift (pitch and formants together, like a shorter or longer vocal tract): extra pseudo-talkers, train split only.
FLITE_TRAIN_SHIFTS = (0, -250, 250, 500)  # cents (data.train_flite_shifts); 0 = the voice as it is


def shift_variant(cents: int) -> str:
    """The speaker variant of a flite voice shifted by ``cents``: "" (none), "up500", "down250"."""
    return "" if cents == 0 else f"up{cents}" if cents > 0 else f"down{-cents}"


def variant_cents(variant: str) -> int:
    """The inverse of :func:`shift_variant`."""
    if not variant:
        return 0
    return int(variant[2:]) if variant.startswith("up") else -int(variant[4:])


def check_shifts(shifts: Sequence[int]) -> None:
    if not shifts or len(set(shifts)) != len(shifts) or any(not isinstance(c, int) or abs(c) > 1200 for c in shifts):
        raise AsrError(f"data.train_flite_shifts must be distinct whole cents within ±1200, got {list(shifts)}")


# ------------------------------------------------------------------------------------------------ speakers
@dataclass(frozen=True)
class Speaker:
    engine: str  # "espeak" | "flite"
    voice: str  # espeak-ng accent or flite voice
    variant: str  # espeak-ng variant; for flite "" or a pitch/formant shift (shift_variant)

    @property
    def id(self) -> str:
        """Speaker id of only [a-z0-9_], so '<spk>-<n>' utterance ids sort consistently with speaker ids."""
        parts = [self.engine, self.voice] + ([self.variant] if self.variant else [])
        return re.sub(r"[^a-z0-9]+", "_", "_".join(parts).lower())


def _run(cmd: Sequence[str], **kw) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(cmd), capture_output=True, check=True, **kw)
    except FileNotFoundError:
        raise AsrError(
            f"'{cmd[0]}' is not installed; install it (Debian: apt-get install espeak-ng flite sox)"
        ) from None
    except subprocess.CalledProcessError as e:
        err = e.stderr.decode(errors="replace").strip()[-300:] if e.stderr else ""
        raise AsrError(f"command failed ({e.returncode}): {' '.join(cmd)}\n{err}") from None


@lru_cache(maxsize=1)
def available_voices() -> Tuple[Tuple[str, ...], Tuple[str, ...], Tuple[str, ...]]:
    """(espeak-ng English accents, espeak-ng variants, flite voices) installed on this machine."""
    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            raise AsrError(
                f"'{tool}' is not installed; it is needed to synthesise the digits corpus "
                "(Debian/Ubuntu: apt-get install espeak-ng flite sox)"
            )
    listing = _run(["espeak-ng", "--voices=en"]).stdout.decode(errors="replace").splitlines()[1:]
    accents = {cols[1] for cols in (ln.split() for ln in listing) if len(cols) >= 5 and not cols[4].startswith("mb/")}
    listing = _run(["espeak-ng", "--voices=variant"]).stdout.decode(errors="replace").splitlines()[1:]
    variants = {ln.split("!v/")[1].split()[0] for ln in listing if "!v/" in ln}
    flite: Tuple[str, ...] = ()
    if shutil.which("flite"):
        out = _run(["flite", "-lv"]).stdout.decode(errors="replace")
        flite = tuple(out.split(":", 1)[-1].split())
    else:
        log.warning("flite is not installed: the corpus will use espeak-ng voices only (apt-get install flite)")
    return (tuple(a for a in ESPEAK_ACCENTS if a in accents), tuple(sorted(variants)), flite)


def split_speakers(train_flite_shifts: Sequence[int] = FLITE_TRAIN_SHIFTS) -> Dict[str, List[Speaker]]:
    """The speakers of each split (disjoint), limited to the voices installed here; each training flite voice is
    also spoken through each of ``train_flite_shifts`` (cents)."""
    accents, variants, flite = available_voices()
    if not accents:
        raise AsrError("espeak-ng has none of the English voices " + ", ".join(ESPEAK_ACCENTS))
    out: Dict[str, List[Speaker]] = {}
    for split in SPLITS:
        spk = [Speaker("espeak", a, v) for a in accents for v in ESPEAK_VARIANTS[split] if v in variants]
        shifts = [shift_variant(c) for c in (train_flite_shifts if split == "train" else (0,))]
        spk += [Speaker("flite", v, sh) for v in FLITE_VOICES[split] if v in flite for sh in shifts]
        if not spk:
            raise AsrError(
                f"no installed voice is available for the {split} split; install espeak-ng (with its "
                f"variants {ESPEAK_VARIANTS[split]}) and flite"
            )
        missing = [v for v in FLITE_VOICES[split] if v not in flite]
        if missing:
            log.warning("flite voice(s) %s not installed; %s has fewer speakers", missing, split)
        out[split] = spk
    return out


# ------------------------------------------------------------------------------------------------ plan
@dataclass(frozen=True)
class UttPlan:
    """Everything needed to synthesise one utterance (picklable, fully determined by the seed)."""

    utt: str
    split: str
    speaker: Speaker
    words: Tuple[str, ...]
    rate: float  # espeak: words per minute; flite: duration stretch
    pitch: float  # espeak: 0-99; flite: target mean F0 in Hz
    gap: int  # espeak: extra pause between words (units of 10 ms)
    noise: str  # "" (clean) | "white" | "pink" | "babble"
    snr_db: float
    seed: int  # seeds the utterance's noise/silence/level generator
    path: str
    sample_rate: int


def plan_split(
    split: str,
    n: int,
    speakers: List[Speaker],
    seed: int,
    noise_fraction: float,
    wav_dir: Path,
    sample_rate: int,
    flite_share: float = FLITE_SHARE,
    flite_f0: Sequence[float] = FLITE_F0_RANGE,
) -> List[UttPlan]:
    """Choose text, speaker, prosody and noise of each of the ``n`` utterances of ``split`` (``flite_share`` of
    them spoken by flite voices)."""
    rng = np.random.default_rng([seed, SPLITS.index(split), 7919])
    espeak = [s for s in speakers if s.engine == "espeak"]
    flite = [s for s in speakers if s.engine == "flite"]
    if not flite:
        n_flite = 0
    elif not espeak:
        n_flite = n
    else:  # at least one utterance of each engine when n >= 2
        n_flite = min(n - 1, max(1, round(n * flite_share))) if n > 1 else 0
    espeak = [espeak[i] for i in rng.permutation(len(espeak))]
    flite = [flite[i] for i in rng.permutation(len(flite))]
    assigned = [flite[i % len(flite)] for i in range(n_flite)] + [espeak[i % len(espeak)] for i in range(n - n_flite)]
    assigned = [assigned[i] for i in rng.permutation(n)]
    noisy = set(rng.permutation(n)[: round(n * noise_fraction)].tolist())
    plans = []
    for i, spk in enumerate(assigned):
        words = tuple(WORDS[j] for j in rng.integers(0, len(WORDS), size=int(rng.integers(1, 8))))
        if spk.engine == "espeak":
            rate, pitch, gap = float(rng.integers(125, 201)), float(rng.integers(25, 76)), int(rng.integers(0, 3))
        else:
            rate = round(float(rng.uniform(0.85, 1.25)), 3)
            pitch, gap = round(FLITE_F0.get(spk.voice, 110.0) * float(rng.uniform(*flite_f0)), 1), 0
        noise = str(rng.choice(NOISE_KINDS)) if i in noisy else ""
        snr = round(float(rng.uniform(10.0, 30.0)), 2)
        utt = f"{spk.id}-{i:05d}"
        plans.append(
            UttPlan(
                utt,
                split,
                spk,
                words,
                rate,
                pitch,
                gap,
                noise,
                snr,
                int(rng.integers(2**31)),
                str(wav_dir / f"{utt}.wav"),
                sample_rate,
            )
        )
    return plans


# ------------------------------------------------------------------------------------------------ synthesis
def _tts(plan: UttPlan, tmp_wav: str) -> None:
    text = " ".join(w.lower() for w in plan.words)
    spk = plan.speaker
    if spk.engine == "espeak":
        _run(
            [
                "espeak-ng",
                "-v",
                f"{spk.voice}+{spk.variant}",
                "-s",
                str(int(plan.rate)),
                "-p",
                str(int(plan.pitch)),
                "-g",
                str(plan.gap),
                "-w",
                tmp_wav,
                text,
            ]
        )
    else:
        _run(
            [
                "flite",
                "-voice",
                spk.voice,
                "--setf",
                f"duration_stretch={plan.rate}",
                "--setf",
                f"int_f0_target_mean={plan.pitch}",
                "-t",
                text,
                "-o",
                tmp_wav,
            ]
        )
        if variant_cents(spk.variant):
            shifted = tmp_wav + ".shift.wav"
            _run(["sox", "-D", "-V1", tmp_wav, shifted, "pitch", str(variant_cents(spk.variant))])
            os.replace(shifted, tmp_wav)


def _resample(in_wav: str, sample_rate: int) -> np.ndarray:
    """Any wav -> mono samples in [-1, 1) at ``sample_rate`` (sox, no dither, only when a conversion is needed)."""
    info = sf.info(in_wav)
    if info.samplerate == sample_rate and info.channels == 1:
        return sf.read(in_wav, dtype="float64")[0]
    out = _run(
        [
            "sox",
            "-D",
            "-R",
            "-V1",
            in_wav,
            "-t",
            "raw",
            "-e",
            "floating-point",
            "-b",
            "32",
            "-c",
            "1",
            "-r",
            str(sample_rate),
            "-",
        ]
    ).stdout
    return np.frombuffer(out, dtype="<f4").astype(np.float64)


def _postprocess(speech: np.ndarray, plan: UttPlan) -> np.ndarray:
    """Level, silences, noise and a tiny noise floor (avoids log(0) in features); returns int16 samples."""
    rng = np.random.default_rng(plan.seed)
    sr = plan.sample_rate
    peak = np.max(np.abs(speech)) + 1e-9
    speech = speech / peak * 10 ** (rng.uniform(-12.0, -2.0) / 20)
    lo, hi = (0.1, 0.8) if plan.noise else (0.05, 0.2)
    lead, trail = (int(rng.uniform(lo, hi) * sr) for _ in range(2))
    x = np.concatenate([np.zeros(lead), speech, np.zeros(trail)])
    if plan.noise:
        active = speech[np.abs(speech) > 0.02 * np.max(np.abs(speech))]
        p_speech = np.mean(active**2) if active.size else np.mean(speech**2)
        noise = shaped_noise(rng, len(x), sr, plan.noise)
        x = x + noise * np.sqrt(p_speech / 10 ** (plan.snr_db / 10))
    x = x + rng.standard_normal(len(x)) * 3e-5
    peak = np.max(np.abs(x))
    if peak > 0.99:
        x *= 0.99 / peak
    return np.round(x * 32767).astype(np.int16)


def synthesize(plan: UttPlan) -> Tuple[str, int]:
    """Create ``plan.path`` (atomically) unless it already exists; returns (utt, number of samples)."""
    path = Path(plan.path)
    if path.is_file():
        try:
            return plan.utt, sf.info(str(path)).frames
        except RuntimeError:
            log.warning("%s is unreadable; synthesising it again", path)
    with tempfile.TemporaryDirectory(prefix="digits_") as tmp:
        tts_wav = os.path.join(tmp, "tts.wav")
        _tts(plan, tts_wav)
        speech = _resample(tts_wav, plan.sample_rate)
    if speech.size == 0 or not np.any(speech):
        raise AsrError(
            f"{plan.speaker.engine} produced no audio for {plan.utt} ({' '.join(plan.words)}); "
            f"check that voice '{plan.speaker.voice}' works"
        )
    samples = _postprocess(speech, plan)
    with atomic_path(path) as tmp_path:
        sf.write(str(tmp_path), samples, plan.sample_rate, subtype="PCM_16", format="WAV")
    return plan.utt, len(samples)


# ------------------------------------------------------------------------------------------------ outputs
def manifest_paths(out_dir: Path, split: str) -> Dict[str, Path]:
    return {
        kind: out_dir / "manifests" / f"digits_{kind}_{split}.jsonl.gz"
        for kind in ("recordings", "supervisions", "cuts")
    }


def _write_split_outputs(out_dir: Path, split: str, plans: List[UttPlan], num_samples: Dict[str, int]) -> None:
    from lhotse import CutSet, Recording, RecordingSet, SupervisionSegment, SupervisionSet
    from lhotse.audio import AudioSource

    recs, sups = [], []
    for p in plans:
        n = num_samples[p.utt]
        recs.append(
            Recording(
                id=p.utt,
                sources=[AudioSource(type="file", channels=[0], source=p.path)],
                sampling_rate=p.sample_rate,
                num_samples=n,
                duration=n / p.sample_rate,
            )
        )
        sups.append(
            SupervisionSegment(
                id=p.utt,
                recording_id=p.utt,
                start=0.0,
                duration=n / p.sample_rate,
                channel=0,
                text=" ".join(p.words),
                language="English",
                speaker=p.speaker.id,
                custom={
                    "engine": p.speaker.engine,
                    "voice": p.speaker.voice,
                    "variant": p.speaker.variant,
                    "noise": p.noise or "none",
                    "snr_db": p.snr_db if p.noise else None,
                },
            )
        )
    recordings = RecordingSet.from_recordings(recs)
    supervisions = SupervisionSet.from_segments(sups)
    cuts = CutSet.from_manifests(recordings=recordings, supervisions=supervisions)
    cuts = cuts.modify_ids(lambda cid: cid.rsplit("-", 1)[0])  # lhotse names cuts '<rec>-<index>'
    paths = manifest_paths(out_dir, split)
    paths["cuts"].parent.mkdir(parents=True, exist_ok=True)
    save_manifest(recordings, paths["recordings"])
    save_manifest(supervisions, paths["supervisions"])
    save_manifest(cuts, paths["cuts"])
    write_data_dir(
        out_dir / split,
        wav={p.utt: p.path for p in plans},
        text={p.utt: " ".join(p.words) for p in plans},
        utt2spk={p.utt: p.speaker.id for p in plans},
    )


def _write_speakers(out_dir: Path, plans: Dict[str, List[UttPlan]]) -> None:
    rows = []
    for split, ps in plans.items():
        counts: Dict[Speaker, int] = {}
        for p in ps:
            counts[p.speaker] = counts.get(p.speaker, 0) + 1
        for spk, n in counts.items():
            rows.append(f"{split} {spk.id} {spk.engine} {spk.voice} {spk.variant or '-'} {n}")
        engines = sorted({s.engine for s in counts})
        log.info(
            "%s: %d utterances from %d speakers (%s); flite voices: %s; espeak variants: %s",
            split,
            len(ps),
            len(counts),
            "+".join(engines),
            sorted({s.voice for s in counts if s.engine == "flite"}),
            sorted({s.variant for s in counts if s.engine == "espeak"}),
        )
    rows.sort(key=byte_key)
    write_text(out_dir / "speakers.txt", "# split speaker engine voice variant num_utts\n" + "\n".join(rows) + "\n")


def _load_cuts(out_dir: Path, split: str) -> "lhotse.CutSet":
    from lhotse import CutSet

    from asrlib.data.corpus import load_manifest

    return load_manifest(manifest_paths(out_dir, split)["cuts"], CutSet)


def _check_params(out_dir: Path, params: dict) -> None:
    """Refuse to mix outputs of different settings in one directory."""
    path = out_dir / ".digits.params.json"
    if path.is_file():
        import json

        old = json.loads(path.read_text())
        if old != params:
            diff = {k: (old.get(k), params.get(k)) for k in set(old) | set(params) if old.get(k) != params.get(k)}
            raise AsrError(
                f"{out_dir} holds a digits corpus made with other settings (old, new): {diff}; "
                "delete that directory or choose another --out-dir"
            )
    else:
        write_json(path, params)


# ------------------------------------------------------------------------------------------------ main API
def split_counts(size: float = 1.0, train_scale: float = 1.0) -> Dict[str, int]:
    """Utterances per split: the default 3000/300/300 times ``size``, the training set times ``train_scale`` too.

    A split's utterances depend only on its count and the seed, so ``train_scale`` 1.5 trains on 4500 and keeps the
    dev and test sets of ``train_scale`` 1.0 utterance for utterance (results stay comparable).
    """
    if not (size > 0 and train_scale > 0):
        raise AsrError(f"--size and --train-scale must be positive, got {size} and {train_scale}")
    return {s: max(1, round(n * size * (train_scale if s == "train" else 1.0))) for s, n in DEFAULT_COUNTS.items()}


def prepare_digits(
    out_dir: Path,
    size: float = 1.0,
    seed: int = 0,
    noise_fraction: float = 0.3,
    nj: int = 2,
    sample_rate: int = 16000,
    counts: Optional[dict] = None,
    train_flite_share: float = FLITE_SHARE,
    train_flite_shifts: Sequence[int] = FLITE_TRAIN_SHIFTS,
    train_flite_f0: Sequence[float] = FLITE_F0_RANGE,
) -> Dict[str, "lhotse.CutSet"]:
    """Synthesise (or resume / reuse) the digits corpus in ``out_dir``; returns the CutSet of each split.

    ``counts`` (e.g. ``{"train": 12, "dev": 4, "test": 4}``, or :func:`split_counts`) overrides the default sizes
    3000/300/300 x ``size``. ``train_flite_share``: the share of the training set spoken by flite voices (dev and
    test keep ``FLITE_SHARE``, so their utterances do not change). ``train_flite_shifts``: the pitch/formant shifts
    (cents) each training flite voice is spoken through; ``train_flite_f0``: the range of a training flite
    utterance's mean F0 as multiples of its voice's FLITE_F0 (dev and test do not change).
    """
    out_dir = Path(out_dir).resolve()
    if counts is None:
        counts = split_counts(size)
    bad = {k: v for k, v in counts.items() if k not in SPLITS or not isinstance(v, int) or v < 1}
    if bad:
        raise AsrError(f"bad utterance counts {bad}: splits are {SPLITS}, counts positive integers")
    if not 0.0 <= noise_fraction <= 1.0:
        raise AsrError(f"--noise-fraction must be within [0, 1], got {noise_fraction}")
    if not 0.0 < train_flite_share < 1.0:
        raise AsrError(f"--train-flite-share must be within (0, 1), got {train_flite_share}")
    check_shifts(train_flite_shifts)
    if len(train_flite_f0) != 2 or not 0.25 <= train_flite_f0[0] <= train_flite_f0[1] <= 4.0:
        raise AsrError(f"data.train_flite_f0 must be [low, high] within [0.25, 4], got {list(train_flite_f0)}")
    if nj < 1 or sample_rate < 8000:
        raise AsrError(f"need nj >= 1 and sample_rate >= 8000 (got nj={nj}, sample_rate={sample_rate})")
    params = {
        "version": GENERATOR_VERSION,
        "seed": seed,
        "counts": dict(sorted(counts.items())),
        "noise_fraction": noise_fraction,
        "sample_rate": sample_rate,
        # only when it differs from the default, so corpora made before the setting existed stay valid
        **({"train_flite_share": train_flite_share} if train_flite_share != FLITE_SHARE else {}),
        **({"train_flite_shifts": list(train_flite_shifts)} if tuple(train_flite_shifts) != FLITE_TRAIN_SHIFTS else {}),
        **({"train_flite_f0": list(train_flite_f0)} if tuple(train_flite_f0) != FLITE_F0_RANGE else {}),
    }
    splits = [s for s in SPLITS if s in counts]
    if is_done(out_dir / ".digits.done") and all(is_done(out_dir / f".digits.{s}.done") for s in splits):
        _check_params(out_dir, params)
        log.info(
            "digits corpus in %s is complete; skipping (delete %s to regenerate)", out_dir, out_dir / ".digits.done"
        )
        return {s: _load_cuts(out_dir, s) for s in splits}
    out_dir.mkdir(parents=True, exist_ok=True)
    _check_params(out_dir, params)

    speakers = split_speakers(train_flite_shifts)
    plans = {
        s: plan_split(
            s,
            counts[s],
            speakers[s],
            seed,
            noise_fraction,
            out_dir / "wav" / s,
            sample_rate,
            train_flite_share if s == "train" else FLITE_SHARE,
            train_flite_f0 if s == "train" else FLITE_F0_RANGE,
        )
        for s in splits
    }
    _write_speakers(out_dir, plans)
    start = time.time()
    for split in splits:
        if is_done(out_dir / f".digits.{split}.done"):
            log.info("%s already generated; skipping", split)
            continue
        wav_dir = out_dir / "wav" / split
        wav_dir.mkdir(parents=True, exist_ok=True)
        for stale in wav_dir.glob(".*.wav.*.tmp"):  # left by a killed run (atomic writes)
            stale.unlink()
        num_samples = _run_jobs(plans[split], nj, f"synthesising {split}")
        _write_split_outputs(out_dir, split, plans[split], num_samples)
        hours = sum(num_samples.values()) / sample_rate / 3600
        mark_done(
            out_dir / f".digits.{split}.done",
            {**params, "split": split, "utterances": len(plans[split]), "hours": round(hours, 4)},
        )
    mark_done(out_dir / ".digits.done", {**params, "seconds": round(time.time() - start, 1)})
    log.info("digits corpus ready in %s (%.1f s)", out_dir, time.time() - start)
    return {s: _load_cuts(out_dir, s) for s in splits}


def _run_jobs(plans: List[UttPlan], nj: int, desc: str) -> Dict[str, int]:
    bar = dict(total=len(plans), desc=desc, unit="utt", smoothing=0.1)
    if nj == 1 or len(plans) < 4:
        return dict(synthesize(p) for p in tqdm(plans, **bar))
    with Pool(nj) as pool:
        return dict(tqdm(pool.imap_unordered(synthesize, plans, chunksize=8), **bar))


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", type=Path, required=True, help="where wav/, manifests/ and <split>/ go")
    add_config_args(p, required=False, help="recipe YAML: its data section gives the defaults of the options below")
    p.add_argument("--size", type=float, help="scales the default 3000/300/300 utterances (default 1.0)")
    p.add_argument("--train-scale", type=float, help="scales the training set on top of --size (default 1.0)")
    p.add_argument("--seed", type=int, help="default 0")
    p.add_argument("--noise-fraction", type=float, help="fraction of utterances with added noise (default 0.3)")
    p.add_argument("--train-flite-share", type=float, help="share of training utterances spoken by flite (0.25)")
    p.add_argument("--train-flite-shifts", type=int, nargs="+", help="cents (default 0 -250 250 500)")
    p.add_argument("--train-flite-f0", type=float, nargs=2, help="F0 range x the voice's (default 0.85 1.2)")
    p.add_argument("--nj", type=int, default=2, help="parallel synthesis processes")
    p.add_argument("--sample-rate", type=int, help="default 16000")
    p.add_argument(
        "--splits",
        nargs="+",
        choices=SPLITS,
        default=list(SPLITS),
        help="synthesise only these splits (e.g. a larger test set: --splits test --size 20 --seed 1)",
    )
    args = p.parse_args(argv)
    if args.overrides and not args.config:
        raise AsrError("--set needs --config (the overrides change that config's values)")
    data = load_config(args.config, args.overrides).data if args.config else DataConfig()
    pick = lambda v, d: d if v is None else v  # noqa: E731
    setup_logging()
    counts = split_counts(pick(args.size, data.size), pick(args.train_scale, data.train_scale))
    counts = {k: n for k, n in counts.items() if k in args.splits}
    prepare_digits(
        args.out_dir,
        seed=pick(args.seed, data.seed),
        noise_fraction=pick(args.noise_fraction, data.noise_fraction),
        nj=args.nj,
        sample_rate=pick(args.sample_rate, data.sample_rate),
        counts=counts,
        train_flite_share=pick(args.train_flite_share, data.train_flite_share),
        train_flite_shifts=pick(args.train_flite_shifts, data.train_flite_shifts),
        train_flite_f0=pick(args.train_flite_f0, data.train_flite_f0),
    )
    return 0


if __name__ == "__main__":
    run_main(main)
