"""A tiny *audio* task for recognizer tests: "phones" are pure tones, words are the toy lexicon of tests/helpers.py.

:func:`tone_model` writes 16 kHz WAVs (Kaldi data dirs train/dev/test), computes fbank and CMVN with the real
feature stage, builds words.txt and TLG.fst with the real lang code, trains a small LSTM-CTC with ``steps.train``
(a few seconds on one core) and returns the paths. The result is cached under pytest's base temp dir, so the
test files of one session train once.
"""

from __future__ import annotations

import contextlib
import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import soundfile as sf
import yaml

from helpers import LEXICON, PHONES
from asrlib.io.tables import write_table

SR = 16000
TONES = {"A": 450.0, "B": 800.0, "C": 1400.0, "D": 2500.0}
NUM_MEL_BINS = 24


@dataclass
class ToneModel:
    root: Path
    exp: Path  # holds final.pt (trained), info["lang_dir"] = root/lang
    lang: Path
    data: Path  # data/{train,dev,test}/{wav.scp,text}
    fbank: Path  # fbank/{train,dev,test}/feats.scp


def synth_utterance(
    words: List[str], rng: np.random.Generator, sr: int = SR
) -> Tuple[np.ndarray, List[Tuple[str, float, float]]]:
    """Silence, then each word's phones as tone bursts (gaps between words), then silence; light noise.

    Returns the samples and each word's true ``(word, start, end)`` in seconds."""
    parts = [np.zeros(int(rng.uniform(0.15, 0.3) * sr))]
    pos = len(parts[0])
    spans = []
    for w in words:
        start = pos
        for ph in LEXICON[w]:
            n = int(rng.uniform(0.12, 0.2) * sr)
            t = np.arange(n) / sr
            env = np.minimum(1.0, np.minimum(t, t[::-1]) / 0.01)  # 10 ms ramps
            parts.append(0.3 * env * np.sin(2 * np.pi * TONES[ph] * t + rng.uniform(0, 6.28)))
            pos += n
        spans.append((w, start / sr, pos / sr))
        gap = int(rng.uniform(0.1, 0.2) * sr)
        parts.append(np.zeros(gap))
        pos += gap
    parts.append(np.zeros(int(rng.uniform(0.1, 0.25) * sr)))
    x = np.concatenate(parts)
    return (x + rng.normal(0, 0.003, len(x))).astype(np.float32), spans


def _write_set(root: Path, name: str, n: int, rng: np.random.Generator, max_words: int = 4) -> None:
    vocab = sorted(LEXICON)
    wav, text = [], []
    for i in range(n):
        utt = f"tone-{name}-{i:03d}"
        words = [vocab[j] for j in rng.integers(0, len(vocab), size=int(rng.integers(1, max_words + 1)))]
        path = root / "wav" / name / f"{utt}.wav"
        path.parent.mkdir(parents=True, exist_ok=True)
        sf.write(str(path), synth_utterance(words, rng)[0], SR, subtype="PCM_16")
        wav.append((utt, str(path)))
        text.append((utt, " ".join(words)))
    write_table(root / "data" / name / "wav.scp", wav)
    write_table(root / "data" / name / "text", text)


def build_tone_model(
    root: Path,
    sizes: Dict[str, int] | None = None,
    epochs: int = 12,
    seed: int = 0,
    max_words: int = 8,
    cmvn: str = "global",
) -> ToneModel:
    from asrlib.features.cmvn import compute_global_cmvn
    from asrlib.features.fbank import compute_fbank
    from asrlib.lang.graphs import build_tlg
    from asrlib.lang.lexicon import write_lang_files
    from steps import train

    root = Path(root)
    sizes = sizes or {"train": 60, "dev": 6, "test": 8}
    rng = np.random.default_rng(seed)
    for name, n in sizes.items():
        _write_set(root, name, n, rng, max_words if name == "train" else 4)
        compute_fbank(root / "data" / name, root / "fbank" / name, nj=1, num_mel_bins=NUM_MEL_BINS, show_progress=False)
    compute_global_cmvn(root / "fbank" / "train" / "feats.scp", root / "fbank" / "train", show_progress=False)
    lang = root / "lang"
    write_lang_files(lang, {w: [list(p)] for w, p in LEXICON.items()})
    build_tlg(lang)
    assert sorted(PHONES) == sorted(TONES)
    cfg = root / "config.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "features": {"num_mel_bins": NUM_MEL_BINS, "cmvn": cmvn},
                "model": {
                    "num_layers": 1,
                    "hidden_size": 32,
                    "proj_size": 16,
                    "stack": 3,
                    "dropout": 0.0,
                    "peephole": False,
                },
                "train": {
                    "epochs": epochs,
                    "batch_seconds": 8.0,
                    "lr": 0.02,
                    "warmup_steps": 5,
                    "checkpoint_every": 1000,
                    "log_every": 1000,
                    "num_threads": 1,
                    "spec_augment": False,
                    "seed": seed,
                },
            }
        )
    )
    exp = root / "exp"
    root_logger = logging.getLogger()
    before = list(root_logger.handlers)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            rc = train.main(
                [
                    "--config",
                    str(cfg),
                    "--data-dir",
                    str(root / "data"),
                    "--feats-dir",
                    str(root / "fbank"),
                    "--lang-dir",
                    str(lang),
                    "--exp-dir",
                    str(exp),
                ]
            )
    finally:  # steps.train replaced the root logger's handlers (train.log + stderr): put the old ones back
        for h in list(root_logger.handlers):
            if h not in before:
                root_logger.removeHandler(h)
                h.close()
        for h in before:
            if h not in root_logger.handlers:
                root_logger.addHandler(h)
    assert rc == 0
    return ToneModel(root, exp, lang, root / "data", root / "fbank")


def tone_model(tmp_path_factory, cmvn: str = "global") -> ToneModel:
    """The session's tone model (built once per ``features.cmvn`` mode, reused by every test file of the
    session)."""
    root = tmp_path_factory.getbasetemp() / ("tone_model" if cmvn == "global" else f"tone_model_{cmvn}")
    done = root / "BUILT"
    if not done.is_file():
        build_tone_model(root, cmvn=cmvn)
        done.write_text("ok\n")
    return ToneModel(root, root / "exp", root / "lang", root / "data", root / "fbank")


def read_texts(path: Path) -> Dict[str, str]:
    out = {}
    for line in Path(path).read_text().splitlines():
        k, _, v = line.partition(" ")
        out[k] = v.strip()
    return out


def utterance_audio(tm: ToneModel, name: str) -> List[Tuple[str, np.ndarray]]:
    rows = []
    for line in (tm.data / name / "wav.scp").read_text().splitlines():
        utt, path = line.split(maxsplit=1)
        x, sr = sf.read(path, dtype="float32")
        assert sr == SR
        rows.append((utt, x))
    return rows
