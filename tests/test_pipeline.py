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
from asrlib.errors import AsrError
from asrlib.pipeline import Layout, plan

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted(ROOT.glob("recipes/*/config*.yaml"))


@pytest.mark.parametrize("snakefile", [False, True], ids=["run.sh", "snakefile"])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_steps_run_in_an_order_that_respects_every_input(config, snakefile):
    _check_dag(config, load_config(config), snakefile)


@pytest.mark.parametrize("units", ["bpe", "char"])
def test_a_ce_recipe_with_other_units_plans_a_dag_too(units):
    config = ROOT / "recipes/speechocean762/config.yaml"
    _check_dag(config, load_config(config, [f"lang.units={units}"]), snakefile=False)


def _check_dag(config, cfg, snakefile):
    steps = [s for s in plan(cfg, Layout(config=str(config), slurm=snakefile)) if s.module]
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
    # stage 7 for every model that streams: unidirectional, or a latency-controlled BLSTM (model.chunk_frames)
    assert ("export_mobile" in names) == (not cfg.model.bidirectional or cfg.model.chunk_frames > 0)
    jobs = [n for n in names if n.startswith("fbank_train_job")]  # the Snakefile: one step per feature job
    assert len(jobs) == (cfg.features.nj if snakefile else 0)


def _args(step, flag):
    return step.args[step.args.index(flag) + 1]


def test_with_bpe_units_the_gmm_aligns_on_a_phone_lang_dir_and_the_network_learns_bpe():
    """A GMM-HMM models phones: BPE or char units with train.init ce build data/lang_phone for it (the same phones as
    a phone recipe, so its monophones are shared), while the CTC network and its searches use data/lang."""
    config = ROOT / "recipes/speechocean762/config.yaml"
    overrides = ("lang.units=bpe", "lang.bpe_vocab_size=200", "decode.mono=true")
    lay = Layout(config="c.yaml", data="d", exp="e/x", overrides=overrides)
    steps = {s.name: s for s in plan(load_config(config, list(lay.overrides)), lay)}
    phone = steps["lang_phone"]
    assert _args(phone, "--lang-dir") == "d/lang_phone" and phone.outputs == ["d/lang_phone/.done"]
    sets = [phone.args[i + 1] for i, a in enumerate(phone.args) if a == "--set"]
    assert sets == [*lay.overrides, "lang.units=phone"]  # the last one wins
    for name in ("train_mono", "align", "decode_test_mono"):
        assert _args(steps[name], "--lang-dir") == "d/lang_phone"
    for name in ("train_mono", "decode_test_mono"):
        assert "d/lang_phone/.done" in steps[name].inputs
    for name in ("train_model", "decode_test_tlg", "decode_dev_tlg"):
        assert _args(steps[name], "--lang-dir") == "d/lang"
    assert "--set" in steps["train_model"].args and "lang.units=phone" not in steps["train_model"].args

    # phones, or no GMM: no second lang dir
    for overrides in ([], ["lang.units=bpe", "train.init=random"]):
        names = {s.name: s for s in plan(load_config(config, overrides), Layout(config="c.yaml", data="d"))}
        assert "lang_phone" not in names
        if "train_mono" in names:
            assert _args(names["train_mono"], "--lang-dir") == "d/lang"


def test_the_gmm_search_of_a_set_with_its_own_grammar_and_bpe_units_is_refused_by_name(tmp_path):
    cfg = load_config(ROOT / "recipes/speechocean762/config.yaml", ["lang.units=char", "decode.mono=true"])
    cfg.decode.set_grammars = {"test": "digit_loop"}
    with pytest.raises(AsrError, match="GMM search of set test.*decode.mono: false"):
        plan(cfg, Layout(config="c.yaml"))


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


def _decode_outputs(config: str, overrides) -> set:
    """The outputs of stages 5 and 6 (decoding, scoring) that ``config`` with ``overrides`` plans."""
    cfg = load_config(ROOT / "recipes/digits" / config, overrides)
    return {str(o) for s in plan(cfg, Layout(config="c.yaml")) if s.stage in (5, 6) for o in s.outputs}


def test_decode_mono_false_leaves_out_the_gmm_search_of_a_ce_recipe():
    def outs(overrides):
        return _decode_outputs("config_ce.yaml", overrides)

    both, no_mono = outs([]), outs(["decode.mono=false"])
    assert any("decode_test_mono" in o for o in both) and any("decode_test_tlg" in o for o in both)
    assert not any("mono" in o for o in no_mono)
    assert {o for o in both if "mono" not in o} == no_mono
    assert not any("mono" in o for o in outs(["train.init=random"]))  # no GMM, no GMM search either way


def test_decode_greedy_false_leaves_out_the_greedy_search_and_its_scoring():
    def outs(overrides):
        return _decode_outputs("config.yaml", overrides)

    both, tlg_only = outs([]), outs(["decode.greedy=false"])
    assert any("decode_test_greedy" in o for o in both) and any("decode_test_tlg" in o for o in both)
    assert not any("greedy" in o for o in tlg_only)
    assert {o for o in both if "greedy" not in o} == tlg_only


def test_data_overrides_reach_the_corpus_preparation():
    """run.sh --set data.KEY=V must change stage 1's corpus too, not only the steps after it."""
    cfg = load_config(ROOT / "recipes/digits/config.yaml", ["data.train_scale=1.0"])
    prep = plan(cfg, Layout(config="c.yaml", overrides=["data.train_scale=1.0"]))[0]
    assert prep.module == "local.digits" and prep.args[:4] == ["--config", "c.yaml", "--set", "data.train_scale=1.0"]


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


HOSTILE = "$(touch {mark})`touch {mark}`;touch {mark}"


@pytest.mark.parametrize(
    "key, value",
    [
        ("data.eval_sets", ["test", HOSTILE]),
        ("data.corpus", HOSTILE),
        ("decode.set_words", {HOSTILE: ["ONE"]}),
        ("cluster.partition", HOSTILE),
        ("data.eval_sets", ["../test"]),
    ],
)
def test_a_config_name_with_shell_syntax_is_refused_before_any_command(key, value, tmp_path):
    mark = tmp_path / "x"
    cfg = yaml.safe_load((ROOT / "recipes/digits/config.yaml").read_text())
    section, leaf = key.split(".")
    cfg.setdefault(section, {})[leaf] = yaml.safe_load(yaml.safe_dump(value).replace("{mark}", str(mark)))
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "steps.plan", "--config", str(conf)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env_with_root(ROOT), cwd=tmp_path)
    assert r.returncode != 0 and f"{key}:" in r.stderr and "not a plain name" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not mark.exists()


def _through_bash(line: str, tmp_path: Path) -> list:
    """The words a shell line gives its command: PY, srun and scontrol are shell functions that print their arguments
    (srun's up to the command it starts), as a SLURM job of 2 nodes would see them."""
    fake = (
        "export SLURM_JOB_ID=7; hostname() { echo n1; }; "
        'PY() { printf "%s\\0" PY "$@"; }; srun() { printf "%s\\0" srun "$1" "$2" "$3" "$4"; shift 4; "$@"; }; '
    )
    r = subprocess.run(["bash", "-c", fake + line], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\0")[:-1]


@pytest.mark.parametrize("layout", ["run.sh", "snakefile-2-nodes"])
def test_user_values_reach_a_shell_command_quoted_and_only_the_pipelines_own_words_expand(layout, tmp_path):
    mark = tmp_path / "x"
    hostile = HOSTILE.replace("{mark}", str(mark))
    conf = tmp_path / hostile / "c y.yaml"  # the config's own path, and a free-form value given with --set
    conf.parent.mkdir(parents=True)
    conf.write_text((ROOT / "recipes/digits/config.yaml").read_text())
    overrides = [f"data.download_url={hostile}", "cluster.nodes=2"]
    cfg = load_config(conf, overrides)
    lay = Layout(config=str(conf), exp=f"exp/{hostile}", overrides=tuple(overrides), slurm=layout != "run.sh")
    steps = [s for s in plan(cfg, lay, "PY") if s.module]
    expanded = {"$SLURM_JOB_ID": "7", "$(hostname):29400": "n1:29400"}
    reached = 0
    for s in steps:
        words = _through_bash(s.shell("PY"), tmp_path)
        assert words == [expanded.get(w, w) for w in s.argv("PY")], s.name
        reached += any(hostile in w for w in words)
    assert reached > len(steps) // 2 and not mark.exists()
    train = next(s for s in steps if s.name == "train_model")
    assert ("$SLURM_JOB_ID" in train.shell("PY")) == (layout != "run.sh")  # the job's variables stay unquoted


def test_snakemake_runs_a_rule_with_a_config_path_holding_shell_syntax_literally(tmp_path):
    mark = tmp_path / "x"
    conf = tmp_path / HOSTILE.replace("{mark}", str(mark)) / "c.yaml"
    conf.parent.mkdir(parents=True)
    conf.write_text((ROOT / "recipes/digits/config.yaml").read_text())
    fake = tmp_path / "python"  # records its arguments and fails, as a step that breaks
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/argv.txt\nexit 3\n')
    fake.chmod(0o755)
    cmd = [sys.executable, "-m", "snakemake", "prepare_data", "--snakefile", str(ROOT / "Snakefile"), "--cores", "1",
           "--config", f"recipe_config={conf}", f"workdir={tmp_path / 'w'}", f"python={fake}"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, env=env_with_root(ROOT), cwd=tmp_path)
    assert r.returncode != 0 and "Error in rule prepare_data" in r.stdout + r.stderr, r.stderr[-2000:]
    argv = (tmp_path / "argv.txt").read_text().splitlines()
    assert argv[:4] == ["-m", "local.digits", "--config", str(conf)]
    assert not mark.exists()
