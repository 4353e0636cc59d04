"""Who a credential belongs to: participants, workers and the metrics scraper, by token or by a web session.

Tokens are stored as SHA-256 digests and compared in constant time. A web session
holds the participant's id and a fingerprint of their token digest, so revoking or
re-issuing the token ends the session. What a caller gets back is a
:class:`grader.hosting.principal.Principal`.
"""

from __future__ import annotations

import hmac

from sqlalchemy import select

from grader.hosting.db.models import Participant, Setting
from grader.hosting.db.session import Database
from grader.hosting.principal import Principal, Role
from grader.hosting.services.participants import authenticate as participant_by_token
from grader.hosting.services.participants import authenticate_worker as worker_by_token
from grader.hosting.services.tokens import new_token, same_digest, token_digest

#: Settings key holding the SHA-256 of the token that may read /metrics (``grader admin metrics-token``).
METRICS_TOKEN_KEY = "metrics_token_sha256"
#: Longer tokens are refused unread (ours are about 50 characters).
MAX_TOKEN = 200
FINGERPRINT = 32


def _participant(row: Participant) -> Principal:
    return Principal(Role.PARTICIPANT, row.id, row.name, row.token_sha256[:FINGERPRINT])


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


def by_session(db: Database, participant_id: int, fingerprint: str) -> Principal | None:
    """The participant a web session names, while their token is still the one they signed in with."""
    with db.session() as session:
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
