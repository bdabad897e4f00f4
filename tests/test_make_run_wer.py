"""The model `make run` trains (recipes/digits/exp/lstm_ctc) is as good as the recipe's measured mean: its dev and
test %WER, greedy and TLG, each below `factor` x its mean over seeds (recipes/digits/ci_wer_bounds.yaml, the one
place the bounds are set). CI (.ci/run) runs `make run` and then this, so a change that makes the default recipe
worse by half again fails CI. The hypotheses are scored here with kaldialign against the set's reference text,
independently of the recipe's own scoring (whose figures must agree).

Without the model this skips with the reason, except under CI (``CI=true``), where a missing or stale model is a
failure: there `make run` has just made it, so its absence is the breakage this test is for."""

import json
import os
from pathlib import Path

import kaldialign
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "digits"
EXP = RECIPE / "exp" / "lstm_ctc"
BOUNDS = RECIPE / "ci_wer_bounds.yaml"
SETS, METHODS = ("dev", "test"), ("greedy", "tlg")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _absent(reason: str) -> None:
    """The model or its decodes are not there: a failure under CI, a skip elsewhere."""
    if in_ci():
        pytest.fail(f"CI: {reason} (`make run` ran before `make test` and should have made it)")
    pytest.skip(f"{reason}; run `make run` first")


def _read_text(path: Path) -> dict:
    out = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if parts:
            out[parts[0]] = parts[1:]
    return out


def wer_of(ref_path: Path, hyp_path: Path) -> dict:
    """%WER of ``hyp_path`` against ``ref_path`` (Kaldi text files), every reference utterance counted (one without
    a hypothesis is all deletions)."""
    ref, hyp = _read_text(ref_path), _read_text(hyp_path)
    extra = set(hyp) - set(ref)
    assert not extra, f"{hyp_path}: utterances not in {ref_path}: {sorted(extra)[:5]}"
    words = errors = 0
    for utt, r in ref.items():
        words += len(r)
        errors += kaldialign.edit_distance(r, hyp.get(utt, []))["total"]
    assert words > 0, ref_path
    return {"wer": 100.0 * errors / words, "num_words": words}


def decodes() -> dict:
    """(set, method) -> the decode dir of the make-run model, after checking the model and each decode are there
    and newer than the model (a decode left from an earlier model is no measure of this one)."""
    model = EXP / "final.pt"
    if not (EXP / ".train.done").is_file() or not model.is_file():
        _absent(f"the digits recipe's model {model} has not been trained")
    out = {}
    for s in SETS:
        for m in METHODS:
            d = EXP / f"decode_{s}_{m}"
            if not (d / "hyp.txt").is_file():
                _absent(f"{d}/hyp.txt is missing: the decode stage has not run on the trained model")
            if (d / "hyp.txt").stat().st_mtime < model.stat().st_mtime:
                _absent(f"{d}/hyp.txt is older than {model}: the decode stage was not rerun after training")
            out[(s, m)] = d
    return out


def test_bounds_file_is_complete():
    b = yaml.safe_load(BOUNDS.read_text())
    assert 1.0 < b["factor"] <= 2.0
    for s in SETS:
        for m in METHODS:
            assert 0 < float(b["seed_mean"][s][m]) < 100, (s, m)


def test_make_run_model_wer_within_bounds():
    b = yaml.safe_load(BOUNDS.read_text())
    found = {}
    for (s, m), d in decodes().items():
        w = wer_of(RECIPE / "data" / s / "text", d / "hyp.txt")
        recipe = json.loads((d / "wer.json").read_text()) if (d / "wer.json").is_file() else None
        if recipe is not None:  # the recipe's own scoring agrees
            assert recipe["num_words"] == w["num_words"] and recipe["wer"] == pytest.approx(w["wer"], abs=0.01), (
                s,
                m,
                recipe,
                w,
            )
        found[(s, m)] = w
    print("make run model %WER:", {k: round(v["wer"], 2) for k, v in found.items()})
    over = {
        f"{s} {m}": f"{w['wer']:.2f} > {b['factor']} x {b['seed_mean'][s][m]}"
        for (s, m), w in found.items()
        if w["wer"] > b["factor"] * float(b["seed_mean"][s][m])
    }
    assert not over, f"the make run model's WER regressed past its CI bound ({BOUNDS.name}): {over}"
