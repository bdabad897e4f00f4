"""Mutation testing of the modules where a silent error changes results: how many sampled mutants the tests kill.

    python bench/mutation.py [--quick] [--groups decode,app] [--per-group 30] [--seed 73] [--jobs 2 | --shard 1/2]
                             [--out-dir bench/results/mutation] [--list] [--report]

A mutant is one small change to the code, made by cosmic-ray's operators (pinned in requirements.txt): an operator
replaced (``+`` by ``-``, ``<`` by ``<=``), a number moved by one, a condition negated, ``True`` for ``False``, a
loop that never runs, a decorator removed, an ``except`` that catches nothing. The modules are in groups
(:data:`GROUPS`: decode, export, app, lang graphs, parallel, train); each group has the test files of the suite
(``make test``'s tier, ``-m "not slow"``) that exercise it, the most direct first. Every mutation site of a group's
modules is listed (not in annotations, log calls or docstrings, which cannot change a result; nor on a line marked
``# pragma: no mutate``), and ``--per-group`` sites are sampled: those whose hash with ``--seed`` is smallest, so
the sample stays the same while the code around a site does not change. At each sampled site one of its mutants is
made (again by hash).

Each mutant is written into a scratch copy of the work tree (the files git knows of, with ``.venv``,
``recipes/digits/{data,exp}`` and ``../shared`` linked), and its group's tests run there in one process
(``pytest -x -q -n 0 -m "not slow"``, ``PYTHONDONTWRITEBYTECODE=1`` so no stale byte code is used): the mutant is
**killed** when they fail, **survived** when they pass, **timed out** when they run past ``--timeout-factor`` times
the unmutated run (measured first, once per set of test files: it must pass, with tests that ran, or the group is
not scored). A mutant that the tests do not kill is either killed by a new test or listed in docs/testing.md's
triage table as **equivalent** (no input can tell it apart), with its id and the reason; this tool reads that table.
The score of a group is (killed + timed out) / (sampled - equivalent).

Every result is appended to ``<out-dir>/mutants[.shardK].jsonl`` as it comes (with the hash of the module it
mutated), so a killed run goes on where it stopped and a rerun redoes only mutants whose module changed. ``--jobs 2``
runs two shards at once (one per core, each in its own scratch tree, taking mutants from one shared queue and sharing
the unmutated runs' times) and then summarises both, with the wall time of the whole; ``--report`` merges what is
there. The last line printed is one JSON object: per group sampled / killed / survived / timed_out / equivalent /
pending / score, and the wall time. ``--quick`` (under a minute) mutates ``asrlib/score.py`` at three sites against
tests/test_score.py in a temporary directory, as a check that the machinery works.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
TRIAGE = ROOT / "docs" / "testing.md"

# group -> its modules (globs under ROOT); per module (glob), the test files that exercise it most directly, run
# first against each mutant (with -x a killed mutant stops at its first failing test; "*": the group's default);
# "wide": the group's other test files of `make test`'s tier, run against the mutants the first ones left alive
# (killed there is killed by `make test`). Every file named must exist (a renamed test file fails the bench); an
# entry may name one test of a file (``file.py::test``), for modules whose file holds much slower tests besides.
GROUPS: Dict[str, Dict[str, object]] = {
    "decode": {
        "modules": ["asrlib/decode/*.py"],
        "direct": {
            "asrlib/decode/search*.py": ["test_search.py", "test_lm_scale.py"],
            "asrlib/decode/segment.py": ["test_segment.py", "test_segment_energy.py"],
            "asrlib/decode/endpoint.py": ["test_endpoint.py"],
            "asrlib/decode/isolated.py": ["test_isolated.py", "test_combine_logprobs.py"],
            "*": ["test_search.py"],
        },
        "wide": [
            "test_search.py",
            "test_lm_scale.py",
            "test_segment.py",
            "test_segment_energy.py",
            "test_endpoint.py",
            "test_isolated.py",
            "test_combine_logprobs.py",
            "test_ngram_lm.py",
            "test_speaker_adapt.py",
            "test_recognizer.py",
        ],
    },
    "export": {
        "modules": ["asrlib/export/*.py"],
        "direct": {
            "asrlib/export/prune.py": ["test_export_prune.py"],
            "asrlib/export/onnx_model.py": ["test_export_onnx.py"],
            "asrlib/export/quantize.py": ["test_export_onnx.py"],
            "asrlib/export/runtime.py": ["test_export_onnx.py"],
            "asrlib/export/streaming.py": ["test_export_streaming.py"],
            "asrlib/export/bundle.py": ["test_sherpa.py", "test_transcribe_bundle.py"],
            "asrlib/export/lc_onnx.py": [
                "test_lc_blstm.py::test_onnx_chunk_model_streams_as_lc_stream",
                "test_lc_bundle.py",
            ],
            "asrlib/export/sherpa_online.py": ["test_lc_bundle.py"],
            "*": ["test_export_onnx.py"],
        },
        "wide": [
            "test_export_prune.py",
            "test_export_onnx.py",
            "test_export_streaming.py",
            "test_sherpa.py",
            "test_transcribe_bundle.py",
            "test_security.py",
        ],
    },
    "app": {
        "modules": ["asrlib/app/*.py"],
        "direct": {
            "asrlib/app/cli_asr.py": ["test_cli_asr.py"],
            "asrlib/app/audio_input.py": ["test_audio_input.py", "test_recognizer.py"],
            "asrlib/app/word_times.py": ["test_word_times.py", "test_recognizer.py"],
            "asrlib/app/subtitles.py": ["test_segment.py", "test_cli_asr.py"],
            "*": ["test_recognizer.py"],
        },
        "wide": [
            "test_recognizer.py",
            "test_audio_input.py",
            "test_word_times.py",
            "test_cli_asr.py",
            "test_transcribe_bundle.py",
            "test_security.py",
            "test_segment.py",
            "test_fuzz_readers.py",
            "test_endpoint.py",
        ],
    },
    "lang": {
        "modules": ["asrlib/lang/graphs.py"],
        "direct": {"*": ["test_lang.py", "test_search.py", "test_graph_parts.py"]},
        "wide": [
            "test_lang.py",
            "test_search.py",
            "test_lm_scale.py",
            "test_isolated.py",
            "test_ngram_lm.py",
            "test_gmm.py",
            "test_graph_scale.py",
            "test_lang_units.py",
        ],
    },
    "parallel": {
        "modules": ["asrlib/parallel/*.py"],
        "direct": {
            "asrlib/parallel/timing.py": ["test_dist_timing.py"],
            "asrlib/parallel/harness.py": ["test_harness.py"],
            "asrlib/parallel/env.py": ["test_dist_launch.py"],
            "asrlib/parallel/quant.py": [
                "test_dist_comm.py::test_quantise_roundtrip_and_packing",
                "test_dist_comm.py::test_quantised_mean_is_shared_and_error_feedback_keeps_the_sum",
                "test_dist_comm.py::test_diloco_dense_rest_average_meets_the_models_and_keeps_the_rounding",
            ],
            "asrlib/parallel/sparse.py": [
                "test_dist_comm.py::test_sparse_mean_is_shared_keeps_per_parameter_tops_and_loses_nothing",
                "test_dist_comm.py::test_sparse_mean_with_16bit_positions_selects_per_block_and_decodes_offsets",
                "test_dist_comm.py::test_sparse_message_round_trips_with_an_odd_count",
            ],
            "asrlib/parallel/stats.py": ["test_comm_stats.py"],
            "asrlib/parallel/meter.py": [
                "test_comm_stats.py",
                "test_dist_comm.py::test_meter_counts_what_is_handed_to_torch_distributed",
            ],
            "asrlib/parallel/[pdt][oio]*.py": ["test_dist_comm.py"],  # powersgd, diloco, topk (not ddp)
            "*": ["test_dist_equivalence.py", "test_dist_algorithms.py"],
        },
        "wide": [
            "test_dist_equivalence.py",
            "test_dist_algorithms.py",
            "test_dist_comm.py",
            "test_comm_stats.py",
            "test_dist_resume.py",
            "test_dist_timing.py",
            "test_harness.py",
            "test_dist_launch.py",
            "test_device.py",
        ],
    },
    "train": {
        "modules": ["asrlib/train/*.py"],
        "direct": {
            "asrlib/train/loader.py": ["test_train_data.py", "test_train_parts.py"],
            "asrlib/train/augment.py": ["test_train_data.py", "test_train_parts.py"],
            "asrlib/train/batch_plan.py": ["test_jitter.py", "test_train_data.py"],
            "asrlib/train/concat.py": ["test_concat.py"],
            "asrlib/train/jitter.py": ["test_jitter.py"],
            "asrlib/train/ce.py": ["test_ce.py"],
            "asrlib/train/criterion.py": ["test_ce.py", "test_train_resume.py"],
            "asrlib/train/noise_aug.py": ["test_noise_aug.py", "test_train_parts.py"],
            "asrlib/train/noise_mix.py": ["test_noise_mix.py"],
            "asrlib/train/speaker_adapt.py": ["test_speaker_adapt.py", "test_train_parts.py"],
            "asrlib/train/census.py": ["test_census.py"],
            "*": ["test_train_resume.py"],
        },
        "wide": [
            "test_train_resume.py",
            "test_train_data.py",
            "test_train_parts.py",
            "test_concat.py",
            "test_jitter.py",
            "test_ce.py",
            "test_noise_aug.py",
            "test_noise_mix.py",
            "test_speaker_adapt.py",
            "test_census.py",
            "test_device.py",
        ],
    },
}
QUICK = {"quick": {"modules": ["asrlib/score.py"], "direct": {"*": ["test_score.py"]}, "wide": ["test_score.py"]}}
EXCLUDED_OPERATORS = ("core/NoOp",)  # (and every operator that needs arguments: VariableReplacer, VariableInserter)
LOG_CALLS = re.compile(r"^(log|logger|logging|warnings)\.(debug|info|warning|warn|error|exception|critical)$")
NO_MUTATE = "pragma: no mutate"
MIN_TIMEOUT_S = 60.0  # a mutant's tests may always run this long (a fast set's 3x would be cut by the start-up)


# ------------------------------------------------------------------------------------------------ mutation sites
@dataclass(frozen=True)
class Mutant:
    id: str  # stable: module, enclosing definition, operator, the line's text, column, and k-th of the same
    group: str
    module: str  # relative to ROOT
    operator: str
    occurrence: int  # cosmic-ray's: the k-th position of this operator in the module
    line: int
    col: int
    definition: Optional[str]
    site: str  # the mutants at one site share it (module, position, operator family)


def _family(operator: str) -> str:
    """``core/ReplaceBinaryOperator_Add_Mul`` -> ``ReplaceBinaryOperator_Add``: the variants at one site."""
    name = operator.split("/", 1)[1]
    parts = name.split("_")
    return "_".join(parts[:2]) if len(parts) > 2 else name


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def _excluded_spans(source: str) -> Tuple[list, list]:
    """(start, end) positions (line, character column) of code where a mutant cannot change a result, or only
    crashes: annotations, log calls and docstrings; and the operators between a string and anything (a path
    joined with ``/``, text with ``+`` or ``%``), which any other operator turns into a TypeError."""
    tree = ast.parse(source)
    lines = source.splitlines()

    def pos(lineno: int, byte_col: int) -> Tuple[int, int]:
        text = lines[lineno - 1].encode()[:byte_col].decode(errors="ignore") if lineno <= len(lines) else ""
        return lineno, len(text)

    def span(node: ast.AST):
        return pos(node.lineno, node.col_offset), pos(node.end_lineno, node.end_col_offset)

    spans, text_ops = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and (_is_text(node.left) or _is_text(node.right)):
            text_ops.append((span(node.left)[1], span(node.right)[0]))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]:
                if a is not None and a.annotation is not None:
                    spans.append(span(a.annotation))
            if node.returns is not None:
                spans.append(span(node.returns))
        elif isinstance(node, ast.AnnAssign):
            spans.append(span(node.annotation))
        elif isinstance(node, ast.Call):
            f = node.func
            name = f"{f.value.id}.{f.attr}" if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
            if LOG_CALLS.match(name):
                spans.append(span(node))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                spans.append(span(first))
    return spans, text_ops


def _inside(p: Tuple[int, int], spans) -> bool:
    return any(a <= p < b for a, b in spans)


def _operators():
    import cosmic_ray.plugins

    for name in cosmic_ray.plugins.operator_names():
        cls = cosmic_ray.plugins.get_operator(name)
        if name in EXCLUDED_OPERATORS or cls.arguments():
            continue
        yield name, cls()


def list_mutants(group: str, modules: Sequence[str]) -> List[Mutant]:
    """Every mutant of ``modules`` (paths relative to ROOT), in a stable order."""
    from cosmic_ray.ast import ast_nodes, get_ast
    from cosmic_ray.ast.ast_query import ASTQuery

    out = []
    for module in modules:
        source = (ROOT / module).read_text()
        lines = source.splitlines()
        spans, text_ops = _excluded_spans(source)
        tree = get_ast(source)
        nodes = list(ast_nodes(tree))
        seen: Dict[str, int] = {}
        for name, op in _operators():
            occurrence = 0
            for node in nodes:
                for start, _end in op.mutation_positions(node):
                    k = occurrence
                    occurrence += 1
                    line = lines[start[0] - 1] if start[0] <= len(lines) else ""
                    if _inside(tuple(start), spans) or NO_MUTATE in line:
                        continue
                    if "BinaryOperator" in name and _inside(tuple(start), text_ops):
                        continue
                    definition = ASTQuery(node).get_definition_name()
                    indent = len(line) - len(line.lstrip())
                    key = f"{module}|{definition}|{name}|{line.strip()}|{start[1] - indent}"
                    seen[key] = seen.get(key, -1) + 1
                    mid = "m" + hashlib.sha1(f"{key}|{seen[key]}".encode()).hexdigest()[:8]
                    site = f"{module}:{start[0]}:{start[1]}:{_family(name)}"
                    out.append(Mutant(mid, group, module, name, k, start[0], start[1], definition, site))
    return out


def _rank(seed: int, text: str) -> str:
    return hashlib.sha1(f"{seed}:{text}".encode()).hexdigest()


def sample(mutants: Sequence[Mutant], n: int, seed: int) -> List[Mutant]:
    """``n`` sites of ``mutants`` (those of smallest hash) and one mutant at each (again by hash). A site's hash
    uses its line's text rather than its line number, so edits elsewhere in a module leave the sample as it was."""
    by_site: Dict[str, List[Mutant]] = {}
    for m in mutants:
        by_site.setdefault(m.site, []).append(m)
    keyed = {min(_rank(seed, m.id) for m in ms): ms for ms in by_site.values()}
    chosen = [min(keyed[k], key=lambda m: _rank(seed + 1, m.id)) for k in sorted(keyed)[:n]]
    return sorted(chosen, key=lambda m: (m.module, m.line, m.col, m.operator))


def mutated_source(m: Mutant, source: str) -> Optional[str]:
    import cosmic_ray.plugins
    from cosmic_ray.mutating import mutate_code

    return mutate_code(source, cosmic_ray.plugins.get_operator(m.operator)(), m.occurrence)


def diff_of(m: Mutant, source: str) -> str:
    import difflib

    new = mutated_source(m, source) or source
    return "".join(
        line
        for line in difflib.unified_diff(source.splitlines(True), new.splitlines(True), m.module, m.module, n=0)
        if not line.startswith(("---", "+++"))
    )


def group_modules(spec: Dict[str, object]) -> List[str]:
    out = []
    for pattern in spec["modules"]:
        for p in sorted(ROOT.glob(pattern)):
            rel = p.relative_to(ROOT).as_posix()
            if p.name != "__init__.py" and rel not in out:
                out.append(rel)
    return out


def tests_for(spec: Dict[str, object], module: str) -> List[str]:
    """The test files run first against a mutant of ``module``: those of the first pattern that matches it."""
    for pattern, tests in spec["direct"].items():
        if pattern == "*" or fnmatch.fnmatch(module, pattern):
            return list(tests)
    raise AssertionError(f"no tests for {module}")


def wide_tests(spec: Dict[str, object], module: str) -> List[str]:
    """The group's test files not in :func:`tests_for`: run against the mutants those left alive."""
    first = tests_for(spec, module)
    return [t for t in spec["wide"] if t not in first]


def missing_test_files(groups: Dict[str, Dict[str, object]]) -> List[str]:
    named = {t for g in groups.values() for ts in g["direct"].values() for t in ts} | {
        t for g in groups.values() for t in g["wide"]
    }
    return sorted(t for t in named if not (ROOT / "tests" / t.split("::")[0]).is_file())


# ------------------------------------------------------------------------------------------------ running
def scratch_tree(where: Path) -> Path:
    """A copy of the work tree's files (tracked and untracked, not ignored) under ``where/tree``, with the
    virtual environment, the digits recipe's data and model and ../shared linked in."""
    tree = where / "tree"
    if tree.exists():
        shutil.rmtree(tree)
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for f in filter(None, files):
        src, dst = ROOT / f.decode(), tree / f.decode()
        if src.is_file() and not src.is_symlink():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    for link in (".venv", "recipes/digits/data", "recipes/digits/exp"):
        if (ROOT / link).exists() and not (tree / link).exists():
            (tree / link).parent.mkdir(parents=True, exist_ok=True)
            (tree / link).symlink_to((ROOT / link).resolve())
    shared = ROOT.parent / "shared"
    if shared.exists() and not (where / "shared").exists():
        (where / "shared").symlink_to(shared.resolve())
    return tree


def run_tests(tree: Path, tests: Sequence[str], timeout: float) -> Tuple[str, float, str]:
    """('passed' | 'failed' | 'timeout', seconds, last lines of output) of the tests in ``tree``."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider", "-m", "not slow"]
    cmd += ["--no-header", "-o", "addopts=", "-W", "ignore"] + [f"tests/{t}" for t in tests]
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    env.pop("PYTEST_ADDOPTS", None)
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the run and anything it started (learners, steps)
            except ProcessLookupError:
                pass
            proc.wait()
        out.seek(0)
        tail = out.read().decode(errors="replace")[-1500:]
    secs = time.monotonic() - t0
    if rc is None:
        return "timeout", secs, tail
    return ("passed" if rc == 0 else "failed"), secs, tail


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def read_records(out_dir: Path) -> Dict[str, dict]:
    """Mutant id -> its newest record over every ``mutants*.jsonl`` (the largest ``at``; a run with one shard and
    one with several write different files, so the file order alone would let an old shard file win)."""
    recs: Dict[str, dict] = {}
    for f in sorted(out_dir.glob("mutants*.jsonl")):
        for line in f.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a line cut by a kill
            old = recs.get(r["id"])
            if old is None or r.get("at", 0.0) >= old.get("at", 0.0):
                recs[r["id"]] = r
    return recs


def read_equivalent(path: Path = TRIAGE) -> Dict[str, str]:
    """Mutant id -> reason, from the triage table of docs/testing.md (rows ``| mXXXXXXXX | ... | equivalent |
    reason |``)."""
    out = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]  # (\| is a cell's |)
            if len(cells) >= 3 and re.fullmatch(r"`?m[0-9a-f]{8}`?", cells[0]) and "equivalent" in cells[-2].lower():
                out[cells[0].strip("`")] = cells[-1]
    return out


def plan(groups: Dict[str, Dict[str, object]], names: Sequence[str], per_group: int, seed: int) -> List[Mutant]:
    chosen = []
    for g in names:
        chosen += sample(list_mutants(g, group_modules(groups[g])), per_group, seed)
    return chosen


def tests_sha(tests: Sequence[str]) -> str:
    """A hash of the test files' contents (and the shared test helpers): a survivor is tried again when they change."""
    h = hashlib.sha256()
    for t in sorted(set(tests)) + ["helpers.py", "tone_model.py"]:
        f = ROOT / "tests" / t.split("::")[0]
        h.update(t.encode() + (f.read_bytes() if f.is_file() else b""))
    return h.hexdigest()[:16]


def is_current(rec: Optional[dict], m: Mutant, groups) -> bool:
    """Whether a stored result still holds: the module is as it was, and for a mutant the tests did not kill, the
    tests too (a new test may kill it now)."""
    if rec is None or rec.get("module_sha") != _sha(ROOT / m.module):
        return False
    if rec["outcome"] in ("killed", "timed_out", "no_mutation"):
        return True
    spec = groups[m.group]
    return rec.get("tests_sha") == tests_sha(tests_for(spec, m.module) + wide_tests(spec, m.module))


class Queue:
    """What the shards of one ``--jobs`` run share, in a directory: which mutants are taken (each shard takes the
    next free one when it is ready, so both cores stay busy to the end) and the unmutated runs' times (each set of
    test files run once for all shards; a shard that needs one another is running waits for it)."""

    def __init__(self, where: Path):
        self.where = where
        where.mkdir(parents=True, exist_ok=True)

    def _update(self, change: Callable[[dict], object]) -> object:
        """``change(state)`` under an exclusive lock; the state written back; what ``change`` returned."""
        import fcntl

        with open(self.where / "lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            f = self.where / "state.json"
            state = json.loads(f.read_text()) if f.is_file() else {"taken": [], "baselines": {}, "running": []}
            out = change(state)
            tmp = f.with_suffix(".tmp")
            tmp.write_text(json.dumps(state))
            os.replace(tmp, f)
            return out

    def take(self, ids: Sequence[str]) -> Optional[str]:
        """The first of ``ids`` no shard has taken, now taken; None when none is left."""

        def first_free(state: dict) -> Optional[str]:
            free = next((i for i in ids if i not in state["taken"]), None)
            if free is not None:
                state["taken"].append(free)
            return free

        return self._update(first_free)  # type: ignore[return-value]

    def baseline(self, key: str, run: Callable[[], Optional[float]]) -> Optional[float]:
        """The time of the unmutated run ``key`` (None: it failed): another shard's, or ``run()``'s when no shard
        has it."""

        def look(state: dict) -> Tuple[str, Optional[float]]:
            if key in state["baselines"]:
                return "known", state["baselines"][key]
            if key in state["running"]:
                return "wait", None
            state["running"].append(key)
            return "mine", None

        while True:
            what, secs = self._update(look)  # type: ignore[misc]
            if what == "known":
                return secs
            if what == "mine":
                break
            time.sleep(2)
        secs = run()

        def record(state: dict) -> None:
            state["baselines"][key] = secs
            state["running"].remove(key)

        self._update(record)
        return secs


class Baselines:
    """The unmutated run of each set of test files, once (once for all shards with a :class:`Queue`): its outcome
    and time (a mutant's timeout is a multiple of it). A set that fails unmutated, or runs no test, scores nothing."""

    def __init__(self, tree: Path, queue: Optional[Queue] = None):
        self.tree, self.runs, self.queue = tree, {}, queue

    def _run(self, tests: Sequence[str]) -> Optional[float]:
        status, secs, tail = run_tests(self.tree, tests, 3600)
        ok = status == "passed" and re.search(r"\b[1-9]\d* passed", tail) is not None
        print(f"mutation: baseline {' '.join(tests)}: {status} in {secs:.0f} s", flush=True)
        if not ok:
            print(tail, file=sys.stderr)
        return secs if ok else None

    def seconds(self, tests: Sequence[str]) -> Optional[float]:
        key = tuple(tests)
        if key not in self.runs:
            if self.queue is None:
                self.runs[key] = self._run(tests)
            else:
                self.runs[key] = self.queue.baseline(" ".join(tests), lambda: self._run(tests))
        return self.runs[key]


def run_mutant(m: Mutant, groups, tree: Path, base: Baselines, factor: float, direct_only: bool = False):
    """Make ``m`` in ``tree``, run its direct tests, and if it survives them the group's wide ones; the record
    (None when a baseline failed)."""
    spec = groups[m.group]
    phases = [tests_for(spec, m.module), [] if direct_only else wide_tests(spec, m.module)]
    path = tree / m.module
    source = path.read_text()
    new = mutated_source(m, source)
    rec = {**asdict(m), "module_sha": _sha(ROOT / m.module), "diff": diff_of(m, source)}
    rec["tests_sha"] = tests_sha(phases[0] + wide_tests(spec, m.module)) + ("-direct" if direct_only else "")
    if new is None or new == source:
        return {**rec, "outcome": "no_mutation", "seconds": 0.0}
    total = 0.0
    for phase, tests in enumerate(phases):
        if not tests:
            continue
        base_s = base.seconds(tests)
        if base_s is None:
            return None
        path.write_text(new)
        try:
            status, secs, tail = run_tests(tree, tests, max(MIN_TIMEOUT_S, factor * base_s))
        finally:
            path.write_text(source)
        total += secs
        outcome = {"failed": "killed", "passed": "survived", "timeout": "timed_out"}[status]
        rec.update(outcome=outcome, seconds=round(total, 1), tests=tests, phase=("direct", "wide")[phase])
        if outcome == "killed":
            rec["failure"] = " ".join(re.findall(r"^(?:FAILED|ERROR) (\S+)", tail, re.M)[:3])
        if outcome != "survived":
            break
    return rec


def round_robin(mutants: Sequence[Mutant]) -> List[Mutant]:
    """The mutants one group after another in turn (each group's in its order), so that a run cut by
    ``--budget-min`` leaves every group about as far along."""
    by_group: Dict[str, List[Mutant]] = {}
    for m in mutants:
        by_group.setdefault(m.group, []).append(m)
    rank = {m.id: (i, g) for g, ms in enumerate(by_group.values()) for i, m in enumerate(ms)}
    return sorted(mutants, key=lambda m: rank[m.id])


def execute(
    groups, mutants, out_dir: Path, shard, factor: float, work: Path, budget_s: float, direct_only=False, queue=None
):
    """Run this shard's mutants: every N-th of the sample from the K-th, or, with a :class:`Queue`, whichever
    mutant no other shard has taken yet, one at a time."""
    k, n = shard
    mine = list(mutants) if queue is not None else [m for i, m in enumerate(mutants) if i % n == k - 1]
    done = read_records(out_dir)
    todo = round_robin([m for m in mine if not is_current(done.get(m.id), m, groups)])
    what = "the shared queue" if queue is not None else f"{len(mine)} mutants"
    print(f"mutation: shard {k}/{n}: {what}, {len(mine) - len(todo)} already done", flush=True)
    if not todo:
        return
    t0 = time.monotonic()
    tree = scratch_tree(work)
    base = Baselines(tree, queue)
    log = out_dir / ("mutants.jsonl" if n == 1 else f"mutants.shard{k}.jsonl")
    by_id = {m.id: m for m in todo}
    for i in range(len(todo)):
        if time.monotonic() - t0 > budget_s:
            print("mutation: --budget-min spent; the mutants left are for the next run", flush=True)
            break
        if queue is None:
            m = todo[i]
        else:
            got = queue.take(list(by_id))
            if got is None:
                break
            m = by_id[got]
        rec = run_mutant(m, groups, tree, base, factor, direct_only)
        if rec is None:
            continue  # the group is not scored while its unmutated tests fail
        rec["at"] = round(time.time(), 1)  # which of several records of a mutant is the newest (read_records)
        with open(log, "a") as f:
            f.write(json.dumps(rec) + "\n")
        where = f"{m.module}:{m.line} {m.operator}"
        print(f"mutation: [{k}/{n}: {i + 1}] {m.id} {where}: {rec['outcome']} ({rec['seconds']:.0f} s)", flush=True)


def summarise(mutants: Sequence[Mutant], out_dir: Path, equivalent: Dict[str, str], groups) -> Dict[str, dict]:
    recs = read_records(out_dir)
    out: Dict[str, dict] = {}
    for m in mutants:
        g = out.setdefault(
            m.group, {"sampled": 0, "killed": 0, "survived": 0, "timed_out": 0, "equivalent": 0, "pending": 0}
        )
        g["sampled"] += 1
        r = recs.get(m.id)
        if not is_current(r, m, groups):
            g["pending"] += 1
        elif r["outcome"] == "survived" and m.id in equivalent:
            g["equivalent"] += 1
        elif r["outcome"] in ("killed", "survived", "timed_out"):
            g[r["outcome"]] += 1
        else:  # no_mutation: the operator had nothing to change there after all
            g["sampled"] -= 1
    for g in out.values():
        scored = g["killed"] + g["timed_out"] + g["survived"]
        g["score"] = round((g["killed"] + g["timed_out"]) / scored, 3) if scored else None
    return out


def markdown_table(summary: Dict[str, dict]) -> str:
    """The per-group summary as the markdown table of docs/testing.md."""
    cols = ("sampled", "killed", "timed_out", "survived", "equivalent", "pending")
    rows = ["| group | " + " | ".join(c.replace("_", " ") for c in cols) + " | score |"]
    rows.append("|---|" + "---:|" * (len(cols) + 1))
    for name, g in summary.items():
        score = "-" if g["score"] is None else f"{100 * g['score']:.0f} %"
        rows.append(f"| {name} | " + " | ".join(str(g[c]) for c in cols) + f" | {score} |")
    return "\n".join(rows)


def shard_argv(argv: Sequence[str], k: int, jobs: int, work: Optional[Path]) -> List[str]:
    """The arguments of shard ``k`` of ``jobs``: this command's, less ``--jobs`` and ``--work``, plus its
    ``--shard`` and, under ``work``, its own scratch dir."""
    own, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in ("--jobs", "--work"):
            skip = True
        elif not a.startswith(("--jobs=", "--work=")):
            own.append(a)
    return [*own, "--shard", f"{k}/{jobs}", *(["--work", str(work / f"shard{k}")] if work is not None else [])]


def run_shards(argv: Sequence[str], jobs: int, work: Optional[Path]) -> None:
    """This command once per shard (:func:`shard_argv`), all at once, sharing a fresh :class:`Queue`; waits for
    all."""
    queue = Path(tempfile.mkdtemp(prefix="mutation-queue."))
    procs = [
        subprocess.Popen([sys.executable, __file__, *shard_argv(argv, k, jobs, work), "--queue", str(queue)])
        for k in range(1, jobs + 1)
    ]
    try:
        codes = [p.wait() for p in procs]
    finally:
        shutil.rmtree(queue, ignore_errors=True)
    if any(codes):
        raise SystemExit(f"mutation: a shard failed (exit codes {codes})")


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="three mutants of asrlib/score.py (under a minute)")
    ap.add_argument("--groups", default=",".join(GROUPS), help="comma-separated groups (default: all)")
    ap.add_argument("--per-group", type=int, default=30, help="sites sampled per group")
    ap.add_argument("--seed", type=int, default=73)
    ap.add_argument("--shard", default="1/1", help="K/N: run every N-th sampled mutant from the K-th")
    ap.add_argument("--jobs", type=int, default=1, help="shards run at once (a core each), then summarised together")
    ap.add_argument("--queue", type=Path, help=argparse.SUPPRESS)  # a --jobs run's shared state (Queue)
    ap.add_argument("--timeout-factor", type=float, default=3.0, help="x the unmutated run's time")
    ap.add_argument("--budget-min", type=float, default=1e9, help="start no mutant after this many minutes")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results" / "mutation")
    ap.add_argument("--work", type=Path, default=None, help="scratch dir (default: a temporary one)")
    ap.add_argument(
        "--direct-only",
        action="store_true",
        help="the direct test files only (a first look: a mutant "
        "they leave alive is not scored as a survivor until the wide ones ran)",
    )
    ap.add_argument("--only", default="", help="comma-separated mutant ids of the sample: run (or list) just those")
    ap.add_argument("--list", action="store_true", help="print the sample (id, site, diff) and stop")
    ap.add_argument("--report", action="store_true", help="summarise what the results files hold; run nothing")
    ap.add_argument("--survivors", action="store_true", help="print the surviving mutants' diffs after the summary")
    ap.add_argument("--markdown", action="store_true", help="print the summary as docs/testing.md's table")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    groups = QUICK if args.quick else GROUPS
    names = list(groups) if args.quick else [g for g in args.groups.split(",") if g]
    unknown = [g for g in names if g not in groups]
    if unknown:
        ap.error(f"unknown group(s) {unknown}; known: {', '.join(groups)}")
    if missing_test_files(groups):
        ap.error(f"test files named in GROUPS are missing: {missing_test_files(groups)}")
    per_group = 3 if args.quick else args.per_group
    k, n = (int(x) for x in args.shard.split("/"))
    if not 1 <= k <= n:
        ap.error("--shard must be K/N with 1 <= K <= N")
    mutants = plan(groups, names, per_group, args.seed)
    if args.only:
        wanted = set(args.only.split(","))
        mutants = [m for m in mutants if m.id in wanted]
        if {m.id for m in mutants} != wanted:
            ap.error(f"not in the sample: {sorted(wanted - {m.id for m in mutants})}")
    if args.list:
        for m in mutants:
            print(f"{m.id} {m.group} {m.module}:{m.line}:{m.col} {m.definition} {m.operator}")
            print(diff_of(m, (ROOT / m.module).read_text()))
        return 0
    if args.jobs > 1 and not (args.quick or args.report or args.list):
        if args.shard != "1/1":
            ap.error("--jobs runs the shards itself: give --jobs or --shard, not both")
        run_shards(argv if argv is not None else sys.argv[1:], args.jobs, args.work)
        args.report = ran_shards = True  # what follows summarises the shards' records
    else:
        ran_shards = False
    tmp = None
    if args.quick:
        tmp = tempfile.TemporaryDirectory(prefix="mutation-quick.")
        out_dir, work = Path(tmp.name) / "out", Path(tmp.name) / "work"
    else:
        out_dir = args.out_dir
        work = args.work or Path(tempfile.mkdtemp(prefix="mutation.")) if not args.report else None
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        if not args.report:
            work.mkdir(parents=True, exist_ok=True)
            budget = 60 * args.budget_min
            queue = Queue(args.queue) if args.queue else None
            execute(groups, mutants, out_dir, (k, n), args.timeout_factor, work, budget, args.direct_only, queue)
        equivalent = read_equivalent()
        summary = summarise(mutants, out_dir, equivalent, groups)
        if args.markdown:
            print(markdown_table(summary))
        if args.survivors:
            recs = read_records(out_dir)
            for m in mutants:
                r = recs.get(m.id)
                if r and r["outcome"] == "survived" and m.id not in equivalent:
                    print(f"\n{m.id} {m.group} {m.module}:{m.line} {m.definition} {m.operator}\n{r['diff']}")
        result = {
            "bench": "mutation",
            "quick": args.quick,
            "seed": args.seed,
            "per_group": per_group,
            "groups": summary,
            "wall_s": round(time.monotonic() - t0, 1),
            "load": round(os.getloadavg()[0], 2),
        }
        if not args.quick and (ran_shards or (not args.report and n == 1)) and not args.only:
            (out_dir / "summary.json").write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps(result))
    finally:
        if tmp is not None:
            tmp.cleanup()
        elif args.work is None and work is not None:
            shutil.rmtree(work, ignore_errors=True)
    if args.quick:  # the machinery works: every quick mutant got an outcome and the tests killed some
        g = summary.get("quick", {})
        if g.get("pending") or not g.get("killed"):
            print("mutation --quick: the tests killed no mutant, or some got no outcome", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
