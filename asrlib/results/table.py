"""A recipe's results tables (``recipes/<corpus>/results/<NN>_<slug>.json``, one per question; format in
docs/results.md) and the RESULTS.md built from them and ``results/intro.md``.

Each table renders as: its title, one line per configuration (the rows of one label over their seeds), a cell per
set and search holding the mean ± half the range (``(max - min) / 2``) of the seeds' %WER, the note, and beneath it
each configuration's command. A row quoted from an older hand-written RESULTS.md (``source: "legacy: ..."``) and a
row whose test set informed a choice (``test_decoded_once: false``) are marked.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import write_json, write_text
from asrlib.results.records import read_json

TABLE_NAME = re.compile(r"\d\d_[a-z0-9_]+")
INTRO_MAX_LINES = 20
RESULTS_MAX_LINES = 150
SET_ORDER = ("dev", "test")
SEED_OVERRIDE = "train.seed"


def results_dir(recipe_dir: PathLike) -> Path:
    return Path(recipe_dir) / "results"


def table_path(recipe_dir: PathLike, name: str) -> Path:
    name = name[: -len(".json")] if name.endswith(".json") else name
    if not TABLE_NAME.fullmatch(name):
        raise AsrError(f"table name {name!r}: NN_slug expected (two digits, '_', lower-case letters, digits, '_')")
    return results_dir(recipe_dir) / f"{name}.json"


def _check_row(row: Any, where: str) -> None:
    if not isinstance(row, dict):
        raise AsrError(f"{where}: a row is a JSON object")
    for key, tp in (("label", str), ("config", str), ("source", str)):
        if not isinstance(row.get(key), tp):
            raise AsrError(f"{where}: row {row.get('label')!r} needs {key!r} ({tp.__name__})")
    if not isinstance(row.get("overrides", []), list):
        raise AsrError(f"{where}: row {row['label']!r}: 'overrides' is a list of K=V")
    for key in ("wer", "cer"):
        for set_name, by_method in row.get(key, {}).items():
            if not isinstance(by_method, dict) or not all(isinstance(v, (int, float)) for v in by_method.values()):
                raise AsrError(f"{where}: row {row['label']!r}: {key}.{set_name} maps a search method to a number")
    if not row.get("wer"):
        raise AsrError(f"{where}: row {row['label']!r} has no 'wer'")


def load_table(path: PathLike) -> Dict[str, Any]:
    """A table file, checked: an :class:`AsrError` naming the file for bad JSON or a malformed row."""
    table = read_json(path, "a results table (RESULTS_SCHEMA)")
    ok = isinstance(table, dict) and isinstance(table.get("title"), str)
    if not ok or not isinstance(table.get("rows"), list):
        raise AsrError(f"{path}: a results table is an object with 'title' (text) and 'rows' (a list)")
    for row in table["rows"]:
        _check_row(row, str(path))
    return table


def add_row(path: PathLike, row: Dict[str, Any], title: Optional[str] = None) -> Dict[str, Any]:
    """Add ``row`` to the table in ``path``, replacing the row of the same label and seed; a new table needs
    ``title``."""
    path = Path(path)
    if path.is_file():
        table = load_table(path)
        if title:
            table["title"] = title
    elif title:
        table = {"title": title, "rows": []}
    else:
        raise AsrError(f"{path} does not exist: give --title to start that table")
    _check_row(row, str(path))
    key = (row["label"], row.get("seed"))
    rows = table["rows"]
    at = next((i for i, r in enumerate(rows) if (r["label"], r.get("seed")) == key), None)
    if at is None:
        rows.append(row)
    else:
        rows[at] = row
    write_json(path, table)
    return table


def spread(values: Sequence[float]) -> str:
    """``mean ± (max - min) / 2`` to two decimals; the value alone for one seed."""
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:.2f}"
    return f"{mean:.2f} ± {(max(values) - min(values)) / 2:.2f}"


def _columns(table: Dict[str, Any], key: str) -> List[Tuple[str, str]]:
    """(set, method) of every ``key`` ("wer" or "cer") cell in the table's rows: dev, test, then the others, each
    in order of first appearance; the table's ``columns`` ("SET METHOD" words) choose and order them instead."""
    if key == "wer" and table.get("columns"):
        return [tuple(c.split(" ", 1)) for c in table["columns"]]  # type: ignore[misc]
    seen: List[Tuple[str, str]] = []
    for row in table["rows"]:
        for s, by_method in row.get(key, {}).items():
            seen += [(s, m) for m in by_method if (s, m) not in seen]
    sets = list(dict.fromkeys([*[s for s in SET_ORDER if any(c[0] == s for c in seen)], *[c[0] for c in seen]]))
    return sorted(seen, key=lambda c: sets.index(c[0]))


def _groups(table: Dict[str, Any], where: str) -> List[List[Dict[str, Any]]]:
    """The rows by label, in order of first appearance; one label's rows must share config and overrides."""
    groups: Dict[str, List[Dict[str, Any]]] = {}
    for row in table["rows"]:
        groups.setdefault(row["label"], []).append(row)
    for label, rows in groups.items():
        if len({(r["config"], tuple(r.get("overrides", [])), r.get("command")) for r in rows}) > 1:
            raise AsrError(f"{where}: the rows of {label!r} differ in config, overrides or command: give them labels")
    return list(groups.values())


def command(row: Dict[str, Any], seeds: Sequence[Any]) -> str:
    """The command of a configuration: the row's own ``command`` (a figure made otherwise than by run.sh), else
    ``./run.sh --config C [--set K=V ...] --set train.seed=S``."""
    if row.get("command"):
        return row["command"]
    sets = "".join(f" --set {o}" for o in row.get("overrides", []) if not o.startswith(SEED_OVERRIDE + "="))
    seed = ""
    if seeds and seeds != [None]:
        seed = f" --set {SEED_OVERRIDE}={seeds[0]}" if len(seeds) == 1 else f" --set {SEED_OVERRIDE}=S"
    return f"./run.sh --config {row['config']}{sets}{seed}"


def command_lines(commands: Sequence[Tuple[str, str]]) -> List[str]:
    """``- label: command`` per configuration; a command that made several configurations is said once, as
    ``- every row: ...`` or, after the others, ``- every other row: ...``."""
    uses: Dict[str, int] = {}
    for _, c in commands:
        uses[c] = uses.get(c, 0) + 1
    shared = max(uses, key=lambda c: uses[c]) if uses else ""
    if len(commands) < 2 or uses.get(shared, 0) < 2:
        return [f"- {label}: {c}" for label, c in commands]
    if uses[shared] == len(commands):
        return [f"- every row: {shared}"]
    return [f"- {label}: {c}" for label, c in commands if c != shared] + [f"- every other row: {shared}"]


def render_table(table: Dict[str, Any], where: str) -> List[str]:
    wer_cols, cer_cols = _columns(table, "wer"), _columns(table, "cer")
    timed = any(r.get("train_time_s") is not None for r in table["rows"])
    head = ["configuration", "seeds", *[f"{s} {m}" for s, m in wer_cols], *[f"{s} {m} CER" for s, m in cer_cols]]
    head += ["train time"] if timed else []
    out = [f"## {table['title']}", "", "| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    commands, legacy = [], []
    for rows in _groups(table, where):
        seeds = [r.get("seed") for r in rows]
        marks = ("†" if any(r["source"].startswith("legacy") for r in rows) else "") + (
            "‡" if any(r.get("test_decoded_once") is False for r in rows) else ""
        )
        cells = [rows[0]["label"] + marks, ", ".join("?" if s is None else str(s) for s in seeds)]
        for key, cols in (("wer", wer_cols), ("cer", cer_cols)):
            for s, m in cols:
                values = [r[key][s][m] for r in rows if m in r.get(key, {}).get(s, {})]
                cells.append(spread(values) if values else "–")
        if timed:
            times = [r["train_time_s"] for r in rows if r.get("train_time_s") is not None]
            cells.append(f"{sum(times) / len(times):.0f} s" if times else "–")
        out.append("| " + " | ".join(cells) + " |")
        known = [s for s in seeds if s is not None]
        info = [f"S = {', '.join(map(str, known))}"] if len(known) > 1 else []
        commits = list(dict.fromkeys(r["commit"] for r in rows if r.get("commit")))
        info += [f"commit {', '.join(commits)}"] if commits else []
        loads = [r["machine"] for r in rows if (r.get("machine") or {}).get("load_avg") is not None]
        if loads:
            info.append(f"load {min(x['load_avg'] for x in loads)}-{max(x['load_avg'] for x in loads)} on "
                        f"{loads[0]['cores']} cores")  # fmt: skip
        tail = f" ({'; '.join(info)})" if info else ""
        commands.append((rows[0]["label"], f"`{command(rows[0], known)}`{tail}"))
        legacy += [r["source"][len("legacy:") :].strip() for r in rows if r["source"].startswith("legacy")]
    out.append("")
    if table.get("note"):
        out.append(table["note"].strip())  # the commands' list follows it (a list may start under a paragraph)
    # a table's own ``command``: one template for every row (the row's setting in its label), instead of a line each
    out += [f"- every row: `{table['command']}`"] if table.get("command") else command_lines(commands)
    if legacy:
        sources = ", ".join(f"`{s}`" for s in dict.fromkeys(legacy))
        out.append(f"- † quoted from {sources} (no exp dir left)")
    if any("‡" in line for line in out[4:]):
        out.append("- ‡ test decoded more than once, or a setting chosen on it")
    return out + [""]


def render(recipe_dir: PathLike) -> str:
    """RESULTS.md of ``recipe_dir``: ``results/intro.md``, then every ``results/NN_*.json`` table in name order."""
    rdir = results_dir(recipe_dir)
    intro_path = rdir / "intro.md"
    if not intro_path.is_file():
        raise AsrError(f"{intro_path} does not exist: a recipe's results start with its intro (at most 20 lines)")
    intro = intro_path.read_text(encoding="utf-8").strip("\n").splitlines()
    if len(intro) > INTRO_MAX_LINES:
        raise AsrError(f"{intro_path}: {len(intro)} lines, at most {INTRO_MAX_LINES} (the figures go in tables)")
    if not intro or not intro[0].startswith("# "):
        intro = [f"# Results: {Path(recipe_dir).resolve().name}", "", *intro]
    out = [
        f"<!-- generated by `python -m steps.results build recipes/{Path(recipe_dir).resolve().name}` from results/: "
        "edit those, not this file -->",
        *intro,
        "",
        "%WER per set and search, mean ± half the range over the seeds; each configuration's command beneath.",
        "",
    ]
    for path in sorted(rdir.glob("[0-9][0-9]_*.json")):
        out += render_table(load_table(path), str(path))
    text = "\n".join(out).rstrip("\n") + "\n"
    n = len(text.splitlines())
    if n > RESULTS_MAX_LINES:
        raise AsrError(f"{rdir}: RESULTS.md would be {n} lines, at most {RESULTS_MAX_LINES}: fewer or shorter tables")
    return text


def build(recipe_dir: PathLike, check: bool = False) -> bool:
    """Write ``recipe_dir/RESULTS.md`` (``check``: only compare); True when the file is (was) what the records
    give."""
    path = Path(recipe_dir) / "RESULTS.md"
    text = render(recipe_dir)
    same = path.is_file() and path.read_text(encoding="utf-8") == text
    if not check and not same:
        write_text(path, text)
    return same
