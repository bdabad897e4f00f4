"""Run several learners as local processes (Gloo on CPU) without torchrun — for tests and benchmarks.

:func:`run_learners` starts ``world`` spawned processes that join one process group through a file store, runs
``fn(rank, world, *args)`` in each and returns their results; a learner that hangs (deadlock) or fails is reported
with its traceback instead of hanging the caller (a failed one stops the run at once), and a run whose first
failure was a learner's rendezvous is tried again. :func:`train_toy` trains on a toy set-up written by
``make_toy_ctc_setup`` (tests/helpers.py) with the real Trainer and a distributed algorithm, and can check after
every step that the learners that should hold identical parameters do.

Faults of real jobs (``steps.train_dist``, learners under torchrun): :func:`learner_pids` finds a learner's process
(rank and torchrun attempt), :func:`wait_for_step` waits until a job has a checkpoint and has logged a given step, so
a SIGKILL from outside lands mid-epoch after a checkpoint, and :func:`restart_report` reads from the learners' logs
how many steps were done before the failure, which checkpoint step the next attempt resumed from and the steps
lost (exact with ``train.log_every=1``).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from asrlib.io.torchfile import load_torch, save_torch
from asrlib.cli import option_values


def join_gloo(rank: int, world: int, init_file: str, attempt: int) -> None:
    """The learners' rendezvous: one Gloo process group through a file store (``attempt``: 0, 1, ... for
    :func:`run_learners`'s retries)."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)


def _entry(
    fn: Callable,
    rank: int,
    world: int,
    init_file: str,
    out_dir: str,
    args: tuple,
    env: Dict[str, str],
    threads: int,
    join: Callable,
    attempt: int,
) -> None:
    os.environ.update(env)
    os.environ.update(
        {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank % int(env.get("LOCAL_WORLD_SIZE", world)))}
    )
    torch.set_num_threads(threads)
    out = Path(out_dir)
    try:
        join(rank, world, init_file, attempt)
        (out / f"joined.{rank}").touch()  # past the rendezvous: from here on a failure is the learner's own
        result = fn(rank, world, *args)
        save_torch(out / f"result.{rank}.pt", result)
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:
        (out / f"error.{rank}.txt").write_text(traceback.format_exc())
        raise SystemExit(1)


RENDEZVOUS_TRIES = 3  # Gloo's rendezvous on one machine fails now and then ("connectFullMesh failed ... Connection
# closed by peer", once in many CI runs), sometimes on one side only: a run whose first failure was a learner that had
# not got past it is started again, with a new store
FAILED_PEERS_GRACE_S = 10.0  # after a learner has failed, how long the others get to end before they are killed


def run_learners(
    fn: Callable,
    world: int,
    args: Sequence[Any] = (),
    timeout: float = 120.0,
    env: Optional[Dict[str, str]] = None,
    threads: int = 1,
    join: Callable = join_gloo,
) -> List[Any]:
    """Run ``fn(rank, world, *args)`` in ``world`` processes in one Gloo process group; return the results.

    A learner that fails stops the run: the others (waiting for it in a collective, typically) are killed
    :data:`FAILED_PEERS_GRACE_S` later, not at ``timeout``, and its traceback is raised. A run whose first
    failure was a learner's rendezvous (``join``) is started again, up to :data:`RENDEZVOUS_TRIES` times: its peers
    can have got through the rendezvous, so ``fn`` must tolerate a start again after they began."""
    for attempt in range(RENDEZVOUS_TRIES):
        try:
            return _run_once(fn, world, args, timeout, env, threads, join, attempt)
        except _RendezvousFailed as e:
            failure = e
    raise RuntimeError(f"learners could not join their process group ({RENDEZVOUS_TRIES} tries):\n{failure}")


class _RendezvousFailed(RuntimeError):
    pass


def _run_once(fn, world, args, timeout, env, threads, join, attempt) -> List[Any]:
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="learners.") as tmp:
        init_file = os.path.join(tmp, "store")
        procs = [
            ctx.Process(
                target=_entry,
                args=(fn, r, world, init_file, tmp, tuple(args), dict(env or {}), threads, join, attempt),
                daemon=True,
            )
            for r in range(world)
        ]
        for p in procs:
            p.start()
        deadline, failed_at = time.time() + timeout, None
        while any(p.is_alive() for p in procs) and time.time() < deadline:
            if failed_at is None and any(p.exitcode not in (None, 0) for p in procs):
                failed_at = time.time()
            if failed_at is not None and time.time() > failed_at + FAILED_PEERS_GRACE_S:
                break
            time.sleep(0.05)
        bad = {r: p.exitcode for r, p in enumerate(procs) if p.exitcode not in (None, 0)}
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        cut_short = bool(hung) and time.time() < deadline  # a failure's peers, stopped before the timeout
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        errors = {r: Path(tmp, f"error.{r}.txt") for r in range(world) if Path(tmp, f"error.{r}.txt").is_file()}
        if errors:  # the first learner to fail is the cause; the others' errors follow from it (a peer gone)
            r = min(errors, key=lambda k: (errors[k].stat().st_mtime_ns, k))
            tb = errors[r].read_text()
            if not Path(tmp, f"joined.{r}").exists():  # it failed joining (its peers may have got through)
                raise _RendezvousFailed(f"learner {r} failed:\n{tb}")
            stopped = f" (the others were stopped {FAILED_PEERS_GRACE_S:.0f} s after it)" if cut_short else ""
            raise RuntimeError(f"learner {r} failed{stopped}:\n{tb}")
        if bad:
            raise RuntimeError(f"learners exited abnormally: {bad}")
        if hung:
            raise TimeoutError(f"learners {hung} still running after {timeout:.0f} s (deadlock?)")
        return [load_torch(Path(tmp, f"result.{r}.pt"), "learner result") for r in range(world)]


def identical_groups(algo) -> Optional[List[List[int]]]:
    """Groups of learners that must hold identical parameters right now (None: no claim at this step)."""
    n = algo.world_size
    name = algo.name
    if name in ("sync", "powersgd", "topk"):
        return [list(range(n))]
    if name == "diloco":  # after each outer step (warm-up: synchronous SGD); outer_topk: learners keep their rest
        warm = algo.steps_done <= algo.cfg.warmup_steps
        return [list(range(n))] if warm or (algo.since_sync == 0 and not algo.cfg.outer_topk) else None
    if name in ("ma", "bmuf") and algo.steps_done > algo.cfg.warmup_steps:
        if algo.since_sync == 0:
            return [list(range(n))]
        k = algo.info.local_world_size
        if name == "ma" and algo.hierarchical and k < n and algo.since_sync % algo.cfg.node_period == 0:
            return [list(range(s, s + k)) for s in range(0, n, k)]
        return None
    if name in ("ma", "bmuf"):  # warm-up: synchronous SGD
        return [list(range(n))]
    if name == "hadpsgd" and algo.node_size > 1:
        k = algo.node_size
        return [list(range(s, s + k)) for s in range(0, n, k)]
    return None


def _watch_identity(algo, record: Dict[str, float]) -> None:
    """Wrap ``algo.after_step``: after each step, check the learners that must be identical are (all_gather)."""
    inner_step, inner_epoch = algo.after_step, algo.end_epoch

    def after_step(model, optimizer, step):
        inner_step(model, optimizer, step)
        check(model, identical_groups(algo))

    def end_epoch(model, optimizer):
        inner_epoch(model, optimizer)
        every = algo.name in ("sync", "ma", "bmuf", "powersgd", "topk")
        check(model, [list(range(algo.world_size))] if every else None)

    def check(model, groups):
        if groups is None:
            return
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        allp = [torch.empty_like(flat) for _ in range(algo.world_size)]
        with algo.meter.category("bookkeeping"):  # a test's check, not the algorithm's traffic
            dist.all_gather(allp, flat)
        for g in groups:
            for r in g[1:]:
                record["max_diff"] = max(record["max_diff"], float((allp[r] - allp[g[0]]).abs().max()))
        record["checks"] += 1

    algo.after_step, algo.end_epoch = after_step, end_epoch


class StopAfter(Exception):
    """Raised by :func:`train_toy` after the checkpoint at step ``stop_after`` (simulates a crash)."""


def train_toy(
    rank: int,
    world: int,
    setup: str,
    config: str,
    overrides: Sequence[str],
    exp_dir: str,
    watch: bool = False,
    stop_after: int = 0,
    uneven: Optional[Sequence[int]] = None,
    device: Optional[torch.device] = None,
) -> Dict[str, Any]:
    """Train on a toy set-up with the algorithm of ``train.dist`` (each learner in its own process).

    ``uneven``: per-learner batch counts to use instead of the round-robin split (each learner gets that many
    batches from the epoch's list, then padding) — for the uneven-shard-end test. ``stop_after``: raise after the
    checkpoint at that step (the learners' state is as a crash would leave it). Returns final parameters,
    metrics, the algorithm's summary, the identity check record and ``fit_s`` (this learner's wall time in
    ``Trainer.fit``). ``setup`` may be any directory laid out like the toy one (``fbank/<set>``, ``data/<set>``,
    ``lang``), e.g. a subset of a recipe's data (asrlib.data.subset) with ``lang`` linked in. ``device``: where the
    model trains (default: ``train.device``).
    """
    from asrlib.config import load_config
    from asrlib.models.device import resolve_device
    from asrlib.models.lstm import build_model
    from asrlib.parallel import make_algo
    from asrlib.train.loader import CtcTargets, SamplerSettings, epoch_cut_batches, open_set
    from asrlib.train.trainer import Trainer

    cfg = load_config(config, list(overrides))
    cfg.train.loader.num_workers = 0  # a learner here is a daemonic process, which may not start loader workers
    torch.manual_seed(cfg.train.seed)
    root = Path(setup)
    cmvn = root / "fbank" / "train" / "cmvn.scp"

    targets = CtcTargets(root / "lang", cfg.model.stack)

    def ds(name: str):
        return open_set(root / "fbank" / name, targets, cmvn, loader=cfg.train.loader, data_dir=root / "data" / name)

    train_ds, dev_ds = ds("train"), ds("dev")
    model = build_model(train_ds.feature_dim(), len(targets.tokens), cfg.model)
    device = device if device is not None else resolve_device(cfg.train.device)
    algo = make_algo(cfg.train.dist, device)
    trainer = Trainer(cfg, model, train_ds, dev_ds, Path(exp_dir), algo=algo, device=device)
    if uneven is not None:

        def uneven_cuts(epoch, skip, counts=tuple(uneven)):
            every = list(epoch_cut_batches(train_ds, SamplerSettings.of(cfg.train), epoch, 0))  # one learner's
            start = sum(counts[: algo.rank])
            mine = every[start : start + counts[algo.rank]]
            return (mine + [None] * (max(counts) - len(mine)))[skip:]

        trainer.epoch_cuts = uneven_cuts
    record = {"max_diff": 0.0, "checks": 0}
    if watch:
        _watch_identity(algo, record)
    if stop_after:
        save = trainer.save

        def save_then_stop(name="latest.pt"):
            save(name)
            if trainer.step == stop_after and name == "latest.pt":
                dist.barrier()  # rank 0 has written the checkpoint before anyone goes on to resume from it
                raise StopAfter(stop_after)

        trainer.save = save_then_stop
    t0 = time.perf_counter()
    try:
        summary = trainer.fit()
    except StopAfter:
        return {"stopped_at": stop_after}
    return {
        "params": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
        "summary": summary,
        "metrics": trainer.metrics,
        "algo": algo.summary() if hasattr(algo, "summary") else None,
        "identity": record,
        "fit_s": time.perf_counter() - t0,
    }


def run_toy_scenarios(rank: int, world: int, scenarios: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Several :func:`train_toy` runs one after another in the same process group (saves process start-ups)."""
    return [train_toy(rank, world, **sc) for sc in scenarios]


# ------------------------------------------------------------------------------ faults of steps.train_dist jobs
STEP_RE = re.compile(r"\] step (\d+) epoch \d+ loss ")
START_RE = re.compile(r"INFO \[train\] model: ")  # steps.train logs it once per attempt, on every learner
RESUMED_RE = re.compile(r"resumed from \S+: epoch \d+, batch \d+, step (\d+)")
RESTART_RE = re.compile(r"torchrun restart (\d+) of")


def learner_pids(exp_dir: Union[str, Path], attempt: int = 0) -> Dict[int, int]:
    """``{rank: pid}`` of the live learners of torchrun attempt ``attempt`` (0 = the first start, k = its k-th
    restart) that train into ``exp_dir``, found in /proc (Linux): a ``steps.train`` process whose ``--exp-dir`` is
    ``exp_dir`` and whose environment holds RANK and TORCHELASTIC_RESTART_COUNT, and whose parent is not one (its
    DataLoader workers)."""
    want = Path(exp_dir).resolve()
    found: Dict[int, tuple] = {}  # pid -> (rank, parent pid)
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = [a.decode(errors="replace") for a in (d / "cmdline").read_bytes().split(b"\0")]
            exp = option_values(argv, ["--exp-dir"])["--exp-dir"]
            if "steps.train" not in argv or exp is None:
                continue
            if Path(os.readlink(d / "cwd"), exp).resolve() != want:
                continue
            env = dict(
                kv.split("=", 1)
                for kv in (d / "environ").read_bytes().decode(errors="replace").split("\0")
                if "=" in kv
            )
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):  # the process ended meanwhile, or is not ours
            continue
        if "RANK" in env and env.get("TORCHELASTIC_RESTART_COUNT") == str(attempt):
            found[int(d.name)] = (int(env["RANK"]), ppid)
    # a learner's DataLoader workers are forks of it (same command line and environment): not learners
    return {rank: pid for pid, (rank, ppid) in found.items() if ppid not in found}


def log_attempts(log_file: Union[str, Path]) -> List[Dict[str, Any]]:
    """One entry per attempt (start of steps.train) in a learner's log (``log/train.log`` or ``train.rank<R>.log``):
    ``steps`` logged, ``resumed`` (the checkpoint step it resumed from, else None), ``restart`` (torchrun's restart
    count when it logged one, else None)."""
    attempts: List[Dict[str, Any]] = []
    text = Path(log_file).read_text() if Path(log_file).is_file() else ""
    for line in text.splitlines():
        if START_RE.search(line):
            attempts.append({"steps": [], "resumed": None, "restart": None})
        elif attempts:
            for key, rx in (("steps", STEP_RE), ("resumed", RESUMED_RE), ("restart", RESTART_RE)):
                m = rx.search(line)
                if m and key == "steps":
                    attempts[-1]["steps"].append(int(m.group(1)))
                elif m:
                    attempts[-1][key] = int(m.group(1))
    return attempts


def wait_for_step(exp_dir: Union[str, Path], step: int, job, timeout: float = 120.0, poll: float = 0.02) -> None:
    """Wait until the job (a ``subprocess.Popen`` of steps.train_dist) has written a checkpoint and logged ``step``
    in rank 0's log (``train.log_every`` must divide ``step``); raise when it ends first or after ``timeout``."""
    exp = Path(exp_dir)
    deadline = time.time() + timeout
    while True:
        if (exp / "checkpoints" / "latest.pt").is_file():
            attempts = log_attempts(exp / "log" / "train.log")
            if attempts and step in attempts[-1]["steps"]:
                return
        if job.poll() is not None:
            raise RuntimeError(f"the job ended (exit {job.returncode}) before step {step} of {exp}")
        if time.time() > deadline:
            raise TimeoutError(f"{exp}: step {step} not reached in {timeout:.0f} s")
        time.sleep(poll)


def restart_report(exp_dir: Union[str, Path]) -> Dict[str, Any]:
    """What the learners' logs of a job that failed once (then restarted by torchrun, or rerun) say: ``attempts``,
    ``restarts`` (torchrun restarts rank 0 logged), ``steps_before_failure`` (the highest step any learner logged in
    the first attempt), ``resumed_step`` (the checkpoint step the second attempt resumed from; 0 when it started
    afresh), ``steps_lost`` (their difference: completed steps done again) and ``final_step``."""
    per_log = [log_attempts(f) for f in sorted(Path(exp_dir, "log").glob("train*.log"))]
    rank0 = log_attempts(Path(exp_dir, "log", "train.log"))
    before = max((max(a[0]["steps"], default=0) for a in per_log if a), default=0)
    resumed = (rank0[1]["resumed"] or 0) if len(rank0) > 1 else 0
    return {
        "attempts": len(rank0),
        "restarts": sum(1 for a in rank0 if a["restart"]),
        "steps_before_failure": before,
        "resumed_step": resumed,
        "steps_lost": before - resumed,
        "final_step": max(rank0[-1]["steps"], default=0) if rank0 else 0,
    }
