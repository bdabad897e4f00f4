"""Launch ``steps.train`` as several learners with torchrun (torch.distributed.run), one process per learner.

    # one machine, 2 learners with 1 thread each (the algorithm comes from the config or --set):
    python -m steps.train_dist --num-learners 2 --threads-per-learner 1 -- \
        --config recipes/digits/config.yaml --set train.dist.algo=bmuf --data-dir data --feats-dir data/fbank \
        --lang-dir data/lang --exp-dir exp/bmuf2
    # several machines: run the same command on each, with the same --rdzv-endpoint and --nnodes
    python -m steps.train_dist --nnodes 2 --num-learners 8 --rdzv-endpoint host0:29400 --rdzv-id job7 -- ...

Everything after ``--`` goes to ``steps.train`` unchanged. With ``--num-learners 1``, ``--nnodes 1`` and no
restarts this runs ``steps.train`` directly (no torchrun). Exit status: 0 when every learner succeeded, 1 otherwise;
2 (with one ``ERROR`` line) when another run is writing the same ``--exp-dir`` (its lock, see
asrlib.io.stage.dir_lock).

Learners that die: ``--max-restarts N`` (torchrun's, default 0) restarts the whole job up to N times when a learner
fails (crash, SIGKILL, out of memory; torchrun stops the surviving learners first). Every restarted learner resumes
from the exp dir's ``checkpoints/latest.pt`` exactly as a rerun would (model, optimizer, scheduler, data position,
every learner's RNG and its algorithm state; written atomically by rank 0 at every ``train.checkpoint_every`` steps
and at each epoch end), so a failure costs at most the steps since the last checkpoint, and with sync, ma, bmuf,
ring, powersgd or diloco the result is bit-identical to an uninterrupted run. The new rank 0 takes the exp dir's
lock again (the kernel released the dead one's); the restart is logged in log/train*.log ("torchrun restart K of N"
then "resumed from ..."). Without restarts, rerunning the same command resumes the same way. The testing aid
``train.kill_after_steps`` fires only in the first attempt. With restarts, each attempt gets a fresh rendezvous
store (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: torchrun's shared store keeps the dead attempt's Gloo addresses, and a
restarted learner reading one hangs in connect, pytorch/pytorch#135712). Killing this launcher, even with SIGKILL,
kills its learners too (asrlib.parallel.env.die_with_agent; torchrun gives each learner a session of its own, so a
process-group kill would not reach them).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import List, Optional

from asrlib.cli import env_with_root, output_locks, run_main
from asrlib.errors import AsrError

ROOT = Path(__file__).resolve().parents[1]


def torchrun_args(
    num_learners: int,
    nnodes: int,
    train_args: List[str],
    rdzv_endpoint: Optional[str] = None,
    rdzv_id: str = "asr",
    node_rank: Optional[int] = None,
    max_restarts: int = 0,
) -> List[str]:
    """The torch.distributed.run argument list that starts ``steps.train`` with ``train_args``."""
    args = [f"--nproc-per-node={num_learners}", f"--nnodes={nnodes}", f"--max-restarts={max_restarts}"]
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
        own, train_args = argv[:i], argv[i + 1 :]
    else:
        own, train_args = argv, []
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-learners", type=int, default=1, help="learners (processes) on this node")
    p.add_argument("--nnodes", type=int, default=1, help="number of machines")
    p.add_argument("--node-rank", type=int, default=None, help="this machine's index (optional with c10d)")
    p.add_argument("--rdzv-endpoint", default=None, help="HOST:PORT of the rendezvous (multi-node)")
    p.add_argument("--rdzv-id", default="asr", help="job id shared by all nodes")
    p.add_argument(
        "--threads-per-learner", type=int, default=None, help="sets train.num_threads (default: the config's value)"
    )
    p.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        help="restart the job up to N times when a learner fails; it resumes from the last checkpoint",
    )
    a = p.parse_args(own)
    if not train_args:
        p.error("give the steps.train arguments after --")
    if a.num_learners < 1 or a.nnodes < 1 or a.max_restarts < 0:
        raise AsrError("--num-learners and --nnodes must be >= 1, --max-restarts >= 0")
    if a.threads_per_learner is not None:
        train_args += ["--set", f"train.num_threads={a.threads_per_learner}"]
    os.environ["PYTHONPATH"] = env_with_root(ROOT)["PYTHONPATH"]
    if a.num_learners == 1 and a.nnodes == 1 and a.max_restarts == 0:  # steps.train in this very process (same
        # PID, so a signal to this step reaches the training); steps never import each other
        os.execv(sys.executable, [sys.executable, "-m", "steps.train", *train_args])
    if a.nnodes == 1:  # another run writing the exp dir: refuse now, before any learner starts
        with output_locks(train_args, ("--exp-dir",)):
            pass  # the learner with rank 0 holds the lock for the job (asrlib.cli.output_dirs)
    if a.max_restarts:  # a fresh rendezvous store per attempt: with the agent's store shared across restarts,
        # a restarted learner can read the dead attempt's Gloo addresses and hang (pytorch/pytorch#135712)
        os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        torchrun.main(
            torchrun_args(a.num_learners, a.nnodes, train_args, a.rdzv_endpoint, a.rdzv_id, a.node_rank, a.max_restarts)
        )
    except ChildFailedError as e:
        print(
            f"ERROR [train_dist]: a learner failed ({', '.join(str(r) for r in e.failures)})"
            f"{f' and {a.max_restarts} restart(s) did not help' if a.max_restarts else ''}; "
            f"see the exp dir's log/train*.log",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    run_main(main)
