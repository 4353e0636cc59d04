"""Who a credential belongs to: participants, workers and the metrics scraper, by token or by a web session.

Tokens are stored as SHA-256 digests and compared in constant time. A web session
holds the participant's id, a fingerprint of their token digest (revoking or
re-issuing the token ends the session) and the id of a stored session row, which
signing out ends: a cookie replayed after sign-out, or past :data:`SESSION_S`, is
refused though its signature is still good. What a caller gets back is a
:class:`grader.hosting.identity.principal.Principal`.
"""

from __future__ import annotations

import hmac
import secrets
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from grader.hosting.clock import utcnow
from grader.hosting.db.models import Participant, Setting, WebSession, Worker
from grader.hosting.db.session import Database
from grader.hosting.identity.principal import Principal, Role
from grader.hosting.identity.tokens import new_token, same_digest, token_digest

#: Settings key holding the SHA-256 of the token that may read /metrics (``grader admin metrics-token``).
METRICS_TOKEN_KEY = "metrics_token_sha256"
#: Longer tokens are refused unread (ours are about 50 characters).
MAX_TOKEN = 200
FINGERPRINT = 32
#: How long a web session lasts (the cookie's max-age too).
SESSION_S = 8 * 3600
#: Live web sessions kept per participant: a new sign-in ends the oldest beyond these (a browser or two, a phone).
#: Each sign-in stores a row that lives :data:`SESSION_S`; without a cap a script signing in with a valid token
#: grows the table by a row a request.
SESSIONS_PER_PARTICIPANT = 5


def _participant(row: Participant) -> Principal:
    return Principal(Role.PARTICIPANT, row.id, row.name, row.token_sha256[:FINGERPRINT])


def participant_by_token(session: Session, token: str) -> Participant | None:
    """The active participant holding ``token``, or None."""
    digest = token_digest(token)
    participant = session.scalar(select(Participant).where(Participant.token_sha256 == digest))
    if participant is None or participant.revoked_at is not None or not same_digest(participant.token_sha256, digest):
        return None
    return participant


def worker_by_token(session: Session, token: str) -> Worker | None:
    """The active worker holding ``token``, or None."""
    digest = token_digest(token)
    worker = session.scalar(select(Worker).where(Worker.token_sha256 == digest))
    if worker is None or worker.revoked_at is not None or not same_digest(worker.token_sha256, digest):
        return None
    return worker


def by_token(db: Database, role: Role, token: str) -> Principal | None:
    """The active holder of ``token`` in ``role``, or None (unknown, revoked, or too long to be ours)."""
    if not token or len(token) > MAX_TOKEN:
        return None
    with db.session() as session:
        if role is Role.PARTICIPANT:
            participant = participant_by_token(session, token)
            return None if participant is None else _participant(participant)
        if role is Role.WORKER:
            worker = worker_by_token(session, token)
            return None if worker is None else Principal(Role.WORKER, worker.id, worker.name)
        stored = session.scalar(select(Setting.value).where(Setting.key == METRICS_TOKEN_KEY))
    if stored is None or not same_digest(stored, token_digest(token)):
        return None
    return Principal(Role.METRICS, 0, "metrics")


def prune_sessions(session: Session, model: Any, owner: Any, owner_id: int, now: datetime) -> None:
    """Delete the web sessions of ``model`` (a table of sessions: ``id_sha256``, ``started_at``, ``expires_at``) past
    their time, and ``owner_id``'s (``owner``: the column naming whose they are) beyond the newest
    :data:`SESSIONS_PER_PARTICIPANT` - 1, before a new one is stored."""
    session.execute(delete(model).where(model.expires_at < now))
    older = select(model.id_sha256).where(owner == owner_id)
    older = older.order_by(model.started_at.desc(), model.id_sha256).offset(SESSIONS_PER_PARTICIPANT - 1)
    stale = list(session.scalars(older).all())
    if stale:
        session.execute(delete(model).where(model.id_sha256.in_(stale)))


def start_session(db: Database, participant_id: int) -> str:
    """Store a new web session of ``participant_id``; return its id for the cookie.

    Sessions past their time are pruned, and so are this participant's beyond the newest
    :data:`SESSIONS_PER_PARTICIPANT` - 1: a deleted row ends its session as signing out does (:func:`by_session`
    refuses a cookie whose row is gone).
    """
    session_id = secrets.token_urlsafe(32)
    now = utcnow()
    with db.session() as session:
        prune_sessions(session, WebSession, WebSession.participant_id, participant_id, now)
        session.add(
            WebSession(
                id_sha256=token_digest(session_id),
                participant_id=participant_id,
                started_at=now,
                expires_at=now + timedelta(seconds=SESSION_S),
                ended_at=None,
            )
        )
    return session_id


def end_session(db: Database, session_id: str) -> None:
    """End the web session ``session_id`` (sign-out): its cookie is refused from now on."""
    if not session_id or len(session_id) > MAX_TOKEN:
        return
    with db.session() as session:
        session.execute(
            update(WebSession).where(WebSession.id_sha256 == token_digest(session_id), WebSession.ended_at.is_(None)).values(ended_at=utcnow())
        )


def by_session(db: Database, participant_id: int, fingerprint: str, session_id: str) -> Principal | None:
    """The participant a web session names, while the session is live and their token is still the one they signed in with."""
    if not session_id or len(session_id) > MAX_TOKEN:
        return None
    with db.session() as session:
        # Looked up by the digest of a 256-bit random id: equality in the index, as with tokens.
        live = session.get(WebSession, token_digest(session_id))
        if live is None or live.participant_id != participant_id or live.ended_at is not None or live.expires_at <= utcnow():
            return None
        found = session.get(Participant, participant_id)
        if found is None or found.revoked_at is not None:
            return None
        if not hmac.compare_digest(found.token_sha256[:FINGERPRINT].encode(), fingerprint.encode()):
            return None
        return _participant(found)


def new_metrics_token(db: Database) -> str:
    """Create (or replace) the token that reads /metrics; return it (only its digest is stored)."""
    token, digest = new_token("gm")
    with db.session() as session:
        setting = session.get(Setting, METRICS_TOKEN_KEY)
        if setting is None:
            session.add(Setting(key=METRICS_TOKEN_KEY, value=digest))
        else:
            setting.value = digest
    return token


def participant_of_person(db: Database, name: str, digest: str) -> Principal | None:
    """The participant a signed-in person is in this competition: the active participant of their name holding their
    token (a server of many competitions); None when the person is not registered here."""
    with db.session() as session:
        found = session.scalar(select(Participant).where(Participant.name == name))
        if found is None or found.revoked_at is not None or not same_digest(found.token_sha256, digest):
            return None
        return _participant(found)
