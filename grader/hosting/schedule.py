"""When the competition ends: the file's ``end``, or earlier, when the host ended it (``grader admin end``).

The one read of the end. A service asks it once per request and hands the answer (``ended``) to the pure
rules of :mod:`grader.hosting.visibility`, so one request never sees the competition both open and ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from grader.hosting.clock import utcnow
from grader.hosting.config import Competition
from grader.hosting.db.models import Setting
from grader.hosting.db.session import Database

#: Settings key of the moment the host ended the competition early.
ENDED_AT_KEY = "ended_at"


def ends_at(db: Database, competition: Competition) -> datetime:
    """The competition's end: the file's, or earlier if the host ended it."""
    with db.session() as session:
        ended = session.scalar(select(Setting.value).where(Setting.key == ENDED_AT_KEY))
    return competition.end if ended is None else min(competition.end, datetime.fromisoformat(ended))


def has_ended(db: Database, competition: Competition) -> bool:
    """Whether the competition has ended (the private board and full reports are public from then on)."""
    return utcnow() >= ends_at(db, competition)


@dataclass(frozen=True)
class End:
    """The competition's end as one request sees it: when, and whether that moment has passed."""

    at: datetime
    ended: bool


def end_of(db: Database, competition: Competition) -> End:
    """The end and whether it has passed, from one read."""
    at = ends_at(db, competition)
    return End(at, utcnow() >= at)
