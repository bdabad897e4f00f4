"""Small synthetic set-ups for tests and benchmarks: a learnable toy CTC task in the pipeline's real file formats.

Four "phones" A–D, words W1–W4 (W4 = two phones), features whose frames are noisy per-phone prototypes, written as
Kaldi feats.ark/scp + global CMVN, a Kaldi ``text`` file and a lang dir (lexicon.txt, tokens.txt) — so a test can
drive ``steps.train`` or the Trainer without the TTS corpus.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np

from asrlib.cli import env_with_root
from asrlib.features.cmvn import compute_global_cmvn
from asrlib.io.tables import write_table
from asrlib.kaldi_io import write_matrices

PHONES = ["A", "B", "C", "D"]
LEXICON = {"W1": ["A"], "W2": ["B"], "W3": ["C"], "W4": ["D", "A"]}


def make_toy_ctc_setup(
    root: Path, num_utts: Dict[str, int] | None = None, feat_dim: int = 20, frames_per_phone: int = 9, seed: int = 0
) -> Path:
    """Write ``root/{data,fbank}/<set>`` and ``root/lang``; returns ``root``."""
    root = Path(root)
    num_utts = num_utts or {"train": 40, "dev": 8}
    rng = np.random.default_rng(seed)
    protos = rng.normal(0, 3, size=(len(PHONES) + 1, feat_dim)).astype(np.float32)  # last = silence
    words = sorted(LEXICON)
    for name, n in num_utts.items():
        feats: List = []
        text = []
        for i in range(n):
            utt = f"spk{i % 3}-{name}-{i:04d}"
            ws = [words[j] for j in rng.integers(0, len(words), size=int(rng.integers(1, 4)))]
            segs = [protos[-1:].repeat(4, 0)]
            for w in ws:
                for ph in LEXICON[w]:
                    k = PHONES.index(ph)
                    segs.append(protos[k : k + 1].repeat(frames_per_phone + int(rng.integers(0, 4)), 0))
                segs.append(protos[-1:].repeat(3, 0))
            x = np.concatenate(segs) + rng.normal(0, 1, size=(sum(len(s) for s in segs), feat_dim))
            feats.append((utt, x.astype(np.float32)))
            text.append((utt, " ".join(ws)))
        feats.sort(key=lambda kv: kv[0])
        write_matrices(root / "fbank" / name / "feats.ark", feats)
        write_table(root / "fbank" / name / "utt2num_frames", [(u, str(len(x))) for u, x in feats])
        write_table(root / "data" / name / "text", text)
    compute_global_cmvn(root / "fbank" / "train" / "feats.scp", root / "fbank" / "train", show_progress=False)
    write_toy_lang(root / "lang")
    return root


def write_toy_lang(lang: Path) -> None:
    """The toy task's lang dir: lexicon.txt (W1-W4) and tokens.txt (blank, A-D)."""
    write_table(lang / "lexicon.txt", [(w, " ".join(p)) for w, p in LEXICON.items()])
    write_table(lang / "tokens.txt", [("<blk>", "0")] + [(p, str(i + 1)) for i, p in enumerate(PHONES)], sort=False)


def toy_config_yaml(path: Path, feat_dim: int = 20, **train_overrides) -> Path:
    """A recipe config for the toy task (tiny model, few steps; ``feat_dim`` as in :func:`make_toy_ctc_setup`)."""
    train = {
        "epochs": 2,
        "batch_seconds": 2.0,
        "lr": 0.01,
        "warmup_steps": 2,
        "checkpoint_every": 3,
        "log_every": 2,
        "num_threads": 1,
        "spec_augment": True,
        **train_overrides,
    }
    import yaml

    Path(path).write_text(
        yaml.safe_dump(
            {
                "features": {"num_mel_bins": feat_dim},
                "model": {"num_layers": 1, "hidden_size": 24, "proj_size": 12, "stack": 3, "dropout": 0.1},
                "train": train,
            }
        )
    )
    return Path(path)


ROOT = Path(__file__).resolve().parents[1]


def run_recipe(recipe: str, *args: object, cwd: Path | None = None) -> "subprocess.CompletedProcess[str]":
    """``recipes/<recipe>/run.sh ARGS --python <this interpreter>``, output captured (text)."""
    cmd = [str(ROOT / "recipes" / recipe / "run.sh"), *map(str, args), "--python", sys.executable]
    env = env_with_root(ROOT)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)


def tiny_config(src: Path, dst: Path, sections: Dict[str, dict]) -> Path:
    """Write ``src`` (a recipe YAML) with ``sections``' values merged into its sections to ``dst``; returns ``dst``."""
    import yaml

    cfg = yaml.safe_load(Path(src).read_text())
    for section, vals in sections.items():
        cfg.setdefault(section, {}).update(vals)
    Path(dst).write_text(yaml.safe_dump(cfg))
    return Path(dst)


def toy_dirs(root: Path) -> List[str]:
    """The directory options of a training step on the toy set-up written by :func:`make_toy_ctc_setup`."""
    root = Path(root)
    return ["--data-dir", str(root / "data"), "--feats-dir", str(root / "fbank"), "--lang-dir", str(root / "lang")]


def train_step(setup: Path, cfg: Path, exp: Path, *extra: str) -> "subprocess.CompletedProcess[str]":
    """``python -m steps.train`` on a set-up of :func:`make_toy_ctc_setup` (or :func:`make_audio_ctc_setup`) into
    ``exp``, output captured."""
    cmd = [sys.executable, "-m", "steps.train", "--config", str(cfg), *toy_dirs(setup), "--exp-dir", str(exp), *extra]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env_with_root(ROOT))


def final_params(path: Path) -> dict:
    """The weights in a checkpoint or final model written by training."""
    import torch

    return torch.load(path, weights_only=True)["model"]


TINY_TRAIN = {
    "epochs": 1,
    "batch_seconds": 4,
    "warmup_steps": 2,
    "checkpoint_every": 10,
    "num_threads": 1,
    "dist": {"algo": "local"},
}


def tiny_recipe_run(recipe: str, tmp_path: Path, sections: Dict[str, dict]) -> "subprocess.CompletedProcess[str]":
    """Stages 1-4 of ``recipe`` with its config changed by ``sections`` (plus one tiny training epoch, one job) into
    ``tmp_path/{data,exp}``."""
    conf = tiny_config(
        ROOT / "recipes" / recipe / "config.yaml",
        tmp_path / "tiny.yaml",
        {"features": {"nj": 1}, "train": TINY_TRAIN, **sections},
    )
    return run_recipe(
        recipe, "--config", conf, "--stop-stage", 4, "--nj", 1, "--data", tmp_path / "data", "--exp", tmp_path / "exp"
    )


def make_audio_ctc_setup(root: Path, num_utts: Dict[str, int] | None = None, num_mel_bins: int = 20) -> Path:
    """The toy task's lang and words, but with audio: ``root/data/<set>`` (wav.scp of 1-2 s tone sequences at
    16 kHz, text) and ``root/fbank/<set>`` computed from it (``num_mel_bins``), global CMVN of train. For what needs
    audio: speed perturbation, noise mixing, on-the-fly features."""
    import soundfile as sf

    from asrlib.features.fbank import compute_fbank

    root = Path(root)
    rng = np.random.default_rng(0)
    words = sorted(LEXICON)
    for name, n in (num_utts or {"train": 12, "dev": 4}).items():
        d = root / "data" / name
        (root / "wav").mkdir(parents=True, exist_ok=True)
        d.mkdir(parents=True, exist_ok=True)
        rows, text = [], []
        for i in range(n):
            utt = f"spk{i % 2}-{name}-{i:03d}"
            ws = [words[j] for j in rng.integers(0, len(words), size=int(rng.integers(1, 4)))]
            tones = [300.0 * (1 + PHONES.index(ph)) for w in ws for ph in LEXICON[w]]
            t = np.arange(int(16000 * 0.3)) / 16000
            x = np.concatenate([np.zeros(1600)] + [0.3 * np.sin(2 * np.pi * f * t) for f in tones] + [np.zeros(1600)])
            x = x + rng.normal(0, 0.003, size=len(x))
            sf.write(root / "wav" / f"{utt}.wav", x.astype(np.float32), 16000)
            rows.append((utt, str(root / "wav" / f"{utt}.wav")))
            text.append((utt, " ".join(ws)))
        write_table(d / "wav.scp", rows)
        write_table(d / "text", text)
        compute_fbank(d, root / "fbank" / name, nj=1, num_mel_bins=num_mel_bins, show_progress=False, compress=False)
    compute_global_cmvn(root / "fbank" / "train" / "feats.scp", root / "fbank" / "train", show_progress=False)
    write_toy_lang(root / "lang")
    return root


def write_noise_dir(folder: Path, sample_rates=(16000, 8000), seconds: float = 3.0) -> Path:
    """A folder of white/brown noise WAV files (one per rate in ``sample_rates``): a noise corpus for mixing."""
    import soundfile as sf

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    for i, sr in enumerate(sample_rates):
        x = rng.normal(0, 0.1, size=int(sr * seconds))
        if i % 2:
            x = np.cumsum(x) / 30.0
        sf.write(folder / f"noise{i}_{sr}.wav", x.astype(np.float32), sr)
    return folder


def toy_trainer(setup: Path, cfg_path: Path, exp: Path, device, overrides=()):
    """A Trainer on the toy set-up (:func:`make_toy_ctc_setup`) with the config at ``cfg_path`` (plus ``overrides``),
    its model built from ``train.seed``, training on ``device``; loader workers off."""
    import torch

    from asrlib.config import load_config
    from asrlib.models.lstm import build_model
    from asrlib.train.loader import CtcTargets, open_set
    from asrlib.train.trainer import Trainer

    cfg = load_config(cfg_path, list(overrides))
    cfg.train.loader.num_workers = 0
    targets = CtcTargets(setup / "lang", cfg.model.stack)
    cmvn = setup / "fbank" / "train" / "cmvn.scp"

    def ds(name):
        return open_set(setup / "fbank" / name, targets, cmvn, loader=cfg.train.loader, data_dir=setup / "data" / name)

    train, dev = ds("train"), ds("dev")
    torch.manual_seed(cfg.train.seed)
    model = build_model(train.feature_dim(), len(targets.tokens), cfg.model)
    return Trainer(cfg, model, train, dev, exp, device=device)


def concatenated_recordings(data: Path, seconds: float = 60.0):
    """A Kaldi data dir's utterances (in id order, audio as float32) in consecutive groups of at least ``seconds``
    (a shorter remainder is left out), as bench/long_form.py makes its recordings: ``([[(utt, samples), ...], ...],
    sample rate)``."""
    import soundfile as sf

    from asrlib.io.tables import read_table_dict

    wavs = read_table_dict(data / "wav.scp")
    groups, total, sr = [[]], 0.0, 0
    for utt in sorted(wavs):
        x, sr = sf.read(wavs[utt], dtype="float32")
        groups[-1].append((utt, x))
        total += len(x) / sr
        if total >= seconds:
            groups.append([])
            total = 0.0
    return [g for g in groups if sum(len(x) for _, x in g) >= seconds * sr], sr


def spec_augment_masked_fill(x, lens, max_warp: float = 0.0):
    """asrlib.train.augment.spec_augment as it was written before its masks became products (the reference that it
    must equal bit for bit, and bench/augment_speed.py's "before"): the same draws, one fill under the masks' union."""
    import torch

    from asrlib.train.augment import _span_mask, freq_warp

    x = freq_warp(x, max_warp) if max_warp > 0 else x
    n, t_max, d = x.shape
    f = (torch.rand(n, 2) * 11).long()
    f0 = (torch.rand(n, 2) * (d - f).clamp(min=1)).long()
    max_t = (lens * 0.05).long().clamp(min=1).unsqueeze(1)
    t = (torch.rand(n, 2) * (max_t + 1)).long()
    t0 = (torch.rand(n, 2) * (lens.unsqueeze(1) - t).clamp(min=1)).long()
    return x.masked_fill(_span_mask(d, f0, f).unsqueeze(1) | _span_mask(t_max, t0, t).unsqueeze(2), 0.0)


def count_network_calls(rec) -> List[int]:
    """Wrap ``rec``'s backend so that every call of a network stream it makes appends its fbank frames to the list
    returned (the offline endpointer's calls)."""
    sizes: List[int] = []
    make = rec.backend.stream

    def counting_stream():
        s = make()
        accept = s.accept

        def counted(feats):
            sizes.append(len(feats))
            return accept(feats)

        s.accept = counted
        return s

    rec.backend.stream = counting_stream
    return sizes


def longest_endpointer_call(rec) -> float:
    """Seconds of input in the longest call the offline endpointer may make in ``rec``'s call sizes: a call's worth,
    or a segment's rerun from the middle of its pause (at most ``segment_pad`` before the speech) to the end of the
    call that heard the speech."""
    calls, pad = rec.endpoint_calls, rec.decode_config.segment_pad
    return max(calls.first, pad + max(calls.segment, calls.waiting)) + rec.frame_seconds + 1e-9
