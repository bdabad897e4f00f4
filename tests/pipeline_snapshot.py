"""The planned steps of every recipe config under a few layouts: tests/test_pipeline.py compares them with
tests/data/pipeline_plan.json, written by `python tests/pipeline_snapshot.py` from a known-good plan. The file holds a
SHA-256 of every (config, layout) plan's canonical JSON and, for the digits recipe, the plans themselves, so that a
mismatch there shows its diff; `python tests/pipeline_snapshot.py --show KEY` prints any plan. A change meant to
alter the steps regenerates the file (and says so in its commit)."""

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "tests/data/pipeline_plan.json"
SHOWN = "recipes/digits/config.yaml|"  # the plans kept whole in the file (the others as hashes)
FIELDS = (
    "name",
    "stage",
    "module",
    "args",
    "inputs",
    "outputs",
    "threads",
    "launch",
    "training",
    "resources",
    "message",
)
sys.path.insert(0, str(ROOT))

from asrlib.config import load_config  # noqa: E402
from asrlib.pipeline import Layout, plan  # noqa: E402

# layout name -> (config overrides, Layout keywords)
LAYOUTS = {
    "run.sh": ((), {}),
    "run.sh-options": (
        ("train.seed=3",),
        dict(
            data="D",
            exp="E/x",
            nj=3,
            corpus_dir="C",
            overrides=("train.seed=3",),
            num_learners=2,
            nnodes=2,
            threads_per_learner=2,
            rdzv_endpoint="h:29400",
            max_restarts=1,
        ),
    ),
    "no-prepare": ((), dict(prepare=False)),
    "snakefile": ((), dict(slurm=True)),
    "snakefile-2-nodes": (
        ("cluster.nodes=2", "cluster.learners_per_node=2", "cluster.max_restarts=1"),
        dict(slurm=True),
    ),
    "snakefile-1-node-2": (("cluster.learners_per_node=2",), dict(slurm=True)),
}


def configs():
    return sorted(ROOT.glob("recipes/*/config*.yaml"))


def planned(config: Path, layout: str) -> list:
    overrides, kw = LAYOUTS[layout]
    rel = str(config.relative_to(ROOT))
    cfg = load_config(config, list(overrides))
    return [{f: getattr(s, f) for f in FIELDS} for s in plan(cfg, Layout(config=rel, **kw), "PY")]


def canonical(steps: list) -> str:
    return json.dumps(steps, sort_keys=True, separators=(",", ":"))


def snapshot() -> dict:
    plans = {f"{c.relative_to(ROOT)}|{lay}": planned(c, lay) for c in configs() for lay in LAYOUTS}
    return {
        "sha256": {k: hashlib.sha256(canonical(v).encode()).hexdigest() for k, v in plans.items()},
        "plans": {k: v for k, v in plans.items() if k.startswith(SHOWN)},
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["--show"]:
        config, layout = sys.argv[2].split("|")
        print(json.dumps(planned(ROOT / config, layout), indent=1))
    else:
        SNAPSHOT.write_text(json.dumps(snapshot(), indent=1, sort_keys=True) + "\n")
        print(f"wrote {SNAPSHOT}")
