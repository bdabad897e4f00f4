"""Print or run a recipe's stages, as declared once in :mod:`asrlib.pipeline` (what ``recipes/<corpus>/run.sh`` does).

    python -m steps.plan --config recipes/digits/config.yaml --stage 4 --stop-stage 6          # print the commands
    python -m steps.plan --config recipes/digits/config.yaml --stage 4 --stop-stage 6 --run    # run them

Options follow Kaldi's run.sh (``--stop-stage`` or ``--stop_stage``). ``--run`` runs the steps one after the other in
the current directory, each logged as ``+ MODULE ARGS`` on stderr, and stops at the first that fails (its exit status
is this command's). Every step skips work it finds finished, so rerunning after a failure or a kill continues.
``--cmd`` / ``--train-cmd``: a launcher put before every step / the training steps (Kaldi's ``--cmd``, e.g.
``"srun --ntasks=1 --cpus-per-task=4"``). ``--num-learners N`` (> 1), ``--nnodes``, ``--max-restarts``: training under
torchrun through ``steps.train_dist``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from typing import List, Optional

from asrlib.cli import add_config_args, env_with_root, run_main
from asrlib.config import load_config
from asrlib.errors import AsrError
from asrlib.pipeline import STAGES, Layout, plan


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_args(p)
    p.add_argument("--stage", type=int, default=STAGES[0])
    p.add_argument("--stop-stage", "--stop_stage", dest="stop_stage", type=int, default=STAGES[-1])
    p.add_argument("--data", default="data", help="data dir (Kaldi data dirs, fbank/, lang/)")
    p.add_argument("--exp", default="exp/lstm_ctc", help="experiment dir")
    p.add_argument(
        "--nj",
        type=int,
        default=0,
        help="parallel jobs of data preparation and features (default: the config's features.nj)",
    )
    p.add_argument(
        "--corpus-dir",
        "--corpus_dir",
        dest="corpus_dir",
        default="",
        help="stage 1: where the corpus lies (default: the config's data.corpus_dir)",
    )
    p.add_argument("--skip-prepare", action="store_true", help="stage 1 without local.<corpus> (data dirs exist)")
    p.add_argument("--cmd", default="", help="launcher before every step, e.g. 'srun --ntasks=1'")
    p.add_argument(
        "--train-cmd",
        "--train_cmd",
        dest="train_cmd",
        default=None,
        help="launcher before the training steps (default: --cmd), e.g. 'srun --gres=gpu:1'",
    )
    p.add_argument("--python", default=sys.executable, help="the interpreter the steps run with")
    p.add_argument("--num-learners", "--num_learners", dest="num_learners", type=int, default=1)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--threads-per-learner", "--threads_per_learner", dest="threads_per_learner", type=int, default=1)
    p.add_argument("--rdzv-endpoint", "--rdzv_endpoint", dest="rdzv_endpoint", default="")
    p.add_argument("--max-restarts", "--max_restarts", dest="max_restarts", type=int, default=0)
    p.add_argument("--run", action="store_true", help="run the steps (default: print them)")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    a = parser().parse_args(argv)
    if a.num_learners < 1 or a.nnodes < 1 or a.max_restarts < 0:
        raise AsrError("--num-learners and --nnodes must be >= 1, --max-restarts >= 0")
    cfg = load_config(a.config, a.overrides)
    lay = Layout(
        config=a.config,
        data=a.data,
        exp=a.exp,
        nj=a.nj,
        corpus_dir=a.corpus_dir,
        overrides=a.overrides,
        prepare=not a.skip_prepare,
        num_learners=a.num_learners,
        nnodes=a.nnodes,
        threads_per_learner=a.threads_per_learner,
        rdzv_endpoint=a.rdzv_endpoint,
        max_restarts=a.max_restarts,
    )
    train_cmd = a.cmd if a.train_cmd is None else a.train_cmd
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # steps run as `python -m steps.X` from here
    env = env_with_root(root)
    for step in plan(cfg, lay, a.python):
        if not a.stage <= step.stage <= a.stop_stage:
            continue
        prefix = train_cmd if step.training else a.cmd
        if not a.run:
            print(step.shell(a.python, prefix) if step.module else f"# {step.message}")
            continue
        if not step.module:
            print(step.message)
            continue
        print(f"+ {prefix + ' ' if prefix else ''}{step.display()}", file=sys.stderr, flush=True)
        rc = subprocess.call([*shlex.split(prefix), *step.argv(a.python)], env=env)
        if rc != 0:
            print(
                f"ERROR [plan]: stage {step.stage} step {step.name} failed (exit status {rc}); fix the cause and "
                f"rerun: finished steps are skipped",
                file=sys.stderr,
            )
            return rc
    return 0


if __name__ == "__main__":
    run_main(main, writes=())
