"""The Snakemake profiles (profiles/local, profiles/slurm) validated by snakemake's own dry run: every recipe's DAG
builds, the training rule gets the recipe config's cluster resources and launches torchrun the right way."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
# every recipe, as recipes/ holds them (a new one is checked without being listed here); its config.yaml (the
# variants' plans are checked in-process by tests/test_pipeline.py)
RECIPES = sorted(p.parent.name for p in (ROOT / "recipes").glob("*/config.yaml"))


def _dry_run(profile: str, config: Path, work: Path) -> str:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-n",
            "-p",
            "--profile",
            str(ROOT / "profiles" / profile),
            "--snakefile",
            str(ROOT / "Snakefile"),
            "--config",
            f"recipe_config={config}",
            f"workdir={work}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout + r.stderr


def test_every_recipe_is_found():
    assert {"digits", "an4", "yesno", "fsdd", "librispeech", "switchboard", "digits_fsdd"} <= set(RECIPES)
    assert {p.name for p in (ROOT / "recipes").iterdir() if (p / "run.sh").is_file()} == set(RECIPES)


@pytest.mark.parametrize("recipe", RECIPES)
def test_local_profile_every_recipe(recipe, tmp_path):
    config = ROOT / "recipes" / recipe / "config.yaml"
    out = _dry_run("local", config, tmp_path)
    assert f"-m local.{yaml.safe_load(config.read_text())['data']['corpus']} " in out
    assert "steps.train" in out and "This was a dry-run" in out
    if yaml.safe_load(config.read_text()).get("features", {}).get("cmvn") == "speaker":  # per-speaker CMN rules
        assert "--utt2spk data/train/utt2spk" in out and "--utt2spk data/test/utt2spk" in out
        assert "data/fbank/test --speaker-only" in out


@pytest.mark.skipif(
    importlib.util.find_spec("snakemake_executor_plugin_slurm") is None,
    reason="snakemake-executor-plugin-slurm is not installed (pip install -r requirements.txt)",
)
def test_slurm_profile_multi_node_training(tmp_path):
    cfg = yaml.safe_load((ROOT / "recipes/librispeech/config.yaml").read_text())
    cfg["cluster"].update(nodes=2, learners_per_node=4, gpus_per_node=4, partition="gpu", train_mem_mb=64000)
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    out = _dry_run("slurm", conf, tmp_path / "w")
    train = out[out.index("rule train_model:") :]
    train = train[: train.index("\n\n")]
    assert "nodes=2" in train and "mem_mb=64000" in train and "slurm_partition=gpu" in train
    assert "--gres=gpu:4" in train and "cpus_per_task=32" in train
    assert "srun --nodes=2 --ntasks-per-node=1 --cpus-per-task=32" in train and "mpi=srun" in train
    assert "steps.train_dist --nnodes 2 --num-learners 4 --rdzv-id $SLURM_JOB_ID" in train
    assert "--rdzv-endpoint $(hostname):29400" in train
    assert "--max-restarts 0" in train
    fbank = out[out.index("rule fbank_train:") :]
    assert "mem_mb=4000" in fbank[: fbank.index("\n\n")]  # default-resources of the profile


def test_single_node_learners_use_torchrun_standalone(tmp_path):
    cfg = yaml.safe_load((ROOT / "recipes/yesno/config.yaml").read_text())
    cfg["cluster"] = {"learners_per_node": 2, "max_restarts": 3}
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    out = _dry_run("local", conf, tmp_path / "w")
    assert "-m steps.train_dist --num-learners 2 --max-restarts 3 -- --config" in out


def test_set_grammars_reach_tlg_and_gmm_decoding(tmp_path):
    """decode.set_grammars in the Snakefile: the set's TLG search and its GMM search both use lang_<grammar>."""
    cfg = yaml.safe_load((ROOT / "recipes/yesno/config_ce.yaml").read_text())
    cfg["decode"]["set_grammars"] = {"test": "one_word"}
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    out = _dry_run("local", conf, tmp_path / "w")
    assert "--eval-set test --text data/train/text --lang-dir data/lang_one_word" in out  # rule lang_set
    gmm = [line for line in out.splitlines() if "-m steps.decode_gmm" in line]
    assert gmm and all("--lang-dir data/lang_one_word" in line and "/graph_one_word " in line for line in gmm), gmm
    tlg = [line for line in out.splitlines() if "-m steps.decode " in line and "--method tlg" in line]
    assert tlg and all("--lang-dir data/lang_one_word" in line for line in tlg), tlg


def test_set_words_give_the_set_a_lang_dir_of_its_own(tmp_path):
    """decode.set_words: the set is searched through data/lang_<set>, built by rule lang_set with --eval-set; a set
    with only a grammar keeps lang_<grammar>."""
    cfg = yaml.safe_load((ROOT / "recipes/yesno/config.yaml").read_text())
    cfg["data"]["eval_sets"] = ["dev", "test"]
    cfg["decode"]["set_grammars"] = {"test": "one_word", "dev": "words_8"}
    cfg["decode"]["set_words"] = {"test": ["YES"]}
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    out = _dry_run("local", conf, tmp_path / "w")
    assert "--eval-set test --text data/train/text --lang-dir data/lang_test" in out
    assert "--eval-set dev --text data/train/text --lang-dir data/lang_words_8" in out
    tlg = {
        s: [ln for ln in out.splitlines() if "--method tlg" in ln and f"logprobs_{s}/" in ln] for s in ("dev", "test")
    }
    assert tlg["test"] and all("--lang-dir data/lang_test " in ln for ln in tlg["test"]), tlg
    assert tlg["dev"] and all("--lang-dir data/lang_words_8 " in ln for ln in tlg["dev"]), tlg


def test_utterance_cmn_in_the_cmvn_rule(tmp_path):
    cfg = yaml.safe_load((ROOT / "recipes/digits/config.yaml").read_text())
    cfg["features"]["cmvn"] = "utterance"
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    out = _dry_run("local", conf, tmp_path / "w")
    assert "steps.compute_cmvn --feats data/fbank/train/feats.scp --out-dir data/fbank/train --cmn utterance" in out
    assert "--speaker-only" not in out and "--utt2spk" not in out
