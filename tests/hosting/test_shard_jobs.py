"""Shard jobs in the database (issue 23 item 1): leases, tries, one fingerprint per task, a lost shard re-run alone.

Real databases (the ``world`` fixture: SQLite and PostgreSQL), no mocks: a submission is claimed
as today, its attempt's shard jobs are planned, and two workers take them.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from grader.hosting.clock import utcnow
from grader.hosting.db.models import ShardJob
from grader.hosting.services import lifecycle, shard_jobs
from tests.hosting.world import World, new_submission

FP_A, FP_B = "a" * 64, "b" * 64


def _planned(world: World, shards: dict[str, int]) -> str:
    submission_id = new_submission(world)
    taken = lifecycle.claim(world.db, world.workers[0], 60)
    assert taken is not None and taken.submission_id == submission_id
    with world.db.session() as session:
        shard_jobs.plan(session, submission_id, taken.attempt, shards)
    return submission_id


def _expire(world: World, job_id: int) -> None:
    with world.db.session() as session:
        session.execute(update(ShardJob).where(ShardJob.id == job_id).values(lease_expires_at=utcnow() - timedelta(seconds=1)))


def test_query_job_first_then_shards_each_once(world: World) -> None:
    submission_id = _planned(world, {"t": 2})
    got = [shard_jobs.claim(world.db, world.workers[i % 2], FP_A, 60) for i in range(4)]
    assert [c.number for c in got if c is not None] == [-1, 0, 1]
    assert got[3] is None  # every job taken once
    for c in got[:3]:
        assert c is not None and c.submission_id == submission_id and c.tries == 1
        assert shard_jobs.complete(world.db, c.job_id, c.tries, world.workers[got.index(c) % 2], f"{c.number + 2:064x}")
    status = shard_jobs.progress(world.db, submission_id, 1)["t"]
    assert status.complete and sorted(status.done) == [-1, 0, 1]


def test_a_task_runs_on_workers_of_one_fingerprint(world: World) -> None:
    _planned(world, {"t": 1, "u": 1})
    first = shard_jobs.claim(world.db, world.workers[0], FP_A, 60)
    assert first is not None and first.task == "t"
    other = shard_jobs.claim(world.db, world.workers[1], FP_B, 60)
    assert other is not None and other.task == "u"  # task t is FP_A's now; u is still free
    same = shard_jobs.claim(world.db, world.workers[1], FP_A, 60)
    assert same is not None and (same.task, same.number) == ("t", 0)
    assert shard_jobs.claim(world.db, world.workers[0], FP_A, 60) is None  # u's shard is FP_B's


def test_a_lost_shard_is_re_run_alone(world: World) -> None:
    submission_id = _planned(world, {"t": 2})
    w1, w2 = world.workers
    held = [shard_jobs.claim(world.db, w1, FP_A, 60) for _ in range(3)]
    assert all(h is not None for h in held)
    query, shard0, shard1 = held  # type: ignore[misc]
    assert shard_jobs.complete(world.db, query.job_id, 1, w1, "1" * 64)
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
    assert query is not None and shard_jobs.fail(world.db, query.job_id, 1, w1, "INFRA", "disk full")
    query = shard_jobs.claim(world.db, w1, FP_A, 60)
    assert query is not None and (query.number, query.tries) == (-1, 2)
    assert shard_jobs.fail(world.db, query.job_id, 2, w1, "MODEL_ERROR", "NaN in the output")
    status = shard_jobs.progress(world.db, submission_id, 1)["t"]
    assert not status.complete and status.failure == ("MODEL_ERROR", "NaN in the output")


def test_the_try_limit_and_a_cancelled_submission(world: World) -> None:
    submission_id = _planned(world, {"t": 1})
    w1 = world.workers[0]
    for _ in range(2):
        held = shard_jobs.claim(world.db, w1, FP_A, 60)
        assert held is not None and held.number == -1
        _expire(world, held.job_id)
        shard_jobs.reap(world.db, max_tries=2)
    status = shard_jobs.progress(world.db, submission_id, 1)["t"]
    assert status.failure is not None and status.failure[0] == "INFRA"
    assert lifecycle.cancel(world.db, submission_id)
    assert shard_jobs.claim(world.db, w1, FP_A, 60) is None  # the shard of a cancelled attempt is never handed out
