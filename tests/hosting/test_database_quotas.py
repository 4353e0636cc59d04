"""Quotas: what the participant caused is charged, what the platform or the host caused is not (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from grader.hosting.clock import utcnow
from grader.hosting.db.models import Submission
from grader.hosting.errors import RefusedSubmission
from grader.hosting.intake.quotas import check_quota, quota_status
from grader.hosting.queue import lifecycle
from tests.hosting.posting import accept_posted
from tests.hosting.world import World, expire_lease, new_submission, state_of


def test_quota_counts_what_the_participant_caused(world: World) -> None:
    # per_day = 2, total = 3: a scored one and a participant failure count; an INFRA error and a cancel do not
    ids = [new_submission(world, uploaded_ago_s=s) for s in (3600, 1800, 600, 60)]
    outcomes = {ids[0]: {"failure_code": "NONZERO_EXIT"}, ids[1]: {"failure_code": "INFRA"}}
    for submission_id in ids[:2]:
        with world.db.session() as session:
            session.execute(update(Submission).where(Submission.id == submission_id).values(attempt_limit=1))
    for _ in range(2):
        claim = lifecycle.claim(world.db, world.workers[0], 30)
        assert claim is not None
        accept_posted(
            world.db,
            world.state,
            world.key,
            submission_id=claim.submission_id,
            attempt=claim.attempt,
            worker_id=world.workers[0],
            payload=outcomes[claim.submission_id],
        )
    assert lifecycle.cancel_submission(world.db, ids[2])
    assert [state_of(world, i).state for i in ids] == ["failed", "error", "cancelled", "queued"]
    now = utcnow()
    with world.db.session() as session:
        status = quota_status(session, world.competition, world.participant_id, "hidden", now)
        assert (status.used_24h, status.used_total, status.in_flight) == (2, 2, 1)
        oldest_charged = state_of(world, ids[0]).uploaded_at
        with pytest.raises(RefusedSubmission) as caught:
            check_quota(session, world.competition, world.participant_id, "hidden", now, world.competition.end)
        assert caught.value.status == 429 and caught.value.retry_at == oldest_charged + timedelta(hours=24)
        assert "next is possible at" in str(caught.value)
        # the sample track has its own quota
        check_quota(session, world.competition, world.participant_id, "sample", now, world.competition.end)
        with pytest.raises(RefusedSubmission, match="closed at"):
            check_quota(session, world.competition, world.participant_id, "sample", now, now - timedelta(seconds=1))


def test_lost_workers_end_in_error_infra_and_are_not_charged(world: World) -> None:
    submission_id = new_submission(world)
    for attempt in (1, 2):  # max_attempts = 2
        claim = lifecycle.claim(world.db, world.workers[0], 30)
        assert claim is not None and claim.attempt == attempt
        expire_lease(world, submission_id)
        lifecycle.reap(world.db, world.dispatcher, redispatch_s=60)
    final = state_of(world, submission_id)
    assert (final.state, final.failure_code, final.attempt) == ("error", "INFRA", 2)
    with world.db.session() as session:
        assert quota_status(session, world.competition, world.participant_id, "hidden", utcnow()).used_24h == 0


def test_cancel_is_never_charged_and_running_worker_learns_it(world: World) -> None:
    submission_id = new_submission(world)
    assert lifecycle.claim(world.db, world.workers[0], 30) is not None
    assert lifecycle.cancel_submission(world.db, submission_id)
    assert lifecycle.heartbeat(world.db, submission_id, 1, world.workers[0], 30) is None
    assert (
        accept_posted(
            world.db, world.state, world.key, submission_id=submission_id, attempt=1, worker_id=world.workers[0], payload={"failure_code": "OOM"}
        ).status
        == "stale"
    )
    with world.db.session() as session:
        assert quota_status(session, world.competition, world.participant_id, "hidden", utcnow()).used_24h == 0
