"""The one world of the hosting tests: a competition on a real database (SQLite or PostgreSQL), its participants and workers.

Two builders make it. :func:`make_database_world` (here): a bare migrated database with a competition, one
participant (alice) and two workers (w1, w2), and nothing of the server (no ``ctx``). The served leaderboard
competition, built by the server's own ``prepare()`` (keys, log entry 0, partition secret, blinding key):
``tests.hosting.leaderboard_world.make_world``, whose ``seed`` adds scored submissions. The ``world`` fixture
(tests/hosting/conftest.py) builds the first, or the second under ``@pytest.mark.board``. The helpers here add
submissions through the product's own row constructor and lifecycle, and read them back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import select, update

from grader.hosting.clock import utcnow
from grader.hosting.config import Competition, load_competition
from grader.hosting.db.models import Submission, Worker
from grader.hosting.db.session import Database, open_database
from grader.hosting.identity.participants import create_participant, rekey_local_worker
from grader.hosting.intake.submission_rows import received_submission
from grader.hosting.queue import lifecycle
from grader.hosting.queue.dispatch import Dispatcher, LocalDispatcher
from grader.hosting.results.pins import ensure_pin
from grader.hosting.states import Track
from grader.hosting.storage import StateDir
from tests.hosting.support import write_competition

if TYPE_CHECKING:
    from grader.hosting.context import ServerContext
    from tests.hosting.leaderboard_world import Seeded


@dataclass
class World:
    """What the tests act on, in either build; a served world's first six fields are its ``ctx``'s own objects (:meth:`served`)."""

    db: Database
    state: StateDir
    competition: Competition
    pin_id: int
    dispatcher: Dispatcher
    #: the host's signing key
    key: Ed25519PrivateKey
    #: the database URL (None: SQLite in the state folder)
    database: str | None
    #: participant name -> token
    tokens: dict[str, str]
    #: alice's id
    participant_id: int
    #: the workers' ids, in order
    workers: list[int]
    #: the token of the first local worker (the one that claims the seeded jobs of a served world)
    worker_token: str
    #: the server's context (``prepare()``); None in a database world: read it as :attr:`ctx`
    server: ServerContext | None = None
    #: the scored submissions ``leaderboard_world.seed`` added
    submissions: list[Seeded] = field(default_factory=list)

    @classmethod
    def served(
        cls, ctx: ServerContext, database: str | None, tokens: dict[str, str], participant_id: int, workers: list[int], worker_token: str
    ) -> World:
        """The world of a competition served through ``prepare()``: its shared fields are ``ctx``'s own objects (replace one on both)."""
        shared = (ctx.db, ctx.state, ctx.competition, ctx.pin_id, ctx.dispatcher, ctx.signing_key)
        return cls(*shared, database, tokens, participant_id, workers, worker_token, server=ctx)

    @property
    def ctx(self) -> ServerContext:
        """The server's context; a database world has none (mark the test ``@pytest.mark.board`` for a served one)."""
        if self.server is None:
            raise LookupError("a database world has no server context: ask for the served one with @pytest.mark.board")
        return self.server

    @property
    def secret(self) -> bytes:
        """The partition secret of a served world."""
        return self.ctx.partition_secret

    def by_name(self, name: str) -> Seeded:
        return next(s for s in self.submissions if s.name == name)


def make_database_world(root: Path, database_url: str | None) -> World:
    """A database world in ``root``: at most 2 attempts per job; quotas of 2 a day, 3 in all, 5 at once."""
    state = StateDir(root / "state")
    key = state.ensure_host_key()
    db = open_database(state.root, database_url)
    competition = load_competition(write_competition(root / "c.toml", max_attempts=2, tables={"quotas": {"per_day": 2, "total": 3, "concurrent": 5}}))
    with db.session() as session:
        pin = ensure_pin(session, competition)
        participant, token = create_participant(session, "alice", "team-a")
        worker_token = rekey_local_worker(session, "w1")
        rekey_local_worker(session, "w2")
        workers = list(session.scalars(select(Worker.id).order_by(Worker.id)).all())
        ids = (pin.id, participant.id)
    return World(
        db=db,
        state=state,
        competition=competition,
        pin_id=ids[0],
        dispatcher=LocalDispatcher(),
        key=key,
        database=database_url,
        tokens={"alice": token},
        participant_id=ids[1],
        workers=workers,
        worker_token=worker_token,
    )


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
