"""Results as records: a run's run.json (what made it), ``steps.results collect`` (a row of a recipe's table from an
exp dir) and ``steps.results build`` (the recipe's RESULTS.md from intro.md and the tables; ``--check`` for every
recipe that has a results/ folder)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from asrlib.errors import AsrError
from asrlib.results.records import RunRecord, git_commit, read_run, read_scores

ROOT = Path(__file__).resolve().parents[1]


def _config(seed: int = 7):
    from asrlib.config import load_config

    return load_config(ROOT / "recipes" / "digits" / "config.yaml", [f"train.seed={seed}"])


def test_outside_a_git_checkout_the_commit_is_unknown_not_an_error(tmp_path):
    assert git_commit(tmp_path) == (None, None)


def test_in_this_checkout_the_commit_is_its_short_head():
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    commit, dirty = git_commit(ROOT)
    assert commit == head.stdout.strip() and isinstance(dirty, bool)


def test_a_record_holds_command_config_seed_machine_and_time(tmp_path):
    rec = RunRecord("train", "steps.train", ["--config", "c.yaml", "--exp-dir", str(tmp_path)], _config(7), "c.yaml")
    path = rec.write(tmp_path, summary={"epochs": 8})
    got = read_run(tmp_path)
    assert path == tmp_path / "run.json" and got == json.loads(path.read_text())
    assert got["command"] == ["python", "-m", "steps.train", "--config", "c.yaml", "--exp-dir", str(tmp_path)]
    assert got["seed"] == 7 and got["config"]["train"]["seed"] == 7 and got["config"]["model"]["stack"] == 4
    assert got["machine"]["cores"] >= 1 and set(got["machine"]) == {"cores", "load_avg_start", "load_avg_end"}
    assert got["wall_s"] >= 0 and got["start"] <= got["end"] and got["summary"] == {"epochs": 8}
    assert not list(tmp_path.glob(".run.json*"))  # written atomically: no temporary left


def test_a_bad_run_json_is_an_error_naming_it(tmp_path):
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(AsrError, match=str(tmp_path / "run.json")):
        read_run(tmp_path)
    assert read_run(tmp_path / "nothing") is None


def test_scores_of_every_decode_dir(tmp_path):
    for s, m, wer in (("dev", "tlg", 5.32), ("test", "tlg", 3.38), ("test", "greedy", 3.29)):
        d = tmp_path / f"decode_{s}_{m}"
        d.mkdir()
        info = {"wer": wer, "ins": 1, "dels": 2, "subs": 3, "errors": 6, "num_words": 100, "ser": 9.0}
        (d / "wer.json").write_text(json.dumps({**info, "num_utts": 30, "set": s, "method": m}))
    got = {(r["set"], r["method"]): r["wer"] for r in read_scores(tmp_path)}
    assert got == {("dev", "tlg"): 5.32, ("test", "tlg"): 3.38, ("test", "greedy"): 3.29}
    (tmp_path / "decode_dev_tlg" / "wer.json").write_text('{"wer": 1}')
    with pytest.raises(AsrError, match="decode_dev_tlg/wer.json"):
        read_scores(tmp_path)


def test_steps_run_as_modules_import_the_records():
    r = subprocess.run([sys.executable, "-c", "import steps.train, steps.train_ce, steps.decode, steps.make_results"],
                       cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr


# --- collect and build


def _fake_exp(path: Path, wers: dict, seed: int = None, record: bool = True, overrides=(), config=None) -> Path:
    """An exp dir as a recipe run leaves it: decode_<set>_<method>/wer.json, and run.json unless ``record`` is
    False (a run made before records; then .train.done holds the seed when ``seed`` is given)."""
    for (s, m), wer in wers.items():
        d = path / f"decode_{s}_{m}"
        d.mkdir(parents=True)
        info = {"wer": wer, "ins": 0, "dels": 0, "subs": 1, "errors": 1, "num_words": 10, "ser": 10.0, "num_utts": 5}
        (d / "wer.json").write_text(json.dumps({**info, "set": s, "method": m}))
    if record:
        config = config or ROOT / "recipes/digits/config.yaml"
        argv = ["--config", str(config), "--exp-dir", str(path)]
        argv += [w for o in (*overrides, "train.num_threads=1", f"train.seed={seed}") for w in ("--set", o)]
        rec = RunRecord("train", "steps.train", argv, _config(seed), config)
        rec.write(path, summary={})
    elif seed is not None:
        (path / ".train.done").write_text(json.dumps({"_fingerprint": {"train": {"seed": seed}}}))
    return path


def _recipe(tmp_path: Path, intro: str = "# toy\n\nA toy corpus.\n") -> Path:
    recipe = tmp_path / "recipes" / "toy"
    (recipe / "results").mkdir(parents=True)
    (recipe / "results" / "intro.md").write_text(intro)
    return recipe


def test_collect_makes_a_row_from_run_json_and_scores(tmp_path):
    from asrlib.results.records import _config_name, row_from_exp

    # the recipe's config by its bare name, from this checkout or another one; any other config by its path
    assert _config_name("/elsewhere/recipes/digits/config_ce.yaml", ROOT / "recipes/digits") == "config_ce.yaml"
    assert _config_name("/tmp/my.yaml", ROOT / "recipes/digits") == "/tmp/my.yaml"

    exp = _fake_exp(tmp_path / "exp", {("dev", "tlg"): 5.0, ("test", "tlg"): 3.0}, seed=7, overrides=["model.stack=3"])
    row = row_from_exp(exp, ROOT / "recipes/digits", "stack 3")
    assert row["config"] == "config.yaml" and row["overrides"] == ["model.stack=3"]  # no seed, no thread count
    assert row["seed"] == 7 and row["wer"] == {"dev": {"tlg": 5.0}, "test": {"tlg": 3.0}} and row["source"] == "exp"
    assert row["test_decoded_once"] is True and row["machine"]["cores"] >= 1 and row["train_time_s"] is not None
    assert row["commit"] == git_commit()[0] + ("-dirty" if git_commit()[1] else "") if git_commit()[0] else True
    with pytest.raises(AsrError, match="seed=7, not the --seed 8"):
        row_from_exp(exp, ROOT / "recipes/digits", "stack 3", seed=8)


def test_collect_a_run_made_before_records(tmp_path):
    from asrlib.results.records import row_from_exp

    exp = _fake_exp(tmp_path / "old", {("test", "greedy"): 4.0}, seed=13, record=False)
    (exp / "log").mkdir()
    (exp / "log" / "train.log").write_text(
        "23:59:00 INFO [train] model: 10 parameters\n00:02:01 INFO [train] training done: {}\n"
    )
    row = row_from_exp(exp, ROOT / "recipes/digits", "old", config="config_ce.yaml")
    assert row["seed"] == 13 and row["commit"] is None and row["config"] == "config_ce.yaml"
    assert row["train_time_s"] == 181 and "machine" not in row
    bare = _fake_exp(tmp_path / "bare", {("test", "greedy"): 4.0}, record=False)
    with pytest.raises(AsrError, match="pass --seed"):
        row_from_exp(bare, ROOT / "recipes/digits", "old")
    assert row_from_exp(bare, ROOT / "recipes/digits", "old", seed=3)["seed"] == 3


def _results(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "steps.results", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})  # fmt: skip


def test_collect_then_build_gives_mean_and_half_range_with_the_command(tmp_path):
    from asrlib.results.table import spread

    assert spread([3.0, 4.0, 3.5]) == "3.50 ± 0.50" and spread([2.5]) == "2.50"
    recipe = _recipe(tmp_path)
    config = recipe / "config.yaml"
    config.write_text((ROOT / "recipes/digits/config.yaml").read_text())
    for seed, (dev, test) in {7: (5.0, 3.0), 13: (6.0, 4.0), 42: (5.5, 3.2)}.items():
        wers = {("dev", "tlg"): dev, ("test", "tlg"): test}
        exp = _fake_exp(tmp_path / f"s{seed}", wers, seed=seed, config=config)
        args = ["collect", "--exp", exp, "--recipe", recipe, "--table", "01_default", "--label", "LSTM"]
        r = _results(*args, "--title", "The default")
        assert r.returncode == 0, r.stderr
    r = _results("collect", "--exp", tmp_path / "s7", "--recipe", recipe, "--table", "01_default", "--label", "LSTM")
    assert r.returncode == 0, r.stderr  # the same label and seed again: replaced, not added
    table = json.loads((recipe / "results" / "01_default.json").read_text())
    assert [r["seed"] for r in table["rows"]] == [7, 13, 42]
    assert _results("build", recipe, "--check").returncode == 1  # no RESULTS.md yet
    r = _results("build", recipe)
    assert r.returncode == 0, r.stderr
    md = (recipe / "RESULTS.md").read_text()
    assert "# toy\n\nA toy corpus." in md and "## The default" in md
    assert "| LSTM | 7, 13, 42 | 5.50 ± 0.50 | 3.40 ± 0.50 |" in md
    assert "`./run.sh --config config.yaml --set train.seed=S` (S = 7, 13, 42" in md
    assert _results("build", recipe, "--check").returncode == 0
    (recipe / "results" / "intro.md").write_text("# toy\n\nAnother intro.\n")
    r = _results("build", recipe, "--check")
    assert r.returncode == 1 and "RESULTS.md is not what" in r.stderr
    assert "A toy corpus." in (recipe / "RESULTS.md").read_text()  # --check writes nothing


def test_legacy_and_test_tuned_rows_are_marked(tmp_path):
    from asrlib.results.table import render

    recipe = _recipe(tmp_path)
    rows = [
        {"label": "old", "config": "config.yaml", "seed": 42, "wer": {"test": {"tlg": 2.5}},
         "source": "legacy: git show abc:recipes/toy/RESULTS.md", "test_decoded_once": None},
        {"label": "tuned", "config": "config.yaml", "overrides": ["a.b=1"], "seed": 42, "wer": {"test": {"tlg": 2.0}},
         "source": "exp", "test_decoded_once": False, "commit": "abc1234"},
    ]  # fmt: skip
    (recipe / "results" / "02_x.json").write_text(json.dumps({"title": "X", "note": "A note.", "rows": rows}))
    md = render(recipe)
    assert "| old† | 42 | 2.50 |" in md and "| tuned‡ | 42 | 2.00 |" in md and "A note." in md
    assert "quoted from `git show abc:recipes/toy/RESULTS.md`" in md and "‡ test decoded more than once" in md
    assert "`./run.sh --config config.yaml --set a.b=1 --set train.seed=42` (commit abc1234)" in md


def test_one_command_for_every_row_is_listed_once(tmp_path):
    from asrlib.results.table import render

    recipe = _recipe(tmp_path)
    cmd = "python bench/x.py --sweep A B"
    rows = [
        {"label": lab, "config": "c.yaml", "seed": s, "wer": {"dev": {"tlg": w}}, "source": "bench", "command": cmd}
        for lab, w in (("A", 3.0), ("B", 4.0)) for s in (7, 42)
    ]  # fmt: skip
    (recipe / "results" / "03_sweep.json").write_text(json.dumps({"title": "Sweep", "rows": rows}))
    md = render(recipe)
    assert md.count(cmd) == 1 and f"- every row: `{cmd}` (S = 7, 42)" in md
    assert "| A | 7, 42 | 3.00 ± 0.00 |" in md and "| B | 7, 42 | 4.00 ± 0.00 |" in md
    rows[-1]["command"] = rows[-2]["command"] = cmd + " C"  # the commands differ: one line per configuration
    (recipe / "results" / "03_sweep.json").write_text(json.dumps({"title": "Sweep", "rows": rows}))
    md = render(recipe)
    assert f"- A: `{cmd}` (S = 7, 42)" in md and f"- B: `{cmd} C` (S = 7, 42)" in md
    rows += [{**r, "label": "Z"} for r in rows[:2]]  # A and Z share a command, B has its own: said once, after B
    (recipe / "results" / "03_sweep.json").write_text(json.dumps({"title": "Sweep", "rows": rows}))
    md = render(recipe)
    assert md.count(f"`{cmd}`") == 1 and f"- B: `{cmd} C` (S = 7, 42)\n- every other row: `{cmd}` (S = 7, 42)" in md
    template = "./run.sh --config config.yaml --set x.y=V --set train.seed=S"  # the table's own: one line
    (recipe / "results" / "03_sweep.json").write_text(json.dumps({"title": "Sweep", "rows": rows, "command": template}))
    md = render(recipe)
    assert f"- every row: `{template}`\n" in md and "- B:" not in md and cmd not in md


@pytest.mark.parametrize(
    "text, match",
    [("{not json", "02_bad.json: not readable"), ('{"title": "x"}', "02_bad.json: a results table"),
     ('{"title": "x", "rows": [{"label": "a", "config": "c", "source": "exp"}]}', "02_bad.json: row 'a' has no")],
)  # fmt: skip
def test_a_bad_table_is_an_error_naming_the_file(tmp_path, text, match):
    recipe = _recipe(tmp_path)
    (recipe / "results" / "02_bad.json").write_text(text)
    r = _results("build", recipe)
    assert r.returncode == 2 and match in r.stderr and "Traceback" not in r.stderr


def test_an_intro_over_20_lines_is_refused(tmp_path):
    from asrlib.results.table import render

    recipe = _recipe(tmp_path, "# toy\n" + "prose\n" * 20)
    with pytest.raises(AsrError, match="intro.md: 21 lines, at most 20"):
        render(recipe)


RECIPES_WITH_RESULTS = sorted(p.parent.name for p in (ROOT / "recipes").glob("*/results") if p.is_dir())


@pytest.mark.parametrize("recipe", RECIPES_WITH_RESULTS)
def test_a_recipes_results_md_is_what_its_records_give(recipe):
    r = _results("build", f"recipes/{recipe}", "--check")
    assert r.returncode == 0, r.stdout + r.stderr
