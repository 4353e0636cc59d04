"""When the competition ends: the file's ``end``, or earlier, when the host ended it (``grader admin end``), and never
later than an end already logged.

The one read of the end. A service asks it once per request and hands the answer (``ended``) to the pure
rules of :mod:`grader.hosting.visibility`, so one request never sees the competition both open and ended.

An end, once logged, is stored (:func:`record_logged_end`, in the transaction of its ``end`` entry), whoever logged it:
the host's command or the first reaper pass after the file's ``end``. Moving ``end`` later in the file then moves
nothing: the secret and the blinding key are public from the end on, so a competition reopened under them would let
anyone tell the private queries and compute every pseudonym (a host who wants more time opens a new competition).

A file without ``end`` is a standing leaderboard: no end until the host ends it (``grader admin end``), so no reaper
pass ever logs one, and the reveal, which waits for the end, never comes by itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.hosting.clock import utcnow
from grader.hosting.config import Competition
from grader.hosting.db.models import Setting
from grader.hosting.db.session import Database
from grader.hosting.visibility import disclosed

#: Settings key of the moment the host ended the competition early.
ENDED_AT_KEY = "ended_at"
#: Settings key of the end the log holds (the host's, or the file's ``end`` when it was reached), stored as it is logged.
LOGGED_END_KEY = "end_logged_at"


def _stored(session: Session, key: str) -> datetime | None:
    value = session.scalar(select(Setting.value).where(Setting.key == key))
    return None if value is None else datetime.fromisoformat(value)


def stored_ends(session: Session) -> tuple[datetime | None, datetime | None]:
    """The host's early end and the logged end, as stored (None where there is none); one query, as every request
    reads them."""
    stored: dict[str, str] = {
        key: value for key, value in session.execute(select(Setting.key, Setting.value).where(Setting.key.in_((ENDED_AT_KEY, LOGGED_END_KEY))))
    }
    ended, logged = stored.get(ENDED_AT_KEY), stored.get(LOGGED_END_KEY)
    return (None if ended is None else datetime.fromisoformat(ended)), (None if logged is None else datetime.fromisoformat(logged))


def record_logged_end(session: Session, at: datetime) -> datetime:
    """Store the end ``at`` as logged, in the logging transaction; an end already stored stays (the first end is kept)."""
    stored = _stored(session, LOGGED_END_KEY)
    if stored is not None:
        return stored
    session.add(Setting(key=LOGGED_END_KEY, value=at.isoformat()))
    session.flush()
    return at


def ends_at(db: Database, competition: Competition) -> datetime | None:
    """The competition's end: the file's, or earlier if the host ended it or an earlier end was logged; None for a
    standing leaderboard (no ``end`` in the file) that nobody ended."""
    with db.session() as session:
        stored = [moment for moment in stored_ends(session) if moment is not None]
    known = [moment for moment in (competition.end, *stored) if moment is not None]
    return min(known) if known else None


def passed(at: datetime | None, now: datetime) -> bool:
    """Whether the end ``at`` has come by ``now`` (an end that does not exist never comes)."""
    return at is not None and now >= at


def has_ended(db: Database, competition: Competition) -> bool:
    """Whether the competition has ended (the private board and full reports are public from then on)."""
    return passed(ends_at(db, competition), utcnow())


@dataclass(frozen=True)
class End:
    """The competition's end as one request sees it: when (None: a standing leaderboard), and whether it has passed."""

    at: datetime | None
    ended: bool
    #: whether every number of a grade is public (:func:`grader.hosting.visibility.disclosed`): ended, or public test data
    disclosed: bool


def end_of(db: Database, competition: Competition) -> End:
    """The end and whether it has passed, from one read."""
    at = ends_at(db, competition)
    ended = passed(at, utcnow())
    return End(at, ended, disclosed(ended=ended, public_data=competition.public_data))


def is_disclosed(db: Database, competition: Competition) -> bool:
    """Whether every number of a grade is public now (:func:`grader.hosting.visibility.disclosed`), from one read."""
    return end_of(db, competition).disclosed
