"""steps.tune_search: the TLG search's acoustic scale and blank penalty chosen on a dev set."""

from __future__ import annotations

import json

import numpy as np
import pytest

from asrlib.kaldi_io import write_matrices
from asrlib.models.saved import load_model
from steps import tune_search
from tone_model import read_texts, tone_model


def test_the_best_point_is_the_lowest_wer_ties_to_the_configs_own():
    wers = {(1.0, 0.0): 9.0, (2.0, 1.0): 7.0, (3.0, 1.0): 7.0, (1.5, 2.0): 7.0}
    assert tune_search.best_point(wers, (2.0, 1.0)) == (2.0, 1.0)
    assert tune_search.best_point(wers, (1.0, 0.0)) == (1.5, 2.0)  # the smaller scale among the tied
    assert tune_search.best_point({**wers, (3.0, 2.0): 6.5}, (2.0, 1.0)) == (3.0, 2.0)


def test_the_sweep_scores_every_point_with_its_own_decoder():
    refs = {"u1": "A B", "u2": "C"}
    lps = {"u1": np.zeros((3, 2), np.float32), "u2": np.zeros((2, 2), np.float32)}

    class Fake:  # right only at scale 2: other scales drop a word
        def __init__(self, s, b):
            self.s = s

        def decode(self, lp):
            words = {3: ["A", "B"], 2: ["C"]}[len(lp)]
            return words if self.s == 2.0 else words[:-1]

    got = tune_search.sweep(lps, refs, [(1.0, 0.0), (2.0, 1.0)], Fake)
    assert got == {(1.0, 0.0): 66.67, (2.0, 1.0): 0.0}


def test_a_grid_on_the_tone_task(tmp_path_factory, tmp_path):
    """Through main on a trained model's dev log-probs: every point of the grid plus the config's own (off the grid)
    is decoded; the best has the lowest WER; a rerun is skipped; an utterance without a reference is an error."""
    tm = tone_model(tmp_path_factory)
    saved = load_model(tm.exp / "final.pt")
    from asrlib.features.cmvn import open_features
    from asrlib.io.tables import read_table

    feats = tm.fbank / "dev" / "feats.scp"
    reader = open_features(feats, saved.cmn)
    keys = [k for k, _ in read_table(feats)][:12]
    write_matrices(tmp_path / "lp" / "logprobs.ark", [(k, saved.log_probs(reader[k])) for k in keys])
    args = ["--config", str(tm.root / "config.yaml"), "--logprobs", str(tmp_path / "lp" / "logprobs.scp")]
    args += ["--lang-dir", str(tm.lang), "--ref", str(tm.data / "dev" / "text"), "--out-dir", str(tmp_path / "t")]
    args += ["--scales", "0.5", "3", "--penalties", "0", "-30", "--set", "decode.acoustic_scale=1.25"]
    assert tune_search.main(args) == 0
    grid = json.loads((tmp_path / "t" / "grid.json").read_text())
    points = {(g["acoustic_scale"], g["blank_penalty"]): g["wer"] for g in grid["grid"]}
    assert len(points) == 5 and (1.25, grid["own"]["blank_penalty"]) in points
    assert grid["best"]["wer"] == min(points.values())
    assert points[(3.0, -30.0)] > grid["best"]["wer"]  # a blank bonus of 30 per frame deletes words
    assert grid["utterances"] == len(keys) and set(read_texts(tm.data / "dev" / "text")) >= set(keys)
    mtime = (tmp_path / "t" / "grid.json").stat().st_mtime_ns
    assert tune_search.main(args) == 0 and (tmp_path / "t" / "grid.json").stat().st_mtime_ns == mtime
    (tmp_path / "ref").write_text("".join(f"{k} X\n" for k in keys[1:]))
    from asrlib.errors import AsrError

    bad = [x if x != str(tm.data / "dev" / "text") else str(tmp_path / "ref") for x in args]
    bad[bad.index("--out-dir") + 1] = str(tmp_path / "t2")
    with pytest.raises(AsrError, match=f"no reference for 1 utterances.*{keys[0]}"):
        tune_search.main(bad)
