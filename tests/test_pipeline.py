"""The pipeline declared once (asrlib/pipeline.py): for every recipe config the steps form a DAG in run order (each
input made by an earlier step), names and outputs are unique, the plan of every config and layout is the one recorded
in tests/data/pipeline_plan.json, and steps.plan prints and runs the stages asked for."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pipeline_snapshot import LAYOUTS, SNAPSHOT, canonical, planned

from asrlib.cli import env_with_root
from asrlib.config import load_config
from asrlib.pipeline import Layout, plan

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted(ROOT.glob("recipes/*/config*.yaml"))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_steps_run_in_an_order_that_respects_every_input(config):
    cfg = load_config(config)
    steps = [s for s in plan(cfg, Layout(config=str(config))) if s.module]
    names = [s.name for s in steps]
    assert len(names) == len(set(names))
    made = set()
    for s in steps:
        assert list(map(lambda t: t.stage, steps)) == sorted(t.stage for t in steps)
        for f in s.inputs:
            assert f in made or os.path.isabs(f), f"{config}: {s.name} needs {f}, which no earlier step makes"
        assert not made & set(s.outputs), f"{s.name} writes what another step wrote"
        made |= set(s.outputs)
    wanted = {"prepare_data", "fbank_train", "cmvn", "lang", "train_model", "results"}
    assert wanted <= set(names)
    assert ("train_mono" in names) == (cfg.train.init == "ce")
    assert ("export_mobile" in names) == (not cfg.model.bidirectional)


SNAP = json.loads(SNAPSHOT.read_text())


@pytest.mark.parametrize("key", sorted(SNAP["sha256"]))
def test_the_plan_of_every_config_and_layout_is_the_recorded_one(key):
    config, layout = key.split("|")
    steps = planned(ROOT / config, layout)
    if key in SNAP["plans"]:
        assert steps == SNAP["plans"][key]  # pytest shows the differing steps
    assert hashlib.sha256(canonical(steps).encode()).hexdigest() == SNAP["sha256"][key], (
        f"{key}: the plan differs from tests/data/pipeline_plan.json (python tests/pipeline_snapshot.py --show '{key}'"
        " prints it; regenerate the file only for a change meant to alter the steps)"
    )


def test_the_recorded_plans_cover_every_config_and_layout():
    assert set(SNAP["sha256"]) == {f"{c.relative_to(ROOT)}|{lay}" for c in CONFIGS for lay in LAYOUTS}


def test_a_bidirectional_model_has_no_export_step_but_a_message():
    cfg = load_config(ROOT / "recipes/digits/config.yaml", ["model.bidirectional=true"])
    last = plan(cfg, Layout(config="c.yaml"))[-1]
    assert last.stage == 7 and not last.module and "bidirectional" in last.message


def test_plan_prints_the_stages_asked_for(tmp_path):
    cfg = yaml.safe_load((ROOT / "recipes/digits/config.yaml").read_text())
    cfg["decode"]["set_words"] = {"test": ["ONE", "TWO"]}
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    env = env_with_root(ROOT)
    cmd = [sys.executable, "-m", "steps.plan", "--config", str(conf), "--data", "D", "--exp", "E/x", "--stage", "3",
           "--stop-stage", "5", "--num-learners", "2", "--set", "train.seed=7"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path).stdout.splitlines()
    modules = [line.split()[2] for line in out]
    assert modules[:2] == ["steps.prepare_lang", "steps.prepare_lang"]
    assert "--eval-set test" in out[1] and "--lang-dir D/lang_test" in out[1]
    assert modules[2] == "steps.train_dist" and "--num-learners 2" in out[2] and "-- --config" in out[2]
    assert all("--set train.seed=7" in line for line in out if "--config" in line)
    tlg = [line for line in out if "--method tlg" in line and "logprobs_test" in line]
    assert tlg and "--lang-dir D/lang_test" in tlg[0]
    assert not any("compute_fbank" in line or "steps.score" in line for line in out)


def test_run_stops_at_the_first_failing_step_with_its_status(tmp_path):
    env = env_with_root(ROOT)
    cmd = [sys.executable, "-m", "steps.plan", "--run", "--config", str(ROOT / "recipes/digits/config.yaml"),
           "--data", str(tmp_path / "none"), "--stage", "1", "--stop-stage", "2", "--skip-prepare"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode != 0
    assert "+ steps.validate_data_dir" in r.stderr and "step validate_train failed" in r.stderr
    assert "compute_fbank" not in r.stderr  # nothing after the failure
