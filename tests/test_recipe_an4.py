"""AN4 end to end on the real corpus with the recipe's default config.yaml at tiny settings: run.sh stages 1-6
(local.an4 on the FLAC files in place, 3 speakers per set, no speed perturbation; validation, fbank, lang with the
corpus dictionary and a word 3-gram, a monophone GMM-HMM of a few passes, its alignments, one cross-entropy epoch,
one CTC epoch of a tiny BLSTM started from it, greedy + TLG + GMM-HMM decoding, scoring, the WER table), then `asr
transcribe` on an AN4 test file with the experiment dir. Slow tier: about a minute on 2 idle cores."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, run_recipe, tiny_config

from asrlib.io.torchfile import load_torch

REAL = ROOT.parent / "shared" / "data" / "an4"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (REAL / "etc").is_dir(), reason=f"AN4 corpus not found at {REAL} (../shared/data/an4)"),
]

TINY = {
    "data": {"speed_perturb": [], "corpus_dir": str(REAL), "max_speakers": 3},
    "features": {"nj": 1},
    "model": {"num_layers": 1, "hidden_size": 32, "dropout": 0.0},
    "train": {"epochs": 1, "batch_seconds": 8, "warmup_steps": 5, "checkpoint_every": 1000, "spec_augment": False},
    "gmm": {"num_iters": 3, "max_iter_inc": 2, "total_gauss": 100},
    "ce": {"epochs": 1},
}


def test_an4_recipe_end_to_end(tmp_path):
    conf = tiny_config(ROOT / "recipes/an4/config.yaml", tmp_path / "tiny.yaml", TINY)
    data, exp = tmp_path / "data", tmp_path / "exp"
    r = run_recipe("an4", "--config", conf, "--data", data, "--exp", exp, "--stop-stage", 6, "--nj", 1)
    assert r.returncode == 0, r.stderr[-3000:]

    # the audio is read where it lies: wav.scp names the corpus's FLAC files, no copy is made
    wavs = [ln.split()[1] for ln in (data / "test" / "wav.scp").read_text().splitlines()]
    assert wavs and all(w.endswith(".flac") and w.startswith(str(REAL.resolve())) for w in wavs)
    spk = {s: {ln.split()[1] for ln in (data / s / "utt2spk").read_text().splitlines()} for s in ("train", "dev")}
    assert len(spk["train"]) == 3 and len(spk["dev"]) == 3 and not spk["train"] & spk["dev"]  # held-out speakers

    # the default config is the CE route: the CTC training started from the cross-entropy model, and stage 5 also
    # decoded the monophone GMM-HMM that aligned its targets
    info = load_torch(exp / "final.pt")["info"]
    assert info["init"] == "ce" and info["init_model"] == f"{exp}_ce/final.pt"
    assert (exp / "decode_test_mono" / "wer.json").is_file()
    # the WER table: every eval set and search, scored against the corpus's own transcripts. One epoch on 3
    # speakers learns next to nothing (measured: greedy 100.0 / 99.6, TLG 100.0 / 99.1 on dev / test), so the bound
    # near it is 100: no search may add words beyond the references' count (the recipe's accuracy is in
    # recipes/an4/RESULTS.md)
    results = (exp / "RESULTS.md").read_text()
    for s in ("dev", "test"):
        assert f"| {s} |" in results
        for m in ("greedy", "tlg"):
            w = json.loads((exp / f"decode_{s}_{m}" / "wer.json").read_text())
            assert w["wer"] <= 100.0, (s, m, w)
            assert w["num_words"] == sum(len(ln.split()) - 1 for ln in (data / s / "text").read_text().splitlines()), (
                s,
                m,
            )
    assert (data / "lang" / "lm_3gram.arpa").is_file() and (data / "lang" / "TLG.fst").is_file()
    assert json.loads((data / "lang" / ".done").read_text())["sources"] == {"lexicon": 101}  # the corpus dictionary

    # `asr transcribe` on an AN4 test file with the experiment dir
    flac = wavs[0]
    t = subprocess.run(
        [sys.executable, "-m", "asrlib.app.cli_asr", "transcribe", str(exp), flac, "-q"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert t.returncode == 0, t.stderr[-2000:]
    words = set((data / "lang" / "words.txt").read_text().split()[::2])
    line = t.stdout.strip().splitlines()[0].split()
    assert Path(line[0]).name in (Path(flac).name, Path(flac).stem) or line[0] in flac  # the file's own line
    assert set(line[1:]) <= words  # whatever the tiny model hears, it is said in the lexicon's words
