"""Platform failures are retried with backoff, bounded in total time: shard jobs and attempts, on SQLite and PostgreSQL.

A platform failure (``INFRA``) a worker reports, of a shard job or of a whole attempt, no longer goes back to the
queue for an immediate claim: the row waits out a backoff (``retry_at``: ``[queue] infra_backoff_s`` doubling per
failure), and its platform failures are retried beyond the try limit (``max_attempts``) for ``[queue] infra_retry_s``
from the first (``infra_since``); then the job fails its task ``INFRA``, the submission ends ``error``. A lost lease
(the worker is gone, another may take the job) is re-queued at once, and not failed while that retry clock runs.
Real databases (the ``world`` fixture); the clock is moved by writing the rows' times back.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import update

from grader.failures import FailureCode
from grader.hosting.clock import utcnow
from grader.hosting.config import QueueTiming
from grader.hosting.db.models import ShardJob, Submission
from grader.hosting.queue import lifecycle, shard_jobs
from grader.hosting.states import State
from tests.hosting.world import World, expire_lease, new_submission, state_of

FP = "a" * 64
RETRY = QueueTiming(infra_backoff_s=5, infra_retry_s=600)


def _close(moment: datetime | None, seconds: float) -> bool:
    """Whether ``moment`` is ``seconds`` from now, give or take the test's own time."""
    return moment is not None and abs((moment - utcnow()).total_seconds() - seconds) < 3


def _job(world: World, job_id: int) -> ShardJob:
    with world.db.session() as session:
        job = session.get(ShardJob, job_id)
        assert job is not None
        session.expunge(job)
        return job


def _move_job_clock(world: World, job_id: int, **values: object) -> None:
    with world.db.session() as session:
        session.execute(update(ShardJob).where(ShardJob.id == job_id).values(**values))


def _planned_query_job(world: World) -> str:
    submission_id = new_submission(world)
    taken = lifecycle.claim(world.db, world.workers[0], 60)
    assert taken is not None
    with world.db.session() as session:
        shard_jobs.plan(session, submission_id, taken.attempt, {"t": 1}, 3600)
    return submission_id


def test_a_shard_jobs_platform_failure_waits_its_backoff_and_is_retried_for_its_time_beyond_its_tries(world: World) -> None:
    submission_id = _planned_query_job(world)
    w1 = world.workers[0]
    held = shard_jobs.claim(world.db, w1, FP, 60)
    assert held is not None and shard_jobs.fail(world.db, held.job_id, 1, w1, FailureCode.INFRA, "engine gone", max_tries=2, retry=RETRY)
    first = _job(world, held.job_id)
    assert first.state == "queued" and _close(first.retry_at, 5) and _close(first.infra_since, 0)
    assert shard_jobs.claim(world.db, w1, FP, 60) is None  # waiting out its backoff, not claimed back to back
    _move_job_clock(world, held.job_id, retry_at=utcnow())
    again = shard_jobs.claim(world.db, w1, FP, 60)
    assert again is not None and again.tries == 2
    # The try limit (2) is reached, but the platform failures began moments ago: re-queued, the backoff doubled.
    assert shard_jobs.fail(world.db, again.job_id, 2, w1, FailureCode.INFRA, "engine gone", max_tries=2, retry=RETRY)
    second = _job(world, held.job_id)
    assert second.state == "queued" and _close(second.retry_at, 10) and second.infra_since == first.infra_since
    # A lost lease while that clock runs is re-queued at once (its worker is gone), not failed at the try limit.
    _move_job_clock(world, held.job_id, retry_at=None)
    lost = shard_jobs.claim(world.db, w1, FP, 60)
    assert lost is not None and shard_jobs.mark_used(world.db, lost.job_id, 3, w1)
    _move_job_clock(world, held.job_id, lease_expires_at=utcnow() - timedelta(seconds=1))
    assert shard_jobs.reap(world.db, max_tries=2, retry=RETRY) == 1
    assert (_job(world, held.job_id).state, _job(world, held.job_id).retry_at) == ("queued", None)
    # Once the platform failures have lasted past infra_retry_s, the next one fails the task INFRA, as the try limit did.
    _move_job_clock(world, held.job_id, infra_since=utcnow() - timedelta(seconds=601))
    last = shard_jobs.claim(world.db, w1, FP, 60)
    assert last is not None and shard_jobs.fail(world.db, last.job_id, 4, w1, FailureCode.INFRA, "engine gone", max_tries=2, retry=RETRY)
    failure = shard_jobs.progress(world.db, submission_id, 1)["t"].failure
    assert failure is not None and failure[0] == "INFRA" and "platform failures retried for 60" in failure[1], failure


def test_without_a_retry_budget_the_try_limit_alone_bounds_a_shard_job(world: World) -> None:
    submission_id = _planned_query_job(world)
    w1 = world.workers[0]
    for tries in (1, 2):
        held = shard_jobs.claim(world.db, w1, FP, 60)
        assert held is not None and held.tries == tries  # no backoff: claimable at once
        assert shard_jobs.fail(world.db, held.job_id, tries, w1, FailureCode.INFRA, "disk full", max_tries=2)
    failure = shard_jobs.progress(world.db, submission_id, 1)["t"].failure
    assert failure == ("INFRA", "disk full")


def _fail_attempt(world: World, submission_id: str, retry: QueueTiming | None, *, reported: bool = True) -> State | None:
    with world.db.session() as session:
        submission = session.get(Submission, submission_id)
        assert submission is not None
        return lifecycle.retry_or_error(session, submission, actor="worker:1", reason="engine gone", retry=retry, reported=reported)


def _due_now(world: World, submission_id: str) -> None:
    with world.db.session() as session:
        session.execute(update(Submission).where(Submission.id == submission_id).values(retry_at=utcnow()))


def test_an_attempts_platform_failure_waits_its_backoff_and_is_retried_for_its_time_beyond_the_attempt_limit(world: World) -> None:
    submission_id = new_submission(world)  # max_attempts 2 in this world
    w1 = world.workers[0]
    assert lifecycle.claim(world.db, w1, 60) is not None
    assert _fail_attempt(world, submission_id, RETRY) is State.QUEUED
    first = state_of(world, submission_id)
    assert _close(first.retry_at, 5) and _close(first.infra_since, 0)
    assert lifecycle.claim(world.db, w1, 60) is None  # waiting out its backoff
    _due_now(world, submission_id)
    assert lifecycle.claim(world.db, w1, 60) is not None
    # The attempt limit (2) is reached, within the retry time: queued again, the backoff doubled (the second failure).
    assert _fail_attempt(world, submission_id, RETRY) is State.QUEUED
    second = state_of(world, submission_id)
    assert (second.attempt, second.infra_since) == (2, first.infra_since) and _close(second.retry_at, 10)
    # A lost lease within that time: re-queued at once, its worker gone.
    _due_now(world, submission_id)
    assert lifecycle.claim(world.db, w1, 60) is not None
    expire_lease(world, submission_id)
    report = lifecycle.reap(world.db, world.dispatcher, redispatch_s=30, retry=RETRY)
    assert report.requeued == [submission_id] and state_of(world, submission_id).retry_at is None
    # Past infra_retry_s from the first platform failure: the next ends the grade error, uncharged (INFRA).
    with world.db.session() as session:
        session.execute(update(Submission).where(Submission.id == submission_id).values(infra_since=utcnow() - timedelta(seconds=601)))
    assert lifecycle.claim(world.db, w1, 60) is not None
    assert _fail_attempt(world, submission_id, RETRY) is State.ERROR
    ended = state_of(world, submission_id)
    assert (ended.state, ended.failure_code, ended.attempt) == (State.ERROR, "INFRA", 4)


@pytest.mark.parametrize("retry", [None, QueueTiming(infra_retry_s=0)])
def test_without_retry_time_the_attempt_limit_alone_bounds_a_grade(world: World, retry: QueueTiming | None) -> None:
    submission_id = new_submission(world)
    for _ in range(2):
        _due_now(world, submission_id)
        assert lifecycle.claim(world.db, world.workers[0], 60) is not None
        outcome = _fail_attempt(world, submission_id, retry)
    assert outcome is State.ERROR and state_of(world, submission_id).attempt == 2
