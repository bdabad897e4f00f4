"""The local learners' harness (asrlib/parallel/harness.py), which the distributed tests stand on: a learner that
fails stops the run at once with its traceback (its peers, stuck in a collective, are killed), and a run whose first
failure was a learner's rendezvous is started again."""

from __future__ import annotations

import pytest

from asrlib.parallel.harness import FAILED_PEERS_GRACE_S, join_gloo, run_learners


def _rank0_fails(rank, world):
    import torch.distributed as dist

    if rank == 0:
        raise ValueError("rank 0 gives up")
    dist.barrier()  # waits for rank 0 for ever
    return rank


def _rank0_fails_rank1_hangs(rank, world):
    import time

    if rank == 0:
        raise ValueError("rank 0 gives up")
    time.sleep(600)  # stuck where no collective notices the failure (Gloo's barrier may end with an error itself)
    return rank


def test_a_failed_learner_stops_the_run_without_waiting_for_the_timeout():
    # the stuck peer is stopped FAILED_PEERS_GRACE_S after the failure, not at the timeout: the error says so (at the
    # timeout it would not), and the peer's sleep outlasts the timeout, so nothing else can end the run
    with pytest.raises(
        RuntimeError, match=f"learner 0 failed \\(the others were stopped {FAILED_PEERS_GRACE_S:.0f} s after it\\)"
    ):
        run_learners(_rank0_fails_rank1_hangs, 2, timeout=120)


def _flaky_join(rank, world, init_file, attempt):
    if rank == 0 and attempt == 0:  # as Gloo's "connectFullMesh failed ... Connection closed by peer"
        raise RuntimeError("stand-in: connectFullMesh failed")
    join_gloo(rank, world, init_file, attempt)


def _rank(rank, world):
    return rank


def test_a_failed_rendezvous_is_tried_again():
    assert run_learners(_rank, 2, timeout=300, join=_flaky_join) == [0, 1]


def _one_sided_join(rank, world, init_file, attempt):
    if attempt == 0:  # Gloo's mesh can fail on one side while the peer's init_process_group returns
        if rank == 0:
            raise RuntimeError("stand-in: connectFullMesh failed, connection closed by peer")
        return  # rank 1 "got through": it runs fn, then fails in the barrier, after rank 0
    join_gloo(rank, world, init_file, attempt)


def _rank_after_a_while(rank, world):
    import time

    time.sleep(2.0)
    return rank


def test_a_rendezvous_failed_on_one_side_only_is_tried_again():
    assert run_learners(_rank_after_a_while, 2, timeout=300, join=_one_sided_join) == [0, 1]


def _joins_then_fails(rank, world, init_file, attempt):
    join_gloo(rank, world, init_file, attempt)
    if attempt > 0:
        raise AssertionError("started again after a learner had joined")


def test_a_learner_failing_after_the_rendezvous_is_not_started_again():
    with pytest.raises(RuntimeError, match="rank 0 gives up"):
        run_learners(_rank0_fails, 2, timeout=300, join=_joins_then_fails)


def _rank1_fails_then_rank0(rank, world):
    import time

    if rank == 1:
        raise ValueError("rank 1 gives up first")
    time.sleep(1.0)
    raise ConnectionError("rank 0: peer gone")  # what a peer of a failed learner sees, later


def test_the_first_learner_to_fail_is_reported_not_the_lowest_rank():
    with pytest.raises(RuntimeError, match="learner 1 failed") as e:
        run_learners(_rank1_fails_then_rank0, 2, timeout=120)
    assert "rank 1 gives up first" in str(e.value) and "peer gone" not in str(e.value)
