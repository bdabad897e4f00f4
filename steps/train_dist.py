"""Launch ``steps.train`` as several learners with torchrun (torch.distributed.run), one process per learner.

    # one machine, 2 learners with 1 thread each (the algorithm comes from the config or --set):
    python -m steps.train_dist --num-learners 2 --threads-per-learner 1 -- \
        --config recipes/digits/config.yaml --set train.dist.algo=bmuf --data-dir data --feats-dir data/fbank \
        --lang-dir data/lang --exp-dir exp/bmuf2
    # several machines: run the same command on each, with the same --rdzv-endpoint and --nnodes
    python -m steps.train_dist --nnodes 2 --num-learners 8 --rdzv-endpoint host0:29400 --rdzv-id job7 -- ...

Everything after ``--`` goes to ``steps.train`` unchanged. With ``--num-learners 1`` and ``--nnodes 1`` this runs
``steps.train`` directly (no torchrun). Exit status: 0 when every learner succeeded, 1 otherwise; 2 (with one
``ERROR`` line) when another run is writing the same ``--exp-dir`` (its lock, see asrlib.io_utils.dir_lock).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import List, Optional

from asrlib.cli import output_locks, run_main
from asrlib.io_utils import AsrError

ROOT = Path(__file__).resolve().parents[1]


def torchrun_args(num_learners: int, nnodes: int, train_args: List[str], rdzv_endpoint: Optional[str] = None,
                  rdzv_id: str = "asr", node_rank: Optional[int] = None) -> List[str]:
    """The torch.distributed.run argument list that starts ``steps.train`` with ``train_args``."""
    args = [f"--nproc-per-node={num_learners}", f"--nnodes={nnodes}", "--max-restarts=0"]
    if nnodes == 1 and rdzv_endpoint is None:
        args.append("--standalone")
    else:
        if rdzv_endpoint is None:
            raise AsrError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (the same on every node)")
        args += ["--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={rdzv_id}"]
        if node_rank is not None:
            args.append(f"--node-rank={node_rank}")
    return args + ["-m", "steps.train", *train_args]


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        i = argv.index("--")
        own, train_args = argv[:i], argv[i + 1:]
    else:
        own, train_args = argv, []
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-learners", type=int, default=1, help="learners (processes) on this node")
    p.add_argument("--nnodes", type=int, default=1, help="number of machines")
    p.add_argument("--node-rank", type=int, default=None, help="this machine's index (optional with c10d)")
    p.add_argument("--rdzv-endpoint", default=None, help="HOST:PORT of the rendezvous (multi-node)")
    p.add_argument("--rdzv-id", default="asr", help="job id shared by all nodes")
    p.add_argument("--threads-per-learner", type=int, default=None,
                   help="sets train.num_threads (default: the config's value)")
    a = p.parse_args(own)
    if not train_args:
        p.error("give the steps.train arguments after --")
    if a.num_learners < 1 or a.nnodes < 1:
        raise AsrError("--num-learners and --nnodes must be >= 1")
    if a.threads_per_learner is not None:
        train_args += ["--set", f"train.num_threads={a.threads_per_learner}"]
    os.environ["PYTHONPATH"] = str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"]
                                            if os.environ.get("PYTHONPATH") else "")
    if a.num_learners == 1 and a.nnodes == 1:
        from steps.train import main as train_main
        with output_locks(train_args, ("--exp-dir",)):   # what run_main does for steps.train
            return train_main(train_args) or 0
    if a.nnodes == 1:   # another run writing the exp dir: refuse now, before any learner starts
        with output_locks(train_args, ("--exp-dir",)):
            pass        # the learner with rank 0 holds the lock for the job (asrlib.cli.output_dirs)
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        torchrun.main(torchrun_args(a.num_learners, a.nnodes, train_args, a.rdzv_endpoint, a.rdzv_id,
                                    a.node_rank))
    except ChildFailedError as e:
        print(f"ERROR [train_dist]: a learner failed ({', '.join(str(r) for r in e.failures)}); "
              f"see the exp dir's log/train*.log", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    run_main(main)
