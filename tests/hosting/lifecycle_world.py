"""A small hosting world for the lifecycle tests: a migrated database (SQLite or PostgreSQL), a pin, a participant, two workers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import select

from grader.hosting.clock import utcnow
from grader.hosting.config import Competition, load_competition
from grader.hosting.db.models import Submission, Worker
from grader.hosting.db.session import Database, open_database
from grader.hosting.services import lifecycle
from grader.hosting.services.dispatch import LocalDispatcher
from grader.hosting.services.participants import add_participant, rekey_local_worker
from grader.hosting.services.pins import ensure_pin
from grader.hosting.services.submission_rows import received_submission
from grader.hosting.states import Track
from grader.hosting.storage import StateDir
from tests.hosting.support import write_competition


@dataclass
class World:
    db: Database
    state: StateDir
    competition: Competition
    pin_id: int
    participant_id: int
    workers: list[int]
    dispatcher: LocalDispatcher
    key: Ed25519PrivateKey


@pytest.fixture
def world(tmp_path: Path, database_url: str | None) -> Iterator[World]:
    """The world on SQLite and on PostgreSQL (``database_url`` is parametrized in conftest.py)."""
    state = StateDir(tmp_path / "state")
    key = state.ensure_host_key()
    db = open_database(state.root, database_url)
    competition = load_competition(write_competition(tmp_path / "c.toml", max_attempts=2))
    with db.session() as session:
        pin = ensure_pin(session, competition)
        participant, _token = add_participant(session, "alice", "team-a")
        rekey_local_worker(session, "w1")
        rekey_local_worker(session, "w2")
        workers = list(session.scalars(select(Worker.id).order_by(Worker.id)).all())
        ids = (pin.id, participant.id)
    yield World(db, state, competition, ids[0], ids[1], workers, LocalDispatcher(), key)
    db.dispose()


def new_submission(world: World, *, queue: bool = True, uploaded_ago_s: float = 0) -> str:
    """A hidden-track submission recorded ``received`` and, with ``queue``, enqueued."""
    now = utcnow() - timedelta(seconds=uploaded_ago_s)
    submission = received_submission(
        submission_id=lifecycle.new_submission_id(),
        participant_id=world.participant_id,
        pin_id=world.pin_id,
        name="x",
        kind="onnx",
        track=Track.HIDDEN,
        split="test",
        upload_path="none",
        upload_sha256="0" * 64,
        upload_bytes=1,
        content_digest="0" * 64,
        uploaded_at=now,
        attempt_limit=world.competition.max_attempts,
    )
    with world.db.session() as session:
        lifecycle.record_received(session, submission)
    if queue:
        assert lifecycle.enqueue(world.db, world.dispatcher, submission.id, actor="test")
    return submission.id


def read(world: World, submission_id: str) -> Submission:
    """The submission's row as committed now."""
    with world.db.session() as session:
        submission = session.get(Submission, submission_id)
        assert submission is not None
        return submission
