"""bench/mutation.py counts right: on a toy project of its own (a git repository with one module and its tests), the
sites it leaves out (annotations, log calls, docstrings, operators beside a string), a sample that stays put when
the module grows elsewhere, and each outcome: a mutant the tests notice is killed, one they cannot is survived, one
that hangs is timed out; a survivor listed as equivalent in the triage table leaves the score."""

import json
import subprocess
import time
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import mutation  # noqa: E402  (bench/ is not a package)

MODULE = '''"""A toy module."""
import logging

log = logging.getLogger(__name__)


def total(xs: list[int] | tuple, scale: int = 2) -> int | float:
    """Twice the sum (docstring: never mutated)."""
    log.info("adding %d numbers", len(xs) + 0)
    return scale * sum(xs)


def label(path):
    return path / "name.txt"


def spin(n):
    while n > 0:
        n -= 1
    return n


def unused(a):
    return a + 1
'''
TESTS = """from pkg.toy import spin, total


def test_total():
    assert total([1, 2, 3]) == 12


def test_spin():
    assert spin(3) == 0
"""
GROUPS = {"toy": {"modules": ["pkg/toy.py"], "direct": {"*": ["test_toy.py"]}, "wide": ["test_toy.py"]}}


@pytest.fixture
def toy(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "toy.py").write_text(MODULE)
    (repo / "tests" / "test_toy.py").write_text(TESTS)
    (repo / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    monkeypatch.setattr(mutation, "ROOT", repo)
    return repo


def _by_line(mutants):
    return {(m.line, m.operator.split("/")[1]) for m in mutants}


def test_sites_left_out(toy):
    mutants = mutation.list_mutants("toy", ["pkg/toy.py"])
    lines = {m.line for m in mutants}
    # line 7: the annotations' | are left out; the default 2 is a site
    assert {m.operator for m in mutants if m.line == 7} == {"core/NumberReplacer"}
    assert 9 not in lines  # log.info(..., len(xs) + 0)
    assert 14 not in lines  # path / "name.txt": any other operator is a TypeError
    assert {10, 18, 19, 24} <= lines  # scale * sum, n > 0, n -= 1, a + 1
    assert (10, "ReplaceBinaryOperator_Mul_Add") in _by_line(mutants)


def test_the_sample_stays_when_the_module_grows_elsewhere(toy):
    before = mutation.sample(mutation.list_mutants("toy", ["pkg/toy.py"]), 4, seed=1)
    (toy / "pkg" / "toy.py").write_text(MODULE.replace("log = logging", "EXTRA = 3 * 4\nlog = logging"))
    listed = mutation.list_mutants("toy", ["pkg/toy.py"])
    after = mutation.sample(listed, 4, seed=1)
    grown = {m.id for m in listed if m.line == 4}
    assert grown  # the new line has sites of its own; the old ones keep their ids, one line down
    assert {m.id for m in after} - grown <= {m.id for m in before}
    old_line = {m.id: m.line for m in before}
    assert all(m.line == old_line[m.id] + 1 for m in after if m.id in old_line)
    assert len({m.id for m in after} & set(old_line)) == 4 - len({m.id for m in after} & grown)


def test_each_outcome_and_the_score(toy, tmp_path, monkeypatch):
    all_mutants = mutation.list_mutants("toy", ["pkg/toy.py"])

    def one(line, operator):
        return next(m for m in all_mutants if m.line == line and m.operator == f"core/{operator}")

    killed = one(10, "ReplaceBinaryOperator_Mul_Add")  # total([1, 2, 3]) == 8
    survived = one(24, "ReplaceBinaryOperator_Add_Sub")  # unused() is never tested
    source = (toy / "pkg" / "toy.py").read_text()
    hangs = next(  # n -= 0: spin never ends
        m for m in all_mutants if m.line == 19 and "n -= 0" in (mutation.mutated_source(m, source) or "")
    )
    monkeypatch.setattr(mutation, "MIN_TIMEOUT_S", 5.0)
    chosen = [killed, survived, hangs]
    out = tmp_path / "out"
    out.mkdir()
    mutation.execute(GROUPS, chosen, out, (1, 1), factor=3.0, work=tmp_path / "work", budget_s=600)
    recs = mutation.read_records(out)
    assert {m.id: recs[m.id]["outcome"] for m in chosen} == {
        killed.id: "killed",
        survived.id: "survived",
        hangs.id: "timed_out",
    }
    assert recs[killed.id]["failure"] == "tests/test_toy.py::test_total"
    assert "-    return a + 1\n+    return a - 1" in recs[survived.id]["diff"]
    summary = mutation.summarise(chosen, out, {}, GROUPS)["toy"]
    assert (summary["killed"], summary["survived"], summary["timed_out"], summary["score"]) == (1, 1, 1, 0.667)
    # the survivor, triaged equivalent in a table like docs/testing.md's, leaves the score
    table = tmp_path / "testing.md"
    rows = ["| id | site | mutation | verdict | reason |", "|---|---|---|---|---|"]
    table.write_text("\n".join(rows + [f"| `{survived.id}` | x | y | equivalent | z |", ""]))
    equivalent = mutation.read_equivalent(table)
    assert equivalent == {survived.id: "z"}
    summary = mutation.summarise(chosen, out, equivalent, GROUPS)["toy"]
    assert (summary["equivalent"], summary["score"]) == (1, 1.0)
    # a rerun redoes nothing while module and tests are as they were; a changed test retries the survivor only
    assert all(mutation.is_current(recs[m.id], m, GROUPS) for m in chosen)
    (toy / "tests" / "test_toy.py").write_text(
        TESTS + "\n\ndef test_unused():\n    from pkg.toy import unused\n\n    assert unused(1) == 2\n"
    )
    assert [mutation.is_current(recs[m.id], m, GROUPS) for m in chosen] == [True, False, True]
    assert json.loads((out / "mutants.jsonl").read_text().splitlines()[0])["module"] == "pkg/toy.py"


def test_jobs_become_shards_with_their_own_scratch_dirs():
    argv = ["--per-group", "12", "--jobs", "2", "--work", "/w", "--seed=3"]
    assert mutation.shard_argv(argv, 2, 2, Path("/w")) == [
        "--per-group", "12", "--seed=3", "--shard", "2/2", "--work", "/w/shard2"
    ]  # fmt: skip
    assert mutation.shard_argv(["--jobs=3", "--work=/x"], 1, 3, None) == ["--shard", "1/3"]
    with pytest.raises(SystemExit):  # --jobs runs the shards itself
        mutation.main(["--jobs", "2", "--shard", "1/2"])


def test_shards_of_a_queue_take_each_mutant_once_and_share_baselines(tmp_path):
    import threading

    a, b = mutation.Queue(tmp_path / "q"), mutation.Queue(tmp_path / "q")  # two shards' views of one queue
    ids = ["m1", "m2", "m3"]
    assert [a.take(ids), b.take(ids), a.take(ids), b.take(ids)] == ["m1", "m2", "m3", None]
    runs, got = [], {}

    def slow_run():
        runs.append(1)
        time.sleep(1.0)
        return 42.0

    first = threading.Thread(target=lambda: got.setdefault("a", a.baseline("test_x.py", slow_run)))
    first.start()
    time.sleep(0.3)  # b asks while a is running it: b waits for a's figure instead of running it again
    got["b"] = b.baseline("test_x.py", slow_run)
    first.join()
    assert got == {"a": 42.0, "b": 42.0} and len(runs) == 1
    assert b.baseline("test_y.py", lambda: None) is None  # a failed unmutated run is remembered as such
    assert a.baseline("test_y.py", slow_run) is None and len(runs) == 1


def test_the_newest_record_of_a_mutant_wins_across_files(tmp_path):
    """A one-shard run writes mutants.jsonl, a --jobs run mutants.shardK.jsonl: a mutant rerun by the first after
    the second is read as rerun, though the shard file's name sorts after."""
    old = {"id": "m1", "outcome": "survived", "at": 100.0}
    (tmp_path / "mutants.shard1.jsonl").write_text(
        json.dumps(old) + "\n" + json.dumps({"id": "m2", "outcome": "killed"})
    )
    (tmp_path / "mutants.jsonl").write_text(json.dumps({"id": "m1", "outcome": "killed", "at": 200.0}) + "\n")
    recs = mutation.read_records(tmp_path)
    assert recs["m1"]["outcome"] == "killed" and recs["m2"]["outcome"] == "killed"
