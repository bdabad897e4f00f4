"""Recipe config validation and Kaldi-style run.sh option parsing."""

import subprocess
from pathlib import Path

import pytest
import yaml

from asrlib.config import load_config, set_lang_config, set_lang_dir
from asrlib.errors import AsrError

ROOT = Path(__file__).resolve().parents[1]


def test_recipe_config_loads():
    path = ROOT / "recipes/digits/config.yaml"
    raw = yaml.safe_load(path.read_text())
    cfg = load_config(path)
    # the recipe's own values win over the dataclass defaults
    assert cfg.features.num_mel_bins == raw["features"]["num_mel_bins"]
    assert cfg.model.stack == raw["model"]["stack"] != type(cfg.model)().stack


def test_unknown_key_lists_valid_keys(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("train:\n  epoch: 3\n")
    with pytest.raises(AsrError, match=r"unknown key 'epoch'.*Valid keys:.*epochs"):
        load_config(p)


def test_wrong_type_is_named(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("train:\n  epochs: three\n")
    with pytest.raises(AsrError, match=r"train\.epochs: wrong type"):
        load_config(p)


def test_override_and_bad_override(tmp_path):
    cfg = load_config(ROOT / "recipes/digits/config.yaml", ["train.epochs=2", "model.peephole=true"])
    assert cfg.train.epochs == 2 and cfg.model.peephole is True
    with pytest.raises(AsrError, match="section.key=value"):
        load_config(ROOT / "recipes/digits/config.yaml", ["epochs=2"])


def test_set_grammars_map_eval_sets_to_lang_dirs(tmp_path):
    cfg = load_config(ROOT / "recipes/digits/config.yaml", ["decode.set_grammars={test: one_word}"])
    assert set_lang_dir("data/lang", cfg.decode, "test") == Path("data/lang_one_word")
    assert set_lang_dir("data/lang", cfg.decode, "dev") == Path("data/lang")
    assert load_config(ROOT / "recipes/digits/config.yaml").decode.set_grammars == {}
    with pytest.raises(AsrError, match=r"decode\.set_grammars: wrong type"):
        load_config(ROOT / "recipes/digits/config.yaml", ["decode.set_grammars={test: 3}"])
    with pytest.raises(AsrError, match=r"decode\.set_grammars: wrong type"):
        load_config(ROOT / "recipes/digits/config.yaml", ["decode.set_grammars=[one_word]"])
    with pytest.raises(AsrError, match=r"decode\.set_grammars\.test must be one of .*got 'one_wrd'"):
        load_config(ROOT / "recipes/digits/config.yaml", ["decode.set_grammars={test: one_wrd}"])  # a typo: at load
    assert set_lang_dir(
        "data/lang",
        load_config(ROOT / "recipes/digits/config.yaml", ["decode.set_grammars={test: words_8}"]).decode,
        "test",
    ) == Path("data/lang_words_8")  # known length
    for bad in ("words_0", "words_N", "words_08", "words_1000"):
        with pytest.raises(AsrError, match=r"decode\.set_grammars\.test must be one of"):
            load_config(ROOT / "recipes/digits/config.yaml", [f"decode.set_grammars={{test: {bad}}}"])
    with pytest.raises(AsrError, match=r"lang\.grammar must be one of"):
        load_config(ROOT / "recipes/digits/config.yaml", ["lang.grammar=loop"])


def test_set_words_name_the_sets_lang_dir_and_settings():
    digits = ROOT / "recipes/digits/config.yaml"
    cfg = load_config(
        digits, ["decode.set_grammars={test: one_word, dev: words_2}", "decode.set_words={test: [one, Two ]}"]
    )
    assert set_lang_dir("data/lang", cfg.decode, "test") == Path("data/lang_test")  # its own words: lang_<set>
    assert set_lang_dir("data/lang", cfg.decode, "dev") == Path("data/lang_words_2")
    test, dev, main = (set_lang_config(cfg, s) for s in ("test", "dev", None))
    assert (test.grammar, test.grammar_words) == ("one_word", ["ONE", "TWO"])  # upper-cased, stripped
    assert (dev.grammar, dev.grammar_words) == ("words_2", None) and main == cfg.lang
    only_words = load_config(digits, ["decode.set_words={test: [ONE]}"])  # the main grammar, fewer words
    assert set_lang_config(only_words, "test").grammar == cfg.lang.grammar
    for bad, msg in [
        ("decode.set_words={test: []}", r"decode\.set_words\.test must be a non-empty list"),
        ("decode.set_words={test: [ONE, '']}", r"decode\.set_words\.test must be a non-empty list"),
        ("lang.grammar_words=[]", r"lang\.grammar_words must be a non-empty list"),
        ("decode.set_words={test: ONE}", r"decode\.set_words: wrong type"),
    ]:
        with pytest.raises(AsrError, match=msg):
            load_config(digits, [bad])
    with pytest.raises(AsrError, match=r"restricts a word loop .* grammar arpa"):
        load_config(digits, ["lang.grammar=arpa", "lang.arpa=x.arpa", "decode.set_words={test: [ONE]}"])


def _parse(args):
    script = (
        'stage=1\nstop_stage=6\n__po_options="stage stop_stage"\n'
        f'. {ROOT}/utils/parse_options.sh\necho "$stage $stop_stage $*"\n'
    )
    return subprocess.run(["bash", "-c", script, "x", *args], capture_output=True, text=True)


def test_parse_options_sets_known_and_rejects_unknown():
    r = _parse(["--stage", "4", "--stop-stage=5", "rest"])
    assert r.returncode == 0 and r.stdout.strip() == "4 5 rest"
    r = _parse(["--stgae", "4"])
    assert r.returncode != 0 and "unknown option --stgae" in r.stderr and "--stop-stage" in r.stderr


def test_bundle_model_is_checked_at_load(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("export: {bundle_model: smallest}\n")
    with pytest.raises(AsrError, match="export.bundle_model must be one of auto, pruned, int8"):
        load_config(p)
    p.write_text("export: {bundle_model: int8}\n")
    assert load_config(p).export.bundle_model == "int8"
