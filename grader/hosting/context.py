"""Everything the routes need, built once by the server: the one settings object."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import select

from grader.hosting.config import Competition
from grader.hosting.db.models import Setting
from grader.hosting.db.session import Database
from grader.hosting.ratelimit import FailureLimiter
from grader.hosting.services.dispatch import LocalDispatcher
from grader.hosting.storage import StateDir
from grader.sandbox.blinding import BlindingKey


@dataclass
class ServerContext:
    """The competition, its database, state folder, dispatcher and pinned facts."""

    competition: Competition
    db: Database
    state: StateDir
    dispatcher: LocalDispatcher
    pin_id: int
    signing_key: Ed25519PrivateKey
    benchmark_target: str
    tasks: list[str]
    split: str
    sample_split: str
    #: The partition secret (keys/partition.secret) and its published commitment; never served before the end.
    partition_secret: bytes = b""
    partition_commitment: str = ""
    #: The blinding key (keys/blinding.secret): handed to workers with each job; its id is public, the key only after the end.
    blinding_key: BlindingKey | None = None
    limiter: FailureLimiter = field(default_factory=FailureLimiter)

    def ends_at(self) -> datetime:
        """The competition's end: the file's, or earlier if the host ended it (``grader admin end``)."""
        with self.db.session() as session:
            ended = session.scalar(select(Setting.value).where(Setting.key == "ended_at"))
        if ended is None:
            return self.competition.end
        return min(self.competition.end, datetime.fromisoformat(ended))

    def ended(self) -> bool:
        """Whether the competition has ended (the private board and full reports are public from then on)."""
        from grader.hosting.clock import utcnow

        return utcnow() >= self.ends_at()
