"""The submission lifecycle on the database: claims, leases, results, the reaper, rejudges (SQLite and PostgreSQL, no mocks)."""

from __future__ import annotations

import threading
from datetime import timedelta

from sqlalchemy import func, select, update

from grader.hosting.clock import utcnow
from grader.hosting.db.models import Result, Submission, Transition
from grader.hosting.queue import lifecycle
from tests.hosting.posting import accept_posted
from tests.hosting.world import World, expire_lease, new_submission, state_of


def test_one_claim_wins_under_concurrency(world: World) -> None:
    submission_id = new_submission(world)
    claims: list[lifecycle.Claim | None] = []
    barrier = threading.Barrier(6)

    def grab(worker_id: int) -> None:
        barrier.wait()
        claims.append(lifecycle.claim(world.db, worker_id, 30))

    threads = [threading.Thread(target=grab, args=(world.workers[i % 2],)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    won = [c for c in claims if c is not None]
    assert len(won) == 1 and won[0].submission_id == submission_id and won[0].attempt == 1
    assert state_of(world, submission_id).state == "running"


def test_audit_trail_and_participant_failure(world: World) -> None:
    submission_id = new_submission(world)
    claim = lifecycle.claim(world.db, world.workers[0], 30)
    assert claim is not None
    assert lifecycle.heartbeat(world.db, submission_id, 1, world.workers[0], 30) is not None
    assert lifecycle.heartbeat(world.db, submission_id, 1, world.workers[1], 30) is None  # not this worker's lease
    verdict = accept_posted(
        world.db,
        world.state,
        world.key,
        submission_id=submission_id,
        attempt=1,
        worker_id=world.workers[0],
        payload={"failure_code": "OOM", "message": "killed"},
    )
    assert (verdict.status, verdict.state) == ("accepted", "failed")
    final = state_of(world, submission_id)
    assert (final.state, final.failure_code) == ("failed", "OOM")
    with world.db.session() as session:
        moves = [
            (t.from_state, t.to_state)
            for t in session.scalars(select(Transition).where(Transition.submission_id == submission_id).order_by(Transition.id))
        ]
    assert moves == [(None, "received"), ("received", "queued"), ("queued", "running"), ("running", "failed")]
    # a duplicate of the same result changes nothing
    again = accept_posted(
        world.db, world.state, world.key, submission_id=submission_id, attempt=1, worker_id=world.workers[0], payload={"failure_code": "OOM"}
    )
    assert again.status == "stale"


def test_stale_attempt_result_is_discarded(world: World) -> None:
    submission_id = new_submission(world)
    first = lifecycle.claim(world.db, world.workers[0], 30)
    assert first is not None and first.attempt == 1
    expire_lease(world, submission_id)
    report = lifecycle.reap(world.db, world.dispatcher, redispatch_s=60)
    assert report.requeued == [submission_id]
    second = lifecycle.claim(world.db, world.workers[1], 30)
    assert second is not None and second.attempt == 2
    # the lost worker comes back: its heartbeat and its result are refused
    assert lifecycle.heartbeat(world.db, submission_id, 1, world.workers[0], 30) is None
    stale = accept_posted(
        world.db, world.state, world.key, submission_id=submission_id, attempt=1, worker_id=world.workers[0], payload={"failure_code": "TIMEOUT"}
    )
    assert stale.status == "stale"
    assert state_of(world, submission_id).state == "running"
    done = accept_posted(
        world.db, world.state, world.key, submission_id=submission_id, attempt=2, worker_id=world.workers[1], payload={"failure_code": "NONZERO_EXIT"}
    )
    assert done.state == "failed"
    with world.db.session() as session:
        assert session.scalar(select(func.count()).select_from(Result).where(Result.submission_id == submission_id)) == 1


def test_platform_failure_posted_by_worker_is_retried(world: World) -> None:
    submission_id = new_submission(world)
    assert lifecycle.claim(world.db, world.workers[0], 30) is not None
    verdict = accept_posted(
        world.db,
        world.state,
        world.key,
        submission_id=submission_id,
        attempt=1,
        worker_id=world.workers[0],
        payload={"failure_code": "INFRA", "message": "docker gone"},
    )
    assert verdict.status == "requeued" and state_of(world, submission_id).state == "queued"


def test_reaper_queues_forgotten_received_and_redispatches_queued(world: World) -> None:
    forgotten = new_submission(world, queue=False, uploaded_ago_s=120)
    waiting = new_submission(world)
    with world.db.session() as session:
        session.execute(update(Submission).where(Submission.id == waiting).values(dispatched_at=utcnow() - timedelta(seconds=120)))
    seen = world.dispatcher.generation()
    report = lifecycle.reap(world.db, world.dispatcher, redispatch_s=60)
    assert report.queued_received == [forgotten] and report.redispatched == [waiting]
    assert state_of(world, forgotten).state == "queued"
    assert world.dispatcher.generation() > seen


def test_rejudge_adds_a_result_and_fresh_attempts(world: World) -> None:
    submission_id = new_submission(world)
    claim = lifecycle.claim(world.db, world.workers[0], 30)
    assert claim is not None
    accept_posted(
        world.db, world.state, world.key, submission_id=submission_id, attempt=1, worker_id=world.workers[0], payload={"failure_code": "OOM"}
    )
    assert not lifecycle.rejudge_submission(world.db, world.dispatcher, "s-unknown", max_attempts=2)
    assert lifecycle.rejudge_submission(world.db, world.dispatcher, submission_id, max_attempts=2)
    queued = state_of(world, submission_id)
    assert (queued.state, queued.failure_code, queued.attempt_limit) == ("queued", None, 3)
    again = lifecycle.claim(world.db, world.workers[1], 30)
    assert again is not None and again.attempt == 2
    accept_posted(
        world.db, world.state, world.key, submission_id=submission_id, attempt=2, worker_id=world.workers[1], payload={"failure_code": "TIMEOUT"}
    )
    with world.db.session() as session:
        codes = session.scalars(select(Result.failure_code).where(Result.submission_id == submission_id).order_by(Result.id)).all()
    assert codes == ["OOM", "TIMEOUT"] and state_of(world, submission_id).failure_code == "TIMEOUT"


def test_claims_follow_upload_order_even_after_redispatch(world: World) -> None:
    older = new_submission(world, uploaded_ago_s=300)
    newer = new_submission(world, uploaded_ago_s=100)
    with world.db.session() as session:  # the older one waited unclaimed and was re-dispatched last
        session.execute(update(Submission).where(Submission.id == older).values(dispatched_at=utcnow()))
    first = lifecycle.claim(world.db, world.workers[0], 30)
    second = lifecycle.claim(world.db, world.workers[0], 30)
    assert first is not None and second is not None and (first.submission_id, second.submission_id) == (older, newer)
