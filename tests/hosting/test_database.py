"""The database and the lifecycle services, on SQLite and on a real PostgreSQL (no mocks)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import func, inspect, select, text, update

from grader import jsonio
from grader.hosting.clock import utcnow
from grader.hosting.config import Competition, load_competition
from grader.hosting.db.models import Participant, Pin, Result, State, Submission, Transition, Worker
from grader.hosting.db.session import Database, head_revision, migrate, open_database
from grader.hosting.errors import RefusedSubmission
from grader.hosting.services import lifecycle
from grader.hosting.services.dispatch import LocalDispatcher
from grader.hosting.services.participants import add_participant, authenticate, authenticate_worker, rekey_local_worker, revoke_participant
from grader.hosting.services.pins import ensure_pin
from grader.hosting.services.quotas import check_quota, quota_status
from grader.hosting.services.results import accept_result
from grader.hosting.storage import StateDir
from tests.hosting.support import write_competition


@dataclass
class World:
    db: Database
    state: StateDir
    competition: Competition
    pin_id: int
    participant_id: int
    token: str
    workers: list[int]
    dispatcher: LocalDispatcher
    key: Ed25519PrivateKey


@pytest.fixture
def world(tmp_path: Path, database_url: str | None) -> World:
    state = StateDir(tmp_path / "state")
    key = state.ensure_host_key()
    db = open_database(state.root, database_url)
    competition = load_competition(
        write_competition(tmp_path / "c.toml", max_attempts=2, tables={"quotas": {"per_day": 2, "total": 3, "concurrent": 5}})
    )
    with db.session() as session:
        pin = ensure_pin(session, competition)
        participant, token = add_participant(session, "alice", "team-a")
        rekey_local_worker(session, "w1")
        rekey_local_worker(session, "w2")
        workers = list(session.scalars(select(Worker.id).order_by(Worker.id)).all())
        ids = (pin.id, participant.id)
    yield World(db, state, competition, ids[0], ids[1], token, workers, LocalDispatcher(), key)
    db.dispose()


def new_submission(world: World, *, track: str = "hidden", queue: bool = True, uploaded_ago_s: float = 0) -> str:
    now = utcnow() - timedelta(seconds=uploaded_ago_s)
    submission = Submission(
        id=lifecycle.new_submission_id(),
        participant_id=world.participant_id,
        name="x",
        kind="onnx",
        track=track,
        split="test",
        state=State.RECEIVED.value,
        failure_code=None,
        upload_path="none",
        upload_sha256="0" * 64,
        upload_bytes=1,
        content_digest="0" * 64,
        uploaded_at=now,
        updated_at=now,
        dispatched_at=None,
        attempt=0,
        attempt_limit=world.competition.max_attempts,
        lease_worker_id=None,
        lease_expires_at=None,
        version=0,
        pin_id=world.pin_id,
        public_score=None,
        result_id=None,
    )
    with world.db.session() as session:
        lifecycle.record_received(session, submission)
    if queue:
        assert lifecycle.enqueue(world.db, world.dispatcher, submission.id, actor="test")
    return submission.id


def state_of(world: World, submission_id: str) -> Submission:
    with world.db.session() as session:
        submission = session.get(Submission, submission_id)
        assert submission is not None
        return submission


def expire_lease(world: World, submission_id: str) -> None:
    with world.db.session() as session:
        session.execute(update(Submission).where(Submission.id == submission_id).values(lease_expires_at=utcnow() - timedelta(seconds=1)))


def test_migrations_reach_head_and_are_idempotent(world: World) -> None:
    assert migrate(world.db.engine) == head_revision() == "0004_state_enums"
    tables = set(inspect(world.db.engine).get_table_names())
    assert {"participants", "workers", "pins", "settings", "submissions", "transitions", "attempts", "results", "alembic_version"} <= tables
    assert {"result_parts", "final_choices"} <= tables  # 0002_leaderboard
    assert "labels" in {column["name"] for column in inspect(world.db.engine).get_columns("submissions")}


def test_json_columns_are_read_back_strictly(world: World) -> None:
    # JSON columns go through grader.jsonio both ways: what the host wrote reads back, a duplicate key does not.
    with world.db.session() as session:
        pin = session.get(Pin, world.pin_id)
        assert pin is not None and isinstance(pin.digests["tasks"], dict)
        session.execute(text("UPDATE pins SET digests = :raw WHERE id = :id"), {"raw": '{"tasks": {}, "tasks": {}}', "id": world.pin_id})
    with world.db.session() as session, pytest.raises(jsonio.JsonError, match="key 'tasks' appears twice"):
        session.get(Pin, world.pin_id)


def test_tokens_are_stored_hashed_and_revocable(world: World) -> None:
    with world.db.session() as session:
        stored = session.scalar(select(Participant.token_sha256).where(Participant.name == "alice"))
        assert stored is not None and world.token not in stored and len(stored) == 64
        found = authenticate(session, world.token)
        assert found is not None and found.name == "alice"
        assert authenticate(session, world.token + "x") is None
        assert authenticate_worker(session, world.token) is None  # a participant token is no worker token
        revoke_participant(session, "alice")
    with world.db.session() as session:
        assert authenticate(session, world.token) is None


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
    verdict = accept_result(
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
    again = accept_result(
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
    stale = accept_result(
        world.db, world.state, world.key, submission_id=submission_id, attempt=1, worker_id=world.workers[0], payload={"failure_code": "TIMEOUT"}
    )
    assert stale.status == "stale"
    assert state_of(world, submission_id).state == "running"
    done = accept_result(
        world.db, world.state, world.key, submission_id=submission_id, attempt=2, worker_id=world.workers[1], payload={"failure_code": "NONZERO_EXIT"}
    )
    assert done.state == "failed"
    with world.db.session() as session:
        assert session.scalar(select(func.count()).select_from(Result).where(Result.submission_id == submission_id)) == 1


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


def test_platform_failure_posted_by_worker_is_retried(world: World) -> None:
    submission_id = new_submission(world)
    assert lifecycle.claim(world.db, world.workers[0], 30) is not None
    verdict = accept_result(
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


def test_cancel_is_never_charged_and_running_worker_learns_it(world: World) -> None:
    submission_id = new_submission(world)
    assert lifecycle.claim(world.db, world.workers[0], 30) is not None
    assert lifecycle.cancel(world.db, submission_id)
    assert lifecycle.heartbeat(world.db, submission_id, 1, world.workers[0], 30) is None
    assert (
        accept_result(
            world.db, world.state, world.key, submission_id=submission_id, attempt=1, worker_id=world.workers[0], payload={"failure_code": "OOM"}
        ).status
        == "stale"
    )
    with world.db.session() as session:
        assert quota_status(session, world.competition, world.participant_id, "hidden", utcnow()).used_24h == 0


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
        accept_result(
            world.db,
            world.state,
            world.key,
            submission_id=claim.submission_id,
            attempt=claim.attempt,
            worker_id=world.workers[0],
            payload=outcomes[claim.submission_id],
        )
    assert lifecycle.cancel(world.db, ids[2])
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


def test_rejudge_adds_a_result_and_fresh_attempts(world: World) -> None:
    submission_id = new_submission(world)
    claim = lifecycle.claim(world.db, world.workers[0], 30)
    assert claim is not None
    accept_result(
        world.db, world.state, world.key, submission_id=submission_id, attempt=1, worker_id=world.workers[0], payload={"failure_code": "OOM"}
    )
    assert not lifecycle.rejudge(world.db, world.dispatcher, "s-unknown", max_attempts=2)
    assert lifecycle.rejudge(world.db, world.dispatcher, submission_id, max_attempts=2)
    queued = state_of(world, submission_id)
    assert (queued.state, queued.failure_code, queued.attempt_limit) == ("queued", None, 3)
    again = lifecycle.claim(world.db, world.workers[1], 30)
    assert again is not None and again.attempt == 2
    accept_result(
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
