"""A run's record: what made it, written beside its outputs, and the metrics a recipe's results table reads back.

A training (``steps.train``, ``steps.train_ce``) writes ``EXP_DIR/run.json`` and a decoding (``steps.decode``) its
``decode_<set>_<method>/run.json`` when it finishes (a step that finds its work done writes nothing):

    {"kind": "train", "command": ["python", "-m", "steps.train", "--config", ...], "config_file": "...",
     "config": {...the resolved config...}, "seed": 42, "commit": "b3d016b", "dirty": false,
     "machine": {"cores": 2, "load_avg_start": [1.0, 0.9, 0.8], "load_avg_end": [...]},
     "start": "...Z", "end": "...Z", "wall_s": 181.2, ...the step's own summary}

``commit`` and ``dirty`` are null outside a git checkout (or without git); ``wall_s`` is this process's: a training
resumed after a kill counts its last leg only. The machine is described without its name (cores, load averages).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from asrlib.config import config_to_dict
from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import write_json

RUN_JSON = "run.json"
ROOT = Path(__file__).resolve().parents[2]  # the checkout whose code runs


def git_commit(root: PathLike = ROOT) -> Tuple[Optional[str], Optional[bool]]:
    """(short hash of HEAD, whether tracked files differ from it) of the checkout at ``root``; (None, None) when it
    is not a git checkout or git is missing."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, timeout=30
        )
        if head.returncode != 0:
            return None, None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None, None
    dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    return head.stdout.strip() or None, dirty


def _load_avg() -> Optional[List[float]]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not available on this platform
        return None


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class RunRecord:
    """Started when a step begins its work, written by :meth:`write` when it has finished."""

    def __init__(self, kind: str, module: str, argv: Optional[Sequence[str]], cfg: Any, config_file: str) -> None:
        self.kind, self.cfg, self.config_file = kind, cfg, str(config_file)
        self.command = ["python", "-m", module, *(sys.argv[1:] if argv is None else argv)]
        self.start, self.load_start = time.time(), _load_avg()
        self.t0 = time.perf_counter()

    def as_dict(self, **extra: Any) -> Dict[str, Any]:
        commit, dirty = git_commit()
        end = time.time()
        train = getattr(self.cfg, "train", None)
        return {
            "kind": self.kind,
            "command": self.command,
            "config_file": self.config_file,
            "config": config_to_dict(self.cfg),
            "seed": getattr(train, "seed", None),
            "commit": commit,
            "dirty": dirty,
            "machine": {"cores": os.cpu_count(), "load_avg_start": self.load_start, "load_avg_end": _load_avg()},
            "start": _utc(self.start),
            "end": _utc(end),
            "wall_s": round(time.perf_counter() - self.t0, 1),
            **extra,
        }

    def write(self, out_dir: PathLike, **extra: Any) -> Path:
        """``out_dir/run.json`` (atomically), with ``extra`` (the step's summary) added."""
        path = Path(out_dir) / RUN_JSON
        write_json(path, self.as_dict(**extra))
        return path


def read_json(path: PathLike, what: str = "a JSON file") -> Any:
    """The JSON in ``path``; an :class:`AsrError` naming the file when it cannot be read or parsed."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise AsrError(f"{path}: not readable as {what} ({e})") from None


SCORE_KEYS = ("wer", "ins", "dels", "subs", "errors", "num_words", "ser", "num_utts")


def _set_and_method(decode_dir: Path, info: Dict) -> Tuple[str, str]:
    """Set and method from wer.json, else from the directory name ``decode_<set>_<method>``."""
    name = decode_dir.name[len("decode_") :]
    set_name, method = info.get("set"), info.get("method")
    if set_name and not method and name.startswith(set_name + "_"):
        method = name[len(set_name) + 1 :]
    if not set_name or not method:
        set_name, _, method = name.partition("_")
    return set_name, method or "-"


def read_scores(exp_dir: PathLike) -> List[Dict]:
    """Every ``exp_dir/decode_*/wer.json`` (steps.score's) as ``{set, method, dir, wer, ins, ..., missing}``; two
    decode dirs of one set and method are told apart by the dir's name in ``method``."""
    rows: List[Dict] = []
    for f in sorted(Path(exp_dir).glob("decode_*/wer.json")):
        info = read_json(f, "a wer.json written by steps.score")
        try:
            set_name, method = _set_and_method(f.parent, info)
            row = {"set": set_name, "method": method, "dir": f.parent.name, **{k: info[k] for k in SCORE_KEYS}}
            row["missing"] = len(info.get("missing", []))
            if "cer" in info:
                row["cer"] = info["cer"]
        except (KeyError, TypeError, AttributeError) as e:
            raise AsrError(f"{f}: not a wer.json written by steps.score (no {e}); rerun steps.score") from None
        if any((r["set"], r["method"]) == (set_name, method) for r in rows):
            row["method"] = f"{method} ({f.parent.name})"  # keep both, distinguishable
        rows.append(row)
    return rows


def read_run(exp_dir: PathLike) -> Optional[Dict]:
    """``exp_dir/run.json`` (a training's record), or None for a run made before records were written."""
    path = Path(exp_dir) / RUN_JSON
    if not path.is_file():
        return None
    rec = read_json(path, "a run record (run.json)")
    if not isinstance(rec, dict):
        raise AsrError(f"{path}: not a run record (a JSON object expected)")
    return rec


def trained_seed(exp_dir: PathLike) -> Optional[int]:
    """The seed of the training in ``exp_dir`` by its completion marker's settings (``.train.done``), for runs made
    before run.json; None when it is not there."""
    done = Path(exp_dir) / ".train.done"
    if not done.is_file():
        return None
    seed = read_json(done, "a training's completion marker").get("_fingerprint", {}).get("train", {}).get("seed")
    return int(seed) if seed is not None else None


# --set values that say how a run was computed, not what: left out of a results row's command
HOW_KEYS = ("train.seed", "train.num_threads", "train.device", "train.loader.num_workers", "decode.num_threads",
            "features.nj")  # fmt: skip


def command_overrides(command: Sequence[str]) -> List[str]:
    """The ``--set K=V`` values of a recorded command, without those of :data:`HOW_KEYS`."""
    sets = [command[i + 1] for i, w in enumerate(command[:-1]) if w == "--set"]
    sets += [w[len("--set=") :] for w in command if w.startswith("--set=")]
    return [s for s in sets if s.split("=", 1)[0] not in HOW_KEYS]


def _config_name(config_file: str, recipe_dir: Path) -> str:
    """A recipe's config as run.sh's ``--config`` takes it: its bare name when it lies in the recipe's folder (of
    this checkout or another one: the folder's name is the recipe's)."""
    p = Path(config_file)
    if p.parent in (Path("."), recipe_dir) or p.parent.name == recipe_dir.resolve().name:
        return p.name
    return str(p)


_LOG_TIME = re.compile(r"^(\d\d):(\d\d):(\d\d) ")


def logged_train_seconds(exp_dir: PathLike) -> Optional[int]:
    """For a run made before run.json: the seconds from the last start of training to "training done" in
    ``exp_dir/log/train.log`` (its lines carry the time of day only; a day boundary is crossed at most once)."""
    log = Path(exp_dir) / "log" / "train.log"
    if not log.is_file():
        return None
    start = end = None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        m = _LOG_TIME.match(line)
        if not m:
            continue
        t = int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3])
        if " parameters" in line and "] model: " in line:
            start, end = t, None
        elif "training done" in line and start is not None:
            end = t
    return None if start is None or end is None else (end - start) % 86400


def row_from_exp(
    exp_dir: PathLike,
    recipe_dir: PathLike,
    label: str,
    config: Optional[str] = None,
    overrides: Optional[Sequence[str]] = None,
    seed: Optional[int] = None,
    test_decoded_once: bool = True,
) -> Dict[str, Any]:
    """A results row (RESULTS_SCHEMA) of the run in ``exp_dir``: its WER (and CER) per set and method from the
    decode dirs' wer.json, and from its run.json the seed, commit, train time and machine. A run made before run.json
    keeps commit null, takes its train time from log/train.log and its seed from ``.train.done`` (else ``seed``);
    its config is ``config`` (else the recipe's config.yaml) with ``overrides``."""
    exp_dir, recipe_dir = Path(exp_dir), Path(recipe_dir)
    scores = read_scores(exp_dir)
    if not scores:
        raise AsrError(f"no {exp_dir}/decode_*/wer.json: decode and score the run first (run.sh stages 5-6)")
    rec = read_run(exp_dir) or {}
    recorded = rec.get("seed", trained_seed(exp_dir))
    if seed is not None and recorded is not None and int(seed) != int(recorded):
        raise AsrError(f"{exp_dir} was trained with train.seed={recorded}, not the --seed {seed} given")
    seed = recorded if recorded is not None else seed
    if seed is None:
        raise AsrError(f"{exp_dir}: no run.json or .train.done says its seed; pass --seed")
    wer: Dict[str, Dict[str, float]] = {}
    cer: Dict[str, Dict[str, float]] = {}
    for s in scores:
        wer.setdefault(s["set"], {})[s["method"]] = round(float(s["wer"]), 2)
        if "cer" in s:
            cer.setdefault(s["set"], {})[s["method"]] = round(float(s["cer"]), 2)
    commit = rec.get("commit")
    if commit and rec.get("dirty"):
        commit += "-dirty"
    machine = rec.get("machine") or {}
    loads = [x[0] for x in (machine.get("load_avg_start"), machine.get("load_avg_end")) if x]
    row: Dict[str, Any] = {
        "label": label,
        "config": config or _config_name(rec.get("config_file") or "config.yaml", recipe_dir),
        "overrides": list(overrides) if overrides is not None else command_overrides(rec.get("command", [])),
        "seed": int(seed),
        "wer": wer,
        "test_decoded_once": test_decoded_once,
        "train_time_s": round(rec["wall_s"]) if rec.get("wall_s") is not None else logged_train_seconds(exp_dir),
        "commit": commit,
        "machine": {"cores": machine.get("cores"), "load_avg": round(sum(loads) / len(loads), 1) if loads else None},
        "source": "exp",
    }
    if cer:
        row["cer"] = cer
    if not machine:
        row.pop("machine")
    return row
