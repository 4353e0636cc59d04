"""The outbox: a notification is a row written in the transaction of its event, and delivered later by the sender.

So an event that commits has its notifications, one that rolls back has none, and a crash between the two loses
nothing: the database is the truth, the sender only reads it. A row is taken for a try by a guarded UPDATE (its
``tries`` as read), which also pushes ``next_at`` past the try's bound, so two servers on one database never try
one row at once, and a server killed mid-try leaves the row due again later (delivery is at least once: a receiver
tells a repeat by the body's ``id``).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from grader.hosting.clock import iso, utcnow
from grader.hosting.db.models import NotifyDelivery, NotifySetting, Submission
from grader.hosting.identity import teams

WEBHOOK = "webhook"
EMAIL = "email"
#: Events: a submission's state changed; its board entry changed (a re-scoring); a participant's test.
STATE_CHANGE = "submission.state"
BOARD_CHANGE = "submission.board"
PING = "ping"
#: The longest outcome kept on a row (the reason of the last failed try).
OUTCOME_CHARS = 200


def record(session: Session, participant_id: int, facts: dict[str, Any]) -> int:
    """Add one delivery per address the participant set (none: nothing), in the caller's transaction; how many."""
    setting = session.get(NotifySetting, participant_id)
    if setting is None:
        return 0
    now = utcnow()
    facts = {"id": "e" + secrets.token_hex(8), "at": iso(now), **facts}
    added = 0
    for channel, address in ((WEBHOOK, setting.webhook_url), (EMAIL, setting.email)):
        if address:
            session.add(
                NotifyDelivery(participant_id=participant_id, channel=channel, address=address, facts=facts, created_at=now, tries=0, next_at=now)
            )
            added += 1
    return added


def _maker_reads(session: Session, submission: Submission) -> bool:
    """Whether the submission's maker may still read it: a team's submission is no longer theirs once they left
    (docs/hosting.md, "Teams"), and they hear no more of it."""
    return submission.team_id is None or teams.team_of(session, submission.participant_id) == submission.team_id


def state_changed(session: Session, submission: Submission, source: str, to: str) -> None:
    """A move of ``submission`` (called by :func:`grader.hosting.queue.lifecycle.move`, in its transaction)."""
    if not _maker_reads(session, submission):
        return
    record(session, submission.participant_id, {"type": STATE_CHANGE, "submission": submission.id, "from": source, "state": to})


def board_changed(session: Session, submission: Submission) -> None:
    """A finished submission's result was replaced (a re-scoring): its board entry changed; the score is not sent."""
    if not _maker_reads(session, submission):
        return
    record(session, submission.participant_id, {"type": BOARD_CHANGE, "submission": submission.id, "state": str(submission.state)})


@dataclass(frozen=True)
class Pending:
    """A delivery taken for one try: where, what, and the secret to sign it with (webhooks)."""

    id: int
    channel: str
    address: str
    facts: dict[str, Any]
    tries: int
    created_at: datetime
    secret: str | None


def take_due(session: Session, now: datetime, limit: int, hold_s: float) -> list[Pending]:
    """Up to ``limit`` due deliveries, each taken for one try (``tries`` raised, not due again for ``hold_s``).

    A webhook whose participant has since cleared or changed the URL is ended, not tried: the address set at the
    event is the only one it goes to, and only while it is still the participant's.
    """
    rows = session.scalars(
        select(NotifyDelivery).where(NotifyDelivery.done_at.is_(None), NotifyDelivery.next_at <= now).order_by(NotifyDelivery.next_at).limit(limit)
    ).all()
    taken = []
    for row in rows:
        setting = session.get(NotifySetting, row.participant_id)
        current = None if setting is None else (setting.webhook_url if row.channel == WEBHOOK else setting.email)
        if current != row.address:
            end(session, row.id, "given up: the address was changed or cleared")
            continue
        claimed = session.execute(
            update(NotifyDelivery)
            .where(NotifyDelivery.id == row.id, NotifyDelivery.tries == row.tries, NotifyDelivery.done_at.is_(None))
            .values(tries=row.tries + 1, next_at=now + timedelta(seconds=hold_s))
            .execution_options(synchronize_session=False)
        )
        if claimed.rowcount == 1:  # type: ignore[attr-defined]
            secret = setting.webhook_secret if setting is not None and row.channel == WEBHOOK else None
            taken.append(Pending(row.id, row.channel, row.address, dict(row.facts), row.tries + 1, row.created_at, secret))
    return taken


def end(session: Session, delivery_id: int, outcome: str) -> None:
    """The delivery is over: ``delivered``, or ``given up: <why>``."""
    session.execute(update(NotifyDelivery).where(NotifyDelivery.id == delivery_id).values(done_at=utcnow(), outcome=outcome[:OUTCOME_CHARS]))


def again_at(session: Session, delivery_id: int, when: datetime, outcome: str) -> None:
    """A failed try; the next is due at ``when``."""
    session.execute(update(NotifyDelivery).where(NotifyDelivery.id == delivery_id).values(next_at=when, outcome=outcome[:OUTCOME_CHARS]))


def prune(session: Session, before: datetime) -> int:
    """Forget deliveries that ended before ``before`` (the outbox keeps what is pending and a recent history only)."""
    result = session.execute(delete(NotifyDelivery).where(NotifyDelivery.done_at.is_not(None), NotifyDelivery.done_at < before))
    return int(result.rowcount)  # type: ignore[attr-defined]


def pings_since(session: Session, participant_id: int, since: datetime) -> int:
    """The participant's test events since ``since`` (their deliveries of one event counted once).

    Reads the participant's rows of that window only: state changes are bounded by the quotas, and pings by this
    count, so the read is small."""
    rows = session.scalars(
        select(NotifyDelivery.facts).where(NotifyDelivery.participant_id == participant_id, NotifyDelivery.created_at >= since)
    ).all()
    return len({facts.get("id") for facts in rows if facts.get("type") == PING})


def recent(session: Session, participant_id: int, limit: int = 10) -> list[NotifyDelivery]:
    """The participant's latest deliveries, newest first (what ``GET /api/v1/notify`` shows)."""
    return list(
        session.scalars(
            select(NotifyDelivery).where(NotifyDelivery.participant_id == participant_id).order_by(NotifyDelivery.id.desc()).limit(limit)
        ).all()
    )
