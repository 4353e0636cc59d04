"""The world of the database and lifecycle tests: a migrated database, a competition, one participant, two workers.

The ``world`` fixture (tests/hosting/conftest.py) builds one on SQLite and on a real PostgreSQL; the helpers
here add submissions through the product's own row constructor and lifecycle, and read them back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import select, update

from grader.hosting.clock import utcnow
from grader.hosting.config import Competition, load_competition
from grader.hosting.db.models import Submission, Worker
from grader.hosting.db.session import Database, open_database
from grader.hosting.identity.participants import create_participant, rekey_local_worker
from grader.hosting.intake.submission_rows import received_submission
from grader.hosting.queue import lifecycle
from grader.hosting.queue.dispatch import LocalDispatcher
from grader.hosting.results.pins import ensure_pin
from grader.hosting.states import Track
from grader.hosting.storage import StateDir
from tests.hosting.support import write_competition


@dataclass
class World:
    """What the tests act on: ``alice`` (participant, ``token``), workers ``w1`` and ``w2`` (ids in ``workers``)."""

    db: Database
    state: StateDir
    competition: Competition
    pin_id: int
    participant_id: int
    token: str
    workers: list[int]
    dispatcher: LocalDispatcher
    key: Ed25519PrivateKey


def make_world(root: Path, database_url: str | None) -> World:
    """A world in ``root``: at most 2 attempts per job; quotas of 2 a day, 3 in all, 5 at once."""
    state = StateDir(root / "state")
    key = state.ensure_host_key()
    db = open_database(state.root, database_url)
    competition = load_competition(write_competition(root / "c.toml", max_attempts=2, tables={"quotas": {"per_day": 2, "total": 3, "concurrent": 5}}))
    with db.session() as session:
        pin = ensure_pin(session, competition)
        participant, token = create_participant(session, "alice", "team-a")
        rekey_local_worker(session, "w1")
        rekey_local_worker(session, "w2")
        workers = list(session.scalars(select(Worker.id).order_by(Worker.id)).all())
        ids = (pin.id, participant.id)
    return World(db, state, competition, ids[0], ids[1], token, workers, LocalDispatcher(), key)


def new_submission(world: World, *, track: str = Track.HIDDEN, queue: bool = True, uploaded_ago_s: float = 0) -> str:
    """Record a submission of alice's (uploaded ``uploaded_ago_s`` ago), queued unless ``queue`` is False; its id."""
    submission = received_submission(
        submission_id=lifecycle.new_submission_id(),
        participant_id=world.participant_id,
        pin_id=world.pin_id,
        name="x",
        kind="onnx",
        track=track,
        split="test",
        upload_path="none",
        upload_sha256="0" * 64,
        upload_bytes=1,
        content_digest="0" * 64,
        uploaded_at=utcnow() - timedelta(seconds=uploaded_ago_s),
        attempt_limit=world.competition.max_attempts,
    )
    with world.db.session() as session:
        lifecycle.record_received(session, submission)
    if queue:
        assert lifecycle.enqueue(world.db, world.dispatcher, submission.id, actor="test")
    return submission.id


def state_of(world: World, submission_id: str) -> Submission:
    """The submission's row as stored now."""
    with world.db.session() as session:
        submission = session.get(Submission, submission_id)
        assert submission is not None
        return submission


def expire_lease(world: World, submission_id: str) -> None:
    """Let the submission's lease lapse (its worker is lost)."""
    with world.db.session() as session:
        session.execute(update(Submission).where(Submission.id == submission_id).values(lease_expires_at=utcnow() - timedelta(seconds=1)))
