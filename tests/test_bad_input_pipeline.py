"""Every kind of bad input at once, through the real stage commands: validation → fbank → CMVN → training →
log-posteriors → decoding. Each bad utterance is excluded by the first stage able to see the problem, listed in that
stage's ``excluded.txt`` with its reason and counted on the console; no stage crashes on what an earlier one let
through, and structural problems (duplicate ids, unsorted files, utt2spk/spk2utt disagreeing) stop with an error
naming the file until ``--fix``. (The unit tests of each check are in test_validate_data.py, test_features.py,
test_train_data.py and test_config_and_options.py.)"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import soundfile as sf
import yaml

from asrlib.io.tables import read_table_dict, write_table
from asrlib.lang.graphs import build_tlg
from asrlib.lang.lexicon import write_lang_files
from helpers import LEXICON
from tone_model import SR, synth_utterance

ROOT = Path(__file__).resolve().parents[1]
ENV = {
    **{k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")},
    "PYTHONPATH": str(ROOT),
}


def _good(path: Path, words, rng) -> None:
    sf.write(str(path), synth_utterance(words, rng)[0], SR, subtype="PCM_16")


def _corrupt_header(p: Path, rng) -> None:
    _good(p, ["W1"], rng)
    b = bytearray(p.read_bytes())
    b[22:28] = struct.pack("<HI", 0, 0)  # fmt chunk: 0 channels, 0 Hz
    p.write_bytes(bytes(b))


def _truncated(p: Path, rng) -> None:
    _good(p, ["W1", "W2"], rng)
    p.write_bytes(p.read_bytes()[: 44 + 2000])


def _nan_samples(p: Path, rng) -> None:
    x = synth_utterance(["W2"], rng)[0]
    x[3000:3010] = np.nan
    sf.write(str(p), x, SR, subtype="FLOAT")


# utt id -> (how its audio is made, its transcript, the stage's excluded.txt that must list it, reason prefix)
BAD = {
    "bad-corrupt": (_corrupt_header, "W1", "data", "corrupt-header"),
    "bad-truncated": (_truncated, "W1 W2", "data", "truncated"),
    "bad-zerolen": (lambda p, r: sf.write(str(p), np.zeros(0), SR, subtype="PCM_16"), "W1", "data", "zero-length"),
    "bad-silent": (lambda p, r: sf.write(str(p), np.zeros(SR), SR, subtype="PCM_16"), "W1", "data", "silent"),
    "bad-rate8k": (
        lambda p, r: sf.write(str(p), np.resize(synth_utterance(["W3"], r)[0], 8000), 8000),
        "W3",
        "data",
        "wrong-sample-rate",
    ),
    "bad-stereo": (
        lambda p, r: sf.write(str(p), np.stack([synth_utterance(["W1"], r)[0]] * 2, 1), SR),
        "W1",
        "data",
        "multi-channel",
    ),
    "bad-notwav": (lambda p, r: p.write_text("RIFF? no, a text file\n"), "W2", "data", "not-a-wav"),
    "bad-missing": (lambda p, r: None, "W2", "data", "missing-file"),
    "bad-notext": (lambda p, r: _good(p, ["W1"], r), None, "data", "missing-transcript"),
    "bad-emptytext": (lambda p, r: _good(p, ["W1"], r), "", "data", "empty-transcript"),
    "bad-oov": (lambda p, r: _good(p, ["W1"], r), "W1 ZWEI", "data", "oov"),
    "bad-nonutf8": (lambda p, r: _good(p, ["W1"], r), b"W1 \xff\xfe", "data", "non-utf8-transcript"),
    "bad-duplicate": (lambda p, r: _good(p, ["W3"], r), "W3", "data", "duplicate-id"),  # its utt2spk line twice
    "bad-nan": (_nan_samples, "W2", "fbank", ""),
    "bad-toolong": (
        lambda p, r: sf.write(str(p), np.resize(synth_utterance(["W1"] * 8, r)[0], 31 * SR), SR, subtype="PCM_16"),
        "W1",
        "exp",
        "too long",
    ),
    "bad-infeasible": (lambda p, r: _good(p, ["W2"], r), " ".join(["W4"] * 30), "exp", "CTC infeasible"),
}


def _make_data(root: Path, rng) -> Path:
    """Kaldi data dirs train (good + every bad kind) and dev (good), one speaker per utterance."""
    words = sorted(LEXICON)
    for name, n in (("train", 24), ("dev", 4)):
        d, wavs = root / "data" / name, root / "wav" / name
        wavs.mkdir(parents=True)
        wav, text = {}, {}
        for i in range(n):
            utt = f"good-{name}-{i:02d}"
            ws = [words[j] for j in rng.integers(0, len(words), size=int(rng.integers(1, 4)))]
            _good(wavs / f"{utt}.wav", ws, rng)
            wav[utt], text[utt] = str(wavs / f"{utt}.wav"), " ".join(ws).encode()
        if name == "train":
            for utt, (make, words_, _, _) in BAD.items():
                make(wavs / f"{utt}.wav", rng)
                wav[utt] = str(wavs / f"{utt}.wav")
                if words_ is not None:
                    text[utt] = words_.encode() if isinstance(words_, str) else words_
        d.mkdir(parents=True)
        write_table(d / "wav.scp", sorted(wav.items()))
        (d / "text").write_bytes(
            b"".join(u.encode() + (b" " + t if t else b"") + b"\n" for u, t in sorted(text.items()))
        )
        write_table(d / "utt2spk", [(u, u) for u in sorted(wav)])
        write_table(d / "spk2utt", [(u, u) for u in sorted(wav)])
    return root / "data"


def _step(module: str, *args: str) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300
    )
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return r


def test_every_bad_kind_is_excluded_by_the_first_stage_that_can_see_it_and_nothing_later_crashes(tmp_path):
    rng = np.random.default_rng(0)
    data = _make_data(tmp_path, rng)
    lang = tmp_path / "lang"
    write_lang_files(lang, {w: [p] for w, p in LEXICON.items()})
    build_tlg(lang)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "features": {"num_mel_bins": 24, "nj": 1},
                "model": {"num_layers": 1, "hidden_size": 16, "proj_size": 0, "stack": 3, "dropout": 0.0},
                "train": {
                    "epochs": 1,
                    "batch_seconds": 40.0,
                    "lr": 0.01,
                    "warmup_steps": 1,
                    "checkpoint_every": 100,
                    "num_threads": 1,
                    "spec_augment": False,
                },
            }
        )
    )

    # structural problems first: an error naming the file until --fix
    train = data / "train"
    rows = (train / "utt2spk").read_text().splitlines()
    dup = [r for r in rows if r.startswith("bad-duplicate ")]
    (train / "utt2spk").write_text("\n".join(rows + dup) + "\n")  # a duplicate id
    (train / "wav.scp").write_text("\n".join((train / "wav.scp").read_text().splitlines()[::-1]) + "\n")  # unsorted
    (train / "spk2utt").write_text("everyone " + " ".join(r.split()[0] for r in rows) + "\n")  # disagrees
    validate = ["--vocab", str(lang / "lexicon.txt"), "--sample-rate", str(SR), "--max-duration", "60"]
    r = _step("steps.validate_data_dir", "--data-dir", str(train), *validate)
    assert r.returncode != 0 and "ERROR" in r.stderr and "--fix" in r.stderr, r.stderr[-2000:]
    r = _step("steps.validate_data_dir", "--data-dir", str(train), *validate, "--fix")
    assert r.returncode == 0, r.stderr[-3000:]
    printed = r.stdout + r.stderr
    r = _step("steps.validate_data_dir", "--data-dir", str(data / "dev"), *validate)
    assert r.returncode == 0, r.stderr[-3000:]

    feats = tmp_path / "fbank"
    for s in ("train", "dev"):
        r = _step("steps.compute_fbank", "--config", str(cfg), "--data-dir", str(data / s), "--out-dir", str(feats / s))
        assert r.returncode == 0, r.stderr[-3000:]
        printed += r.stdout + r.stderr
    assert (
        _step(
            "steps.compute_cmvn", "--feats", str(feats / "train/feats.scp"), "--out-dir", str(feats / "train")
        ).returncode
        == 0
    )
    exp = tmp_path / "exp"
    r = _step(
        "steps.train",
        "--config",
        str(cfg),
        "--data-dir",
        str(data),
        "--feats-dir",
        str(feats),
        "--lang-dir",
        str(lang),
        "--exp-dir",
        str(exp),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    printed += r.stdout + r.stderr
    r = _step(
        "steps.compute_logprobs",
        "--model",
        str(exp / "final.pt"),
        "--feats",
        str(feats / "train/feats.scp"),
        "--out-dir",
        str(exp / "logprobs_train"),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    for method in ("greedy", "tlg"):
        r = _step(
            "steps.decode",
            "--config",
            str(cfg),
            "--method",
            method,
            "--logprobs",
            str(exp / "logprobs_train/logprobs.scp"),
            "--lang-dir",
            str(lang),
            "--out-dir",
            str(exp / f"decode_{method}"),
        )
        assert r.returncode == 0, r.stderr[-3000:]

    lists = {
        "data": read_table_dict(train / "excluded.txt"),
        "fbank": read_table_dict(feats / "train/excluded.txt"),
        "exp": read_table_dict(exp / "excluded_train.txt"),
    }
    for utt, (_, _, where, reason) in BAD.items():
        found = [k for k, v in lists.items() if utt in v]  # in stage order
        assert found[:1] == [where], (utt, {k: v.get(utt) for k, v in lists.items()})
        assert lists[where][utt].startswith(reason), (utt, lists[where][utt])
        if where == "fbank":  # training says why it has no features
            assert lists["exp"][utt].startswith("no features (excluded at the feature stage"), lists["exp"][utt]
    assert not any(u.startswith("good-") for v in lists.values() for u in v), lists
    hyps = read_table_dict(exp / "decode_tlg/hyp.txt")
    assert sorted(hyps) == sorted(u for u in read_table_dict(feats / "train/utt2num_frames"))
    assert {u for u in hyps if u.startswith("bad-")} == {"bad-toolong", "bad-infeasible"}  # features exist: decoded
    count = {w: sum(v == w for _, _, v, _ in BAD.values()) for w in lists}  # printed counts, per stage
    assert f"excluded {count['data']} of {len(BAD) + 24} utterances" in printed, printed[-3000:]
    assert f"{count['fbank']} excluded" in printed and f"excluded {count['exp'] + count['fbank']} of" in printed
