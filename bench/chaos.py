"""Kill the digits recipe anywhere, rerun it, and check that it ends exactly where an uninterrupted run ends.

    PYTHONPATH=. python bench/chaos.py                # 20 trials (README figures)
    PYTHONPATH=. python bench/chaos.py --quick        # 1 trial, 1 kill, a smaller tiny corpus (under a minute)
    PYTHONPATH=. python bench/chaos.py --quick --trials 3 --max-kills 3   # what tests/test_chaos.py runs
    PYTHONPATH=. python bench/chaos.py --learners 2 --algo bmuf --stages 4 --trials 10   # 2 BMUF learners

The recipe is ``recipes/digits/run.sh --stop-stage 6`` (data, fbank, lang, training, decoding, scoring) on tiny
settings (:data:`TINY`). First one uninterrupted run (the reference), timed stage by stage. Then each trial runs the
same command in a fresh directory under a chaos loop: pick a random stage and a random offset into it (a fraction of
that stage's reference duration), SIGKILL the whole process group there, check that nothing a later stage could read
is partial, rerun the same command; 1–3 kills per trial, then the run is left to finish. At the end the trial's
outputs are compared with the reference's, file by file. Every run happens in the same directory (moved aside
afterwards), so paths, and the fingerprints of path-bearing inputs in the stage markers, are the same.

Checks after each kill: every entry of every ``feats/cmvn/logprobs`` scp reads in full, every wav in a ``wav.scp``
opens, every lhotse manifest parses, every stage marker and checkpoint loads. At the end: no temporary file is left
and every output is bit-identical to the reference — the whole
pipeline is deterministic on one machine: seeded TTS and noise, fbank, FST construction, training with exact resume
(model, optimizer, sampler position, every RNG), decoding. Only logs, TensorBoard events and the timing fields
(:func:`is_timing`: ``*_seconds``, ``*_s``, ``*mtime_ns``, ``elapsed``, ...) are left out of the comparison, because
they record
wall-clock times.

With ``--learners 2 --algo bmuf`` stage 4 is a 2-learner BMUF run under torchrun (``run.sh --num-learners 2``,
block period 3 steps, a checkpoint every 10 steps: most kills in training land inside a block); the kill takes
the learners down with their torchrun agent (asrlib.parallel.env.die_with_agent) and the rerun resumes every learner's
model, optimizer and RNG and the global model and block momentum, so the outputs are bit-identical again.

Ends with one JSON line: trials, kills per stage, recoveries, integrity problems and mismatches.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

ROOT = Path(__file__).resolve().parents[1]
RUN_SH = ROOT / "recipes/digits/run.sh"
STAGES = {1: "data", 2: "features", 3: "lang", 4: "train", 5: "decode", 6: "score"}
STAGE_OF = {
    "local.digits": 1,
    "steps.validate_data_dir": 1,
    "steps.compute_fbank": 2,
    "steps.compute_cmvn": 2,
    "steps.prepare_lang": 3,
    "steps.train": 4,
    "steps.train_dist": 4,
    "steps.compute_logprobs": 5,
    "steps.decode": 5,
    "steps.score": 6,
    "steps.make_results": 6,
}
# Tiny settings: 90/9/9 utterances, a 1 x 64 LSTM, 6 epochs with a checkpoint every 10 steps (~35 s on 2 cores).
TINY = {
    "data": {"size": 0.03, "train_scale": 1.0},
    "model": {"num_layers": 1, "hidden_size": 64, "proj_size": 0},
    "train": {
        "epochs": 6,
        "batch_seconds": 8,
        "lr": 0.004,
        "warmup_steps": 5,
        "checkpoint_every": 10,
        "num_threads": 1,
    },
}
# --quick: fewer utterances and epochs on top of TINY (60/6/6 utterances, 3 epochs).
QUICK = {"data": {"size": 0.02}, "train": {"epochs": 3}}
IGNORED_DIRS = {"log", "tensorboard"}  # wall-clock times in every line / event
TIMING_KEYS = {"seconds", "elapsed", "time", "started", "frames_per_s", "rtf", "mtime_ns"}
# a step's provenance record (run.json, asrlib/results/records.py): when it ran and the machine's load then
RECORD_CLOCK_KEYS = {"start", "end", "machine"}


def is_timing(key: Any) -> bool:
    return isinstance(key, str) and (key in TIMING_KEYS or key.endswith(("_seconds", "_s", "_mtime_ns")))


# ------------------------------------------------------------------------------------------ running the recipe
def tiny_config(out: Path, algo: str = "local", smaller: Optional[Dict[str, Dict[str, Any]]] = None) -> Path:
    cfg = yaml.safe_load((ROOT / "recipes/digits/config.yaml").read_text())
    for settings in (TINY, smaller or {}):
        for section, vals in settings.items():
            cfg[section].update(vals)
    if algo != "local":
        cfg["train"]["dist"] = {"algo": algo, "period": 3}
    out.write_text(yaml.safe_dump(cfg))
    return out


def recipe_cmd(cfg: Path, work: Path, learners: int = 1) -> List[str]:
    return [
        str(RUN_SH),
        "--config",
        str(cfg),
        "--data",
        str(work / "data"),
        "--exp",
        str(work / "exp/lstm_ctc"),
        "--stop-stage",
        "6",
        "--python",
        sys.executable,
        "--num-learners",
        str(learners),
    ]


class RecipeRun:
    """One attempt: the recipe in its own process group, its step lines (``+ steps.X ...``) followed as they come."""

    def __init__(self, cmd: List[str], work: Path, attempt: int):
        self.log = work / f"attempt{attempt}.log"
        self.t0 = time.monotonic()
        self._seen: List[Tuple[float, str]] = []  # (seconds since start when first seen, module)
        with open(self.log, "w") as f:
            self.proc = subprocess.Popen(
                cmd,
                cwd=work,
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )

    def steps(self) -> List[Tuple[float, str]]:
        """(seconds since start when first seen, module) of every step started so far."""
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("+ ") and len(line.split()) > 1 and line.split()[1] in STAGE_OF:
                out.append(line.split()[1])
        now = time.monotonic() - self.t0
        self._seen += [(now, m) for m in out[len(self._seen) :]]
        return self._seen

    def stage(self) -> int:
        s = self.steps()
        return STAGE_OF[s[-1][1]] if s else 1

    def wait_for_stage(self, stage: int, poll: float = 0.05) -> bool:
        """Block until a step of ``stage`` (or a later one) has started; False when the run ended first."""
        while self.proc.poll() is None:
            if self.steps() and self.stage() >= stage:
                return True
            time.sleep(poll)
        return False

    def run_for(self, seconds: float) -> bool:
        """Let it run ``seconds`` more; True when it ended in that time."""
        try:
            self.proc.wait(timeout=max(seconds, 0.0))
            return True
        except subprocess.TimeoutExpired:
            return False

    def kill(self) -> int:
        stage = self.stage()
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        return stage


def reference_run(cmd: List[str], work: Path) -> Dict[int, float]:
    """Run once uninterrupted; return each stage's duration in seconds."""
    run = RecipeRun(cmd, work, 0)
    while run.proc.poll() is None:
        run.steps()
        time.sleep(0.05)
    steps = run.steps()
    end = time.monotonic() - run.t0
    if run.proc.returncode != 0:
        raise SystemExit(f"the reference run failed (exit {run.proc.returncode}); see {run.log}")
    starts: Dict[int, float] = {}
    for t, m in steps:
        starts.setdefault(STAGE_OF[m], t)
    order = sorted(starts)
    return {s: (starts[order[i + 1]] if i + 1 < len(order) else end) - starts[s] for i, s in enumerate(order)}


# ------------------------------------------------------------------------------------------ checks
def integrity_problems(work: Path) -> List[str]:
    """What a later stage would find broken in ``work`` right now (after a kill): [] when nothing."""
    import soundfile as sf

    from asrlib.io.torchfile import load_torch
    from asrlib.kaldi_io import MatrixReader

    problems = []
    for p in sorted(work.rglob("*")):
        if not p.is_file() or is_temporary(p):
            continue
        try:
            if p.name == "wav.scp":
                for line in p.read_text().splitlines():
                    sf.info(line.split(maxsplit=1)[1])
            elif p.suffix == ".scp":
                for _key, mat in MatrixReader(p):
                    assert mat.size > 0, "empty matrix"
            elif p.name.endswith(".jsonl.gz"):
                with gzip.open(p, "rt") as f:
                    for line in f:
                        json.loads(line)
            elif p.suffix == ".pt":
                load_torch(p, "checkpoint")
            elif p.name.endswith(".done") or p.name == ".validated":
                json.loads(p.read_text())
        except Exception as e:  # anything at all: that is what the check is for
            problems.append(f"{p.relative_to(work)}: {type(e).__name__}: {e}")
    return problems


def is_temporary(p: Path) -> bool:
    return p.name.startswith(".") and p.name.endswith(".tmp")


def _untimed(obj: Any) -> Any:
    """``obj`` without its timing fields, recursively (tuples become lists)."""
    if isinstance(obj, dict):
        return {k: _untimed(v) for k, v in obj.items() if not is_timing(k)}
    if isinstance(obj, (list, tuple)):
        return [_untimed(v) for v in obj]
    return obj


def _same(a: Any, b: Any) -> bool:
    import numpy as np
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a, b)
        )
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _content(p: Path) -> Any:
    """A file's content in comparable form: checkpoints and JSON as objects without timing fields, else bytes."""
    if p.suffix == ".pt":
        from asrlib.io.torchfile import load_torch

        return _untimed(load_torch(p, "checkpoint"))
    raw = p.read_bytes()
    if p.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    if p.suffix == ".json" or p.name.endswith(".done") or p.name == ".validated":
        obj = _untimed(json.loads(raw))
        if p.name == "run.json" and isinstance(obj, dict):
            obj = {k: v for k, v in obj.items() if k not in RECORD_CLOCK_KEYS}
        return obj
    return raw


def compared_files(work: Path) -> List[str]:
    return sorted(
        str(p.relative_to(work))
        for p in work.rglob("*")
        if p.is_file()
        and not is_temporary(p)
        and p.name != ".lock"
        and not p.name.startswith("attempt")
        and not IGNORED_DIRS & set(p.relative_to(work).parts)
    )


def mismatches(ref: Path, work: Path) -> List[str]:
    """Files that differ from the reference (or exist in only one of the two) and temporaries left behind."""
    a, b = compared_files(ref), compared_files(work)
    out = [f"only in reference: {f}" for f in sorted(set(a) - set(b))]
    out += [f"not in reference: {f}" for f in sorted(set(b) - set(a))]
    out += [f"differs: {f}" for f in sorted(set(a) & set(b)) if not _same(_content(ref / f), _content(work / f))]
    out += [f"temporary left: {p.relative_to(work)}" for p in work.rglob("*") if is_temporary(p)]
    return out


# ------------------------------------------------------------------------------------------ the loop
def chaos_trial(
    cmd: List[str],
    work: Path,
    durations: Dict[int, float],
    rng: random.Random,
    max_attempts: int = 10,
    max_kills: int = 3,
) -> Dict[str, Any]:
    """Run the recipe (``cmd``, writing into ``work``) with 1–``max_kills`` random SIGKILLs, each aimed at a random
    stage of ``durations`` (stage -> its reference duration) and a random offset into it; return what happened.

    A fresh run that ends before its first kill lands (a late offset into the last stage) is started afresh, so
    that every trial is killed at least once."""
    work.mkdir(parents=True)
    planned = rng.randint(1, max_kills)
    kills: List[Dict[str, Any]] = []
    problems: List[str] = []
    restarted = 0
    for attempt in range(1, max_attempts + 1):
        run = RecipeRun(cmd, work, attempt)
        try:
            if len(kills) < planned and attempt < max_attempts:
                target = rng.choice(sorted(durations))
                offset = rng.random() * durations[target]
                if run.wait_for_stage(target) and not run.run_for(offset):
                    stage = run.kill()
                    found = integrity_problems(work)
                    problems += [f"after kill {len(kills) + 1} (stage {stage}): {p}" for p in found]
                    kills.append({"target_stage": target, "offset_s": round(offset, 2), "stage": stage})
                    continue
            run.proc.wait()
        finally:  # the bench itself interrupted: take the recipe down with it
            if run.proc.poll() is None:
                run.kill()
        if not kills and attempt < max_attempts:
            shutil.rmtree(work)
            work.mkdir()
            restarted += 1
            continue
        return {
            "kills": kills,
            "attempts": attempt - restarted,
            "exit": run.proc.returncode,
            "integrity": problems,
            "unkilled_fresh_runs": restarted,
        }
    raise AssertionError("unreachable: the last attempt is never killed")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=None, help="default 20 (--quick: 1)")
    p.add_argument("--max-kills", type=int, default=None, help="kills per trial: 1 to this (default 3; --quick: 1)")
    p.add_argument(
        "--quick", action="store_true", help=f"1 trial with 1 kill, and a smaller tiny run ({QUICK}): under a minute"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--learners", type=int, default=1, help="training learners (torchrun when > 1)")
    p.add_argument("--algo", default="local", help="train.dist.algo with --learners > 1 (e.g. bmuf, sync, ma)")
    p.add_argument("--stages", type=int, nargs="+", default=sorted(STAGES), help="stages the kills aim at")
    p.add_argument("--work-dir", type=Path, default=None, help="default: a temporary directory, removed at the end")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON report here")
    a = p.parse_args(argv)
    trials = a.trials or (1 if a.quick else 20)
    max_kills = a.max_kills or (1 if a.quick else 3)
    base = Path(tempfile.mkdtemp(prefix="chaos-")) if a.work_dir is None else a.work_dir
    base.mkdir(parents=True, exist_ok=True)
    if (a.learners > 1) != (a.algo != "local"):
        p.error("--learners > 1 needs a distributed --algo (and --algo needs --learners > 1)")
    cfg = tiny_config(base / "tiny.yaml", a.algo, QUICK if a.quick else None)

    run_dir, ref = base / "run", base / "reference"
    cmd = recipe_cmd(cfg, run_dir, a.learners)
    for d in (run_dir, ref):
        shutil.rmtree(d, ignore_errors=True)
    run_dir.mkdir()
    t0 = time.monotonic()
    durations = reference_run(cmd, run_dir)
    ref_s = time.monotonic() - t0
    run_dir.rename(ref)
    print(
        f"reference run: {ref_s:.1f} s; stage durations: "
        + ", ".join(f"{STAGES[s]} {d:.1f} s" for s, d in durations.items()),
        flush=True,
    )

    rng = random.Random(a.seed)
    kills_per_stage: collections.Counter = collections.Counter()
    report: List[Dict[str, Any]] = []
    for i in range(trials):
        t1 = time.monotonic()
        res = chaos_trial(cmd, run_dir, {s: d for s, d in durations.items() if s in a.stages}, rng, max_kills=max_kills)
        res["mismatches"] = mismatches(ref, run_dir) if res["exit"] == 0 else ["did not complete"]
        res["seconds"] = round(time.monotonic() - t1, 1)
        kills_per_stage.update(STAGES[k["stage"]] for k in res["kills"])
        report.append(res)
        ok = res["exit"] == 0 and not res["mismatches"] and not res["integrity"]
        print(
            f"trial {i + 1}/{trials}: {len(res['kills'])} kill(s) in stage(s) "
            f"{[k['stage'] for k in res['kills']]}, {res['attempts']} attempts, exit {res['exit']}, "
            f"{len(res['integrity'])} integrity problems, {len(res['mismatches'])} mismatches, "
            f"{res['seconds']} s{'' if ok else ' <-- FAILED'}",
            flush=True,
        )
        for line in res["integrity"] + res["mismatches"]:
            print("   ", line, flush=True)
        if ok:
            shutil.rmtree(run_dir)
        else:  # kept for a look
            run_dir.rename(base / f"failed-trial{i + 1:02d}")
    recovered = sum(r["exit"] == 0 and not r["mismatches"] and not r["integrity"] for r in report)
    summary = {
        "bench": "chaos",
        "learners": a.learners,
        "algo": a.algo,
        "trials": trials,
        "recovered": recovered,
        "kills": sum(len(r["kills"]) for r in report),
        "kills_per_stage": {STAGES[s]: kills_per_stage[STAGES[s]] for s in STAGES},
        "integrity_problems": sum(len(r["integrity"]) for r in report),
        "mismatches": sum(len(r["mismatches"]) for r in report),
        "compared_files": len(compared_files(ref)),
        "reference_s": round(ref_s, 1),
        "total_s": round(time.monotonic() - t0, 1),
    }
    if a.out is not None:
        a.out.write_text(json.dumps({**summary, "per_trial": report}, indent=1) + "\n")
    if a.work_dir is None and recovered == trials:
        shutil.rmtree(base, ignore_errors=True)
    elif recovered < trials:
        print(f"failed trials are kept in {base}", flush=True)
    print(json.dumps(summary))
    return 0 if recovered == trials else 1


if __name__ == "__main__":
    sys.exit(main())
