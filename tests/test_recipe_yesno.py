"""yesno end to end on the real corpus with a tiny model: run.sh stages 1-6 (lhotse data prep, validation, fbank,
lang, BLSTM-CTC training, greedy + TLG decoding, scoring), then Snakemake finds every stage done."""

import json
from pathlib import Path

import pytest
import yaml
from helpers import run_recipe

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "yesno" / "waves_yesno"
pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason=f"real yesno data not found at {REAL} (../shared/data)")

# Tiny: no speed perturbation, a 1-layer BLSTM, 12 epochs of 2-recording batches (about 1 min on 2 idle cores).
TINY = {
    "data": {"speed_perturb": [], "corpus_dir": str(REAL)},
    "model": {"num_layers": 1, "hidden_size": 48, "dropout": 0.0},
    "train": {"epochs": 12, "lr": 0.006, "warmup_steps": 20, "spec_augment": False, "checkpoint_every": 1000},
}
# %WER bounds on the 240 test words (one error: 0.42 points): the full recipe reaches 0.00 (known length; 0.42
# through the word loop); this tiny run measured TLG 3.75 and, at an earlier commit, 6.25; greedy 5.42
WER_BOUNDS = {"tlg": 9.5, "greedy": 10.0}


def test_yesno_recipe_end_to_end(tmp_path):
    cfg = yaml.safe_load((ROOT / "recipes/yesno/config.yaml").read_text())
    for section, vals in TINY.items():
        cfg[section].update(vals)
    conf = tmp_path / "tiny.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    data, exp = tmp_path / "data", tmp_path / "exp"
    r = run_recipe("yesno", "--config", conf, "--data", data, "--exp", exp)
    assert r.returncode == 0, r.stderr[-3000:]
    wers = {m: json.loads((exp / f"decode_test_{m}" / "wer.json").read_text()) for m in WER_BOUNDS}
    print("tiny yesno test WER:", {m: w["wer"] for m, w in wers.items()})
    for m, bound in WER_BOUNDS.items():
        assert wers[m]["num_words"] == 240 and wers[m]["wer"] < bound, (m, wers[m])
    # decode.set_grammars {test: words_8} (the recipe's known-length setting): the TLG search goes through
    # data/lang_words_8, so every hypothesis has exactly eight words, whatever the tiny model hears
    assert (data / "lang_words_8" / "TLG.fst").is_file()
    hyps = [ln.split()[1:] for ln in (exp / "decode_test_tlg" / "hyp.txt").read_text().splitlines()]
    assert len(hyps) == 30 and all(len(h) == 8 for h in hyps), hyps
    assert "| test |" in (exp / "RESULTS.md").read_text()
    assert not (exp / "decode_dev_tlg").exists()  # dev = training recordings: not decoded
    assert "stage 7 (mobile export) skipped" in r.stdout and not (exp / "mobile").exists()  # a BLSTM: no bundle
