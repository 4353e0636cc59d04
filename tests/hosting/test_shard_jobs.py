"""Shard jobs in the database: leases, tries, one fingerprint per task (lapsing with its last lease), a lost shard re-run alone, the deadline.

Real databases (the ``world`` fixture: SQLite and PostgreSQL), no mocks: a submission is claimed
as today, its attempt's shard jobs are planned, and two workers take them.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from grader.errors import InternalError
from grader.failures import FailureCode
from grader.hosting.clock import utcnow
from grader.hosting.db.models import Replica, ShardJob, Submission
from grader.hosting.identity.workers import create_worker
from grader.hosting.queue import lifecycle, shard_jobs
from grader.hosting.services.replication import blamed_worker
from grader.hosting.states import SHARD_TRANSITIONS, ShardState, State, require_shard
from tests.hosting.world import World, new_submission

FP_A, FP_B = "a" * 64, "b" * 64


def _planned(world: World, shards: dict[str, int], deadline_s: float = 3600) -> str:
    submission_id = new_submission(world)
    taken = lifecycle.claim(world.db, world.workers[0], 60)
    assert taken is not None and taken.submission_id == submission_id
    with world.db.session() as session:
        shard_jobs.plan(session, submission_id, taken.attempt, shards, deadline_s)
    return submission_id


def _expire(world: World, job_id: int) -> None:
    with world.db.session() as session:
        session.execute(update(ShardJob).where(ShardJob.id == job_id).values(lease_expires_at=utcnow() - timedelta(seconds=1)))


def test_shards_wait_for_their_query_job_to_run_then_each_is_taken_once(world: World) -> None:
    submission_id = _planned(world, {"t": 2})
    w1, w2 = world.workers
    query = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert query is not None and query.number == -1 and query.submission_id == submission_id and query.tries == 1
    # The query job runs: the shards may start (they encode their documents meanwhile), each taken once.
    got = [shard_jobs.claim(world.db, (w2, w1)[i % 2], FP_A, 60) for i in range(3)]
    assert [c.number for c in got if c is not None] == [0, 1] and got[2] is None
    assert _states(world, submission_id)[-1] == ("running", 1, 0)  # shard work started before the query job ended
    assert shard_jobs.complete(world.db, query.job_id, 1, w1, "1" * 64)
    for index, held in enumerate(got[:2]):
        assert held is not None and shard_jobs.complete(world.db, held.job_id, 1, (w2, w1)[index % 2], f"{index + 2:064x}")
    status = shard_jobs.progress(world.db, submission_id, 1)["t"]
    assert status.complete and sorted(status.done) == [-1, 0, 1]


def test_a_shard_waiting_on_a_query_job_that_went_back_to_the_queue_is_released_uncharged(world: World) -> None:
    """No deadlock on a pool of one: a queued query job is never waited on, and a waiter whose query job lost its
    holder is released (its try uncharged), so the one worker left takes the query job, then the shard again."""
    submission_id = _planned(world, {"t": 1})
    w1, w2 = world.workers
    assert shard_jobs.claim(world.db, w2, FP_A, 60) is not None  # w2 takes the query job
    shard = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert shard is not None and shard.number == 0 and shard_jobs.mark_used(world.db, shard.job_id, 1, w1)
    assert not shard_jobs.release_waiting(world.db, shard.job_id, 1, w1)  # its query job runs: it waits
    query_id = _job_id(world, submission_id, -1)
    _expire(world, query_id)  # w2 vanished with the query job
    assert shard_jobs.reap(world.db, max_tries=3) == 1
    assert _states(world, submission_id) == {-1: ("queued", 1, 1), 0: ("running", 1, 0)}  # it lapsed unused: uncharged
    assert shard_jobs.release_waiting(world.db, shard.job_id, 1, w1)
    assert _states(world, submission_id) == {-1: ("queued", 1, 1), 0: ("queued", 1, 1)}  # back, uncharged
    again = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert again is not None and again.number == -1  # the only worker left takes the query job
    assert shard_jobs.claim(world.db, w1, FP_A, 60) is not None  # and may take the shard while it runs


def _job_id(world: World, submission_id: str, number: int) -> int:
    with world.db.session() as session:
        job = session.query(ShardJob).filter(ShardJob.submission_id == submission_id, ShardJob.number == number).one()
        return job.id


def test_a_task_runs_on_workers_of_one_fingerprint(world: World) -> None:
    _planned(world, {"t": 1, "u": 1})
    w1, w2 = world.workers
    first = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert first is not None and (first.task, first.number) == ("t", -1)
    other = shard_jobs.claim(world.db, w2, FP_B, 60)
    assert other is not None and (other.task, other.number) == ("u", -1)  # task t is FP_A's now; u was still free
    assert shard_jobs.complete(world.db, first.job_id, 1, w1, "1" * 64)
    assert shard_jobs.complete(world.db, other.job_id, 1, w2, "2" * 64)
    assert shard_jobs.claim(world.db, w1, FP_B, 60) is not None  # u's shard: FP_B, whichever worker
    assert shard_jobs.claim(world.db, w2, FP_B, 60) is None  # t's shard is FP_A's
    same = shard_jobs.claim(world.db, w2, FP_A, 60)
    assert same is not None and (same.task, same.number) == ("t", 0)


def test_a_lost_shard_is_re_run_alone(world: World) -> None:
    submission_id = _planned(world, {"t": 2})
    w1, w2 = world.workers
    query = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert query is not None and shard_jobs.complete(world.db, query.job_id, 1, w1, "1" * 64)
    shard0, shard1 = shard_jobs.claim(world.db, w1, FP_A, 60), shard_jobs.claim(world.db, w1, FP_A, 60)
    assert shard0 is not None and shard1 is not None
    assert shard_jobs.complete(world.db, shard0.job_id, 1, w1, "2" * 64)
    _expire(world, shard1.job_id)  # w1 died while ranking shard 1
    assert shard_jobs.renew(world.db, shard1.job_id, 1, w1, 60) is None
    assert shard_jobs.reap(world.db, max_tries=3) == 1
    again = shard_jobs.claim(world.db, w2, FP_A, 60)
    assert again is not None and (again.number, again.tries) == (1, 2)  # only the lost shard, its second try
    assert shard_jobs.claim(world.db, w2, FP_A, 60) is None
    assert not shard_jobs.complete(world.db, shard1.job_id, 1, w1, "9" * 64)  # the lost try's late answer is refused
    assert shard_jobs.complete(world.db, again.job_id, 2, w2, "3" * 64)
    status = shard_jobs.progress(world.db, submission_id, 1)["t"]
    assert status.complete and status.done == {-1: "1" * 64, 0: "2" * 64, 1: "3" * 64}


def test_failures_infra_requeues_a_participant_code_fails_the_task(world: World) -> None:
    submission_id = _planned(world, {"t": 1})
    w1 = world.workers[0]
    query = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert query is not None and shard_jobs.fail(world.db, query.job_id, 1, w1, FailureCode.INFRA, "disk full", max_tries=3)
    query = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert query is not None and (query.number, query.tries) == (-1, 2)
    assert shard_jobs.fail(world.db, query.job_id, 2, w1, FailureCode.MODEL_ERROR, "NaN in the output", max_tries=3)
    status = shard_jobs.progress(world.db, submission_id, 1)["t"]
    assert not status.complete and status.failure == ("MODEL_ERROR", "NaN in the output")


def test_the_try_limit_and_a_cancelled_submission(world: World) -> None:
    submission_id = _planned(world, {"t": 1})
    w1 = world.workers[0]
    for _ in range(2):
        held = shard_jobs.claim(world.db, w1, FP_A, 60)
        assert held is not None and held.number == -1
        assert shard_jobs.renew(world.db, held.job_id, held.tries, w1, 60) is not None  # used: a lapse of it is charged
        _expire(world, held.job_id)
        shard_jobs.reap(world.db, max_tries=2)
    status = shard_jobs.progress(world.db, submission_id, 1)["t"]
    assert status.failure is not None and status.failure[0] == "INFRA"
    assert lifecycle.cancel_submission(world.db, submission_id)
    assert shard_jobs.claim(world.db, w1, FP_A, 60) is None  # the shard of a cancelled attempt is never handed out


def test_the_pin_lapses_with_the_tasks_last_lease(world: World) -> None:
    submission_id = _planned(world, {"t": 1})
    w1, w2 = world.workers
    vanished = shard_jobs.claim(world.db, w1, FP_A, 60)  # a worker of a fingerprint no other has takes the task, then vanishes
    assert vanished is not None and vanished.number == -1
    assert shard_jobs.claim(world.db, w2, FP_B, 60) is None  # running: the task is FP_A's
    _expire(world, vanished.job_id)
    assert shard_jobs.reap(world.db, max_tries=3) == 1
    query = shard_jobs.claim(world.db, w2, FP_B, 60)  # no job of the task running or done: any fingerprint
    assert query is not None and (query.number, query.tries) == (-1, 2)
    assert shard_jobs.complete(world.db, query.job_id, 2, w2, "1" * 64)
    assert shard_jobs.claim(world.db, w1, FP_A, 60) is None  # done under FP_B: the task's shards are FP_B's
    shard = shard_jobs.claim(world.db, w2, FP_B, 60)
    assert shard is not None and shard.number == 0
    _expire(world, shard.job_id)
    assert shard_jobs.reap(world.db, max_tries=3) == 1
    assert shard_jobs.claim(world.db, w1, FP_A, 60) is None  # still pinned by the done query job: its vectors are FP_B's
    assert shard_jobs.progress(world.db, submission_id, 1)["t"].open == 1


def test_a_lease_nobody_uses_costs_no_try(world: World) -> None:
    submission_id = _planned(world, {"t": 1})
    w1 = world.workers[0]
    for tries in (1, 2, 3):  # three claims whose answer no worker used: each lapses, none charged
        held = shard_jobs.claim(world.db, w1, FP_A, 60)
        assert held is not None and held.tries == tries
        _expire(world, held.job_id)
        assert shard_jobs.reap(world.db, max_tries=2) == 1
    held = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert held is not None and held.tries == 4  # still queued: the limit counts used tries only
    assert shard_jobs.mark_used(world.db, held.job_id, 4, w1)
    assert shard_jobs.fail(world.db, held.job_id, 4, w1, FailureCode.INFRA, "disk full", max_tries=2)  # one charged try: re-queued
    held = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert held is not None and held.tries == 5 and shard_jobs.mark_used(world.db, held.job_id, 5, w1)
    _expire(world, held.job_id)
    shard_jobs.reap(world.db, max_tries=2)  # the second charged try: the task fails
    failure = shard_jobs.progress(world.db, submission_id, 1)["t"].failure
    assert failure is not None and failure[0] == "INFRA"
    assert not shard_jobs.mark_used(world.db, held.job_id, 5, w1)  # not held any more


def test_the_deadline_fails_the_open_jobs_infra(world: World) -> None:
    submission_id = _planned(world, {"t": 1, "u": 1})
    w1, w2 = world.workers
    query_t = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert query_t is not None and shard_jobs.complete(world.db, query_t.job_id, 1, w1, "1" * 64)
    running = shard_jobs.claim(world.db, w2, FP_A, 60)
    assert running is not None and (running.task, running.number) == ("t", 0)
    assert shard_jobs.expire(world.db) == 0  # before the deadline nothing moves
    with world.db.session() as session:
        session.execute(update(ShardJob).values(deadline_at=utcnow() - timedelta(seconds=1)))
    assert shard_jobs.claim(world.db, w1, FP_A, 60) is None  # u's query job is past its deadline: not handed out
    assert shard_jobs.expire(world.db, submission_id, 1) == 3  # u's queued query job and shard, t's running shard
    progress = shard_jobs.progress(world.db, submission_id, 1)
    assert all(entry.failure is not None and entry.failure[0] == "INFRA" and entry.open == 0 for entry in progress.values())
    assert shard_jobs.renew(world.db, running.job_id, 1, w2, 60) is None  # its holder stops it
    assert not shard_jobs.complete(world.db, running.job_id, 1, w2, "2" * 64)


def test_a_cancel_stops_the_shard_jobs_at_their_next_heartbeat(world: World) -> None:
    submission_id = _planned(world, {"t": 1})
    w1 = world.workers[0]
    held = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert held is not None and shard_jobs.renew(world.db, held.job_id, 1, w1, 60) is not None
    assert lifecycle.cancel_submission(world.db, submission_id)
    assert shard_jobs.renew(world.db, held.job_id, 1, w1, 60) is None  # stale: the worker kills the job's process


def test_shard_moves_outside_the_table_are_refused(world: World) -> None:
    _planned(world, {"t": 1})
    for source in ShardState:
        for target in ShardState:
            if target in SHARD_TRANSITIONS[source]:
                require_shard(source, target)
            else:
                with pytest.raises(InternalError, match="not a transition of the shard table"):
                    require_shard(source, target)
    with world.db.session() as session, pytest.raises(InternalError):
        shard_jobs.move_shard(session, ShardJob.number == -1, ShardState.DONE, ShardState.RUNNING)  # a done job runs again only queued
    with world.db.session() as session:
        assert (
            shard_jobs.move_shard(session, ShardJob.number == -1, ShardState.RUNNING, ShardState.DONE) == 0
        )  # it is queued: a stale read moves nothing


def test_a_failed_shard_skips_the_rest_of_its_task_and_only_its_task(world: World) -> None:
    submission_id = _planned(world, {"t": 3, "u": 1})
    w1, w2 = world.workers
    query = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert query is not None and (query.task, query.number) == ("t", -1)
    assert shard_jobs.complete(world.db, query.job_id, 1, w1, "1" * 64)
    running = shard_jobs.claim(world.db, w2, FP_A, 60)
    failing = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert running is not None and failing is not None and (running.task, running.number, failing.number) == ("t", 0, 1)
    assert shard_jobs.fail(world.db, failing.job_id, 1, w1, FailureCode.TIMEOUT, "killed after the 60 s time limit", max_tries=3)
    # Shard 2 of t is never handed out; u's jobs still are.
    other = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert other is not None and (other.task, other.number) == ("u", -1)
    assert shard_jobs.complete(world.db, other.job_id, 1, w1, "2" * 64)
    other = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert other is not None and (other.task, other.number) == ("u", 0)
    assert shard_jobs.claim(world.db, w1, FP_A, 60) is None
    # The running shard of t stops at its next renewal, and the reaper ends it as skipped, never re-queued.
    assert shard_jobs.renew(world.db, running.job_id, 1, w2, 60) is None
    _expire(world, running.job_id)
    assert shard_jobs.reap(world.db, max_tries=5) == 1
    assert shard_jobs.claim(world.db, w2, FP_A, 60) is None
    with world.db.session() as session:
        states = {(job.task, job.number): job.state for job in session.query(ShardJob).filter(ShardJob.submission_id == submission_id)}
    assert states == {("t", -1): "done", ("t", 0): "skipped", ("t", 1): "failed", ("t", 2): "skipped", ("u", -1): "done", ("u", 0): "running"}
    progress = shard_jobs.progress(world.db, submission_id, 1)
    assert progress["t"].failure == ("TIMEOUT", "killed after the 60 s time limit") and progress["t"].open == 0
    assert progress["u"].open == 1 and progress["u"].failure is None


def test_an_infra_failure_at_the_try_limit_fails_the_task_instead_of_looping(world: World) -> None:
    submission_id = _planned(world, {"t": 1})
    w1 = world.workers[0]
    for tries in (1, 2):
        held = shard_jobs.claim(world.db, w1, FP_A, 60)
        assert held is not None and (held.number, held.tries) == (-1, tries)
        assert shard_jobs.fail(world.db, held.job_id, tries, w1, FailureCode.INFRA, "this worker's data does not match the pin", max_tries=2)
    assert shard_jobs.claim(world.db, w1, FP_A, 60) is None  # not a third try
    status = shard_jobs.progress(world.db, submission_id, 1)["t"]
    assert status.failure == ("INFRA", "this worker's data does not match the pin") and status.open == 0


def test_a_stored_code_no_failure_code_names_reads_as_infra(world: World) -> None:
    """A row an older grader or a damaged disk left (the route refuses such a code): the task's failure is the platform's."""
    submission_id = _planned(world, {"t": 1})
    held = shard_jobs.claim(world.db, world.workers[0], FP_A, 60)
    assert held is not None
    with world.db.session() as session:
        session.execute(update(ShardJob).where(ShardJob.id == held.job_id).values(state="failed", failure_code="BOGUS", message="old"))
        session.execute(update(ShardJob).where(ShardJob.submission_id == submission_id, ShardJob.state == "queued").values(state="skipped"))
    status = shard_jobs.progress(world.db, submission_id, 1)["t"]
    assert status.failure == ("INFRA", "old") and status.open == 0


def test_the_coordinator_reads_a_code_or_an_entry_it_does_not_know_as_infra() -> None:
    from grader.hosting.protocol.shard_messages import ShardGradeStatus
    from grader.hosting.worker.shard_loop import task_failures

    status = ShardGradeStatus(state="done", failures={"a": ["BOGUS", "m"], "b": [], "c": ["TIMEOUT", "late"], "d": ["OOM"]})
    assert task_failures(status) == {
        "a": (FailureCode.INFRA, "m"),
        "b": (FailureCode.INFRA, ""),
        "c": (FailureCode.TIMEOUT, "late"),
        "d": (FailureCode.OOM, ""),
    }


def test_any_claimable_says_when_a_shard_job_is_free_for_a_fingerprint(world: World) -> None:
    _planned(world, {"t": 1})
    w1 = world.workers[0]
    assert shard_jobs.any_claimable(world.db, w1, FP_A) and shard_jobs.any_claimable(world.db, w1, FP_B)  # the query job, any fingerprint
    query = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert query is not None and shard_jobs.any_claimable(world.db, w1, FP_A)  # the shard, while its query job runs
    assert not shard_jobs.any_claimable(world.db, w1, FP_B)  # the task is FP_A's now
    assert shard_jobs.complete(world.db, query.job_id, 1, w1, "1" * 64)
    assert shard_jobs.any_claimable(world.db, w1, FP_A) and not shard_jobs.any_claimable(world.db, w1, FP_B)


def test_the_worker_and_the_server_digest_a_fingerprint_alike() -> None:
    from grader.hosting.services.replication import fingerprint_digest as server_digest
    from grader.hosting.worker.fingerprint import worker_fingerprint
    from grader.hosting.worker.shard_loop import fingerprint_digest as worker_digest

    assert worker_digest() == server_digest(worker_fingerprint())


def _states(world: World, submission_id: str) -> dict[int, tuple[str, int, int]]:
    """Per job number of task t: (state, tries, uncharged tries)."""
    with world.db.session() as session:
        rows = session.query(ShardJob).filter(ShardJob.submission_id == submission_id, ShardJob.task == "t")
        return {job.number: (job.state, job.tries, job.unused) for job in rows}


def test_suspect_query_vectors_re_run_the_query_job_and_every_shard_that_used_them(world: World) -> None:
    submission_id = _planned(world, {"t": 3, "u": 1})
    w1, w2 = world.workers
    liar = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert liar is not None and (liar.task, liar.number) == ("t", -1)
    assert shard_jobs.complete(world.db, liar.job_id, 1, w1, "1" * 64)
    done, running, reporter = (shard_jobs.claim(world.db, w2, FP_A, 60) for _ in range(3))
    assert done is not None and running is not None and reporter is not None
    assert (done.number, running.number, reporter.number) == (0, 1, 2)
    assert shard_jobs.complete(world.db, done.job_id, 1, w2, "2" * 64)
    assert shard_jobs.requeue_suspect(world.db, reporter.job_id, 1, w2, "1" * 64, "they do not fit", max_tries=3)
    # The query job runs again (its try stays charged); every shard goes back with it, uncharged; u is untouched.
    assert _states(world, submission_id) == {-1: ("queued", 1, 0), 0: ("queued", 1, 1), 1: ("queued", 1, 1), 2: ("queued", 1, 1)}
    assert shard_jobs.renew(world.db, running.job_id, 1, w2, 60) is None  # the running shard's holder stops it
    assert not shard_jobs.complete(world.db, running.job_id, 1, w2, "3" * 64)
    progress = shard_jobs.progress(world.db, submission_id, 1)
    assert progress["t"].failure is None and progress["t"].done == {} and progress["t"].open == 4
    again = shard_jobs.claim(world.db, w2, FP_B, 60)  # nothing of t runs or is done: any fingerprint; the shards wait for it
    assert again is not None and (again.task, again.number, again.tries) == ("t", -1, 2)
    assert shard_jobs.complete(world.db, again.job_id, 2, w2, "4" * 64)
    shard = shard_jobs.claim(world.db, w2, FP_B, 60)
    assert shard is not None and (shard.number, shard.tries) == (0, 2)
    # A second report of the old vectors (already re-run) is an ordinary INFRA failure: charged, and nothing else moves.
    assert shard_jobs.requeue_suspect(world.db, shard.job_id, 2, w2, "1" * 64, "late", max_tries=3)
    assert _states(world, submission_id)[-1] == ("done", 2, 0) and _states(world, submission_id)[0] == ("queued", 2, 1)


def test_a_query_job_cannot_suspect_its_own_vectors(world: World) -> None:
    submission_id = _planned(world, {"t": 1})
    w1 = world.workers[0]
    query = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert query is not None and shard_jobs.requeue_suspect(world.db, query.job_id, 1, w1, "1" * 64, "mine", max_tries=3)
    assert _states(world, submission_id)[-1] == ("queued", 1, 0)  # an ordinary INFRA failure: re-queued, charged
    assert not shard_jobs.requeue_suspect(world.db, query.job_id, 1, w1, "1" * 64, "stale", max_tries=3)  # no longer held


def test_suspect_query_vectors_at_the_query_jobs_try_limit_fail_the_task_infra(world: World) -> None:
    submission_id = _planned(world, {"t": 2})
    w1, w2 = world.workers
    for tries in (1, 2):  # a liar does the query job each time; an honest shard worker suspects its vectors each time
        query = shard_jobs.claim(world.db, w1, FP_A, 60)
        assert query is not None and (query.number, query.tries) == (-1, tries)
        assert shard_jobs.complete(world.db, query.job_id, tries, w1, f"{tries:064x}")
        shard = shard_jobs.claim(world.db, w2, FP_A, 60)
        assert shard is not None and shard.number == 0
        assert shard_jobs.requeue_suspect(world.db, shard.job_id, shard.tries, w2, f"{tries:064x}", "suspect", max_tries=2)
    assert shard_jobs.claim(world.db, w1, FP_A, 60) is None  # no third try of the query job: the task has failed
    progress = shard_jobs.progress(world.db, submission_id, 1)["t"]
    assert progress.failure is not None and progress.failure[0] == "INFRA" and "2 tries" in progress.failure[1]
    assert progress.open == 0
    assert _states(world, submission_id) == {-1: ("done", 2, 0), 0: ("failed", 2, 1), 1: ("skipped", 0, 0)}


def _more_workers(world: World, *names: str) -> list[int]:
    with world.db.session() as session:
        return [create_worker(session, name)[0].id for name in names]


def _replica_of(world: World, submission_id: str, attempt: int, coordinator: int) -> None:
    """Record attempt ``attempt`` as a replica coordinated by ``coordinator`` (as the vote does), and end its lease."""
    with world.db.session() as session:
        submission = session.get(Submission, submission_id)
        assert submission is not None
        session.add(
            Replica(
                submission_id=submission_id,
                attempt=attempt,
                pin_id=submission.pin_id,
                worker_id=coordinator,
                fingerprint=FP_A,
                outcome="o",
                detail={},
                created_at=utcnow(),
            )
        )
        session.execute(update(Submission).where(Submission.id == submission_id).values(state=State.QUEUED, lease_worker_id=None))


def test_a_replicas_jobs_go_to_at_most_its_workers_and_never_to_another_replicas(world: World) -> None:
    coordinator, helper = world.workers
    other, late = _more_workers(world, "w3", "w4")
    submission_id = _planned(world, {"t": 1})  # attempt 1, coordinated by the first worker
    query = shard_jobs.claim(world.db, helper, FP_A, 60, replica_workers=2)
    assert query is not None and shard_jobs.complete(world.db, query.job_id, 1, helper, "1" * 64)
    # The replica has its two workers (coordinator and helper): a third takes nothing of it; its coordinator does.
    assert not shard_jobs.any_claimable(world.db, other, FP_A, 2) and shard_jobs.claim(world.db, other, FP_A, 60, replica_workers=2) is None
    assert shard_jobs.any_claimable(world.db, coordinator, FP_A, 2)
    shard = shard_jobs.claim(world.db, coordinator, FP_A, 60, replica_workers=2)
    assert shard is not None and shard_jobs.complete(world.db, shard.job_id, 1, coordinator, "2" * 64)
    _replica_of(world, submission_id, 1, coordinator)
    # Replica 2, coordinated by ``other``: neither worker of replica 1 computes any of it, whatever the cap.
    taken = lifecycle.claim(world.db, other, 60)
    assert taken is not None and taken.attempt == 2
    with world.db.session() as session:
        shard_jobs.plan(session, submission_id, 2, {"t": 1}, 3600)
    for contributor in (coordinator, helper):
        assert not shard_jobs.any_claimable(world.db, contributor, FP_A, 5)
        assert shard_jobs.claim(world.db, contributor, FP_A, 60, replica_workers=5) is None
    fresh = shard_jobs.claim(world.db, late, FP_A, 60, replica_workers=5)
    assert fresh is not None and (fresh.attempt, fresh.number) == (2, -1)
    # Without replicas (no cap), any worker may take any job.
    assert shard_jobs.complete(world.db, fresh.job_id, 1, late, "3" * 64)
    assert shard_jobs.any_claimable(world.db, helper, FP_A)


def test_the_blame_of_a_dissent_goes_to_the_first_job_whose_output_differs_while_its_inputs_agree() -> None:
    def replica(worker: int, jobs: dict[str, dict[str, tuple[str, int]]]) -> Replica:
        detail = {"jobs": {task: {n: {"output": out, "worker": who} for n, (out, who) in numbers.items()} for task, numbers in jobs.items()}}
        return Replica(worker_id=worker, detail=detail)

    agreed = replica(1, {"a": {"-1": ("q", 1), "0": ("s0", 1), "1": ("s1", 2)}, "b": {"-1": ("q", 2), "0": ("s0", 2)}})
    # Another task's differing shard comes later than this one's differing query vectors (tasks in order, the query job first).
    poisoned_queries = replica(7, {"a": {"-1": ("Q", 8), "0": ("S0", 7), "1": ("S1", 9)}, "b": {"-1": ("q", 7), "0": ("S", 9)}})
    assert blamed_worker(poisoned_queries, agreed) == 8
    poisoned_shard = replica(7, {"a": {"-1": ("q", 7), "0": ("s0", 7), "1": ("S1", 9)}, "b": {"-1": ("q", 7), "0": ("s0", 7)}})
    assert blamed_worker(poisoned_shard, agreed) == 9
    # Every job agrees: the coordinator stated something else (a failure, facts); an unsharded replica is its coordinator's.
    assert blamed_worker(replica(7, {"a": {"-1": ("q", 8), "0": ("s0", 8), "1": ("s1", 8)}}), agreed) == 7
    assert blamed_worker(replica(7, {}), agreed) == 7
