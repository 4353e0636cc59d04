"""Participants and workers: creation (the token is shown once) and revocation; their tokens are looked up in auth.py."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.hosting.clock import utcnow
from grader.hosting.db.models import Participant, Worker
from grader.hosting.errors import HostingError
from grader.hosting.identity.tokens import new_token
from grader.hosting.identity.worker_fingerprints import unbind
from grader.text import first_unprintable

MAX_NAME = 100


def create_participant(session: Session, name: str, team: str | None = None, *, baseline: bool = False) -> tuple[Participant, str]:
    """Create a participant; return it and its token (never stored, only its hash)."""
    token, digest = new_token("gp")
    return register_participant(session, name, digest, team, baseline=baseline), token


def check_participant_name(session: Session, name: str, team: str | None = None) -> None:
    """Refuse a name (or team) that is not printable and bounded, or already a participant's here."""
    if not name.strip() or len(name) > MAX_NAME or first_unprintable(name):
        raise HostingError(f"participant name must be 1-{MAX_NAME} printable characters (no control, bidi or zero-width character)")
    if team is not None and (len(team) > MAX_NAME or first_unprintable(team)):
        raise HostingError(f"team name must be at most {MAX_NAME} printable characters (no control, bidi or zero-width character)")
    if session.scalar(select(Participant).where(Participant.name == name)) is not None:
        raise HostingError(f"participant {name!r} already exists")


def register_participant(session: Session, name: str, digest: str, team: str | None = None, *, baseline: bool = False) -> Participant:
    """Create participant ``name`` holding the token whose SHA-256 is ``digest`` (a person's of the server, or a new one)."""
    check_participant_name(session, name, team)
    participant = Participant(name=name, team=team, token_sha256=digest, is_baseline=baseline, created_at=utcnow(), revoked_at=None)
    session.add(participant)
    session.flush()
    return participant


def is_participant(session: Session, name: str) -> bool:
    """Whether ``name`` is a participant here."""
    return session.scalar(select(Participant.id).where(Participant.name == name)) is not None


def mark_participant_revoked(session: Session, name: str) -> Participant:
    """Revoke a participant's token (their submissions stay)."""
    participant = session.scalar(select(Participant).where(Participant.name == name))
    if participant is None:
        raise HostingError(f"no participant named {name!r}")
    if participant.revoked_at is None:
        participant.revoked_at = utcnow()
    return participant


def rekey_local_worker(session: Session, name: str) -> str:
    """Create or re-key the local worker ``name``; return its fresh token (handed to the process by environment)."""
    token, digest = new_token("gw")
    worker = session.scalar(select(Worker).where(Worker.name == name))
    if worker is None:
        session.add(Worker(name=name, token_sha256=digest, public_key=None, local=True, created_at=utcnow(), revoked_at=None))
    else:
        worker.token_sha256 = digest
        worker.revoked_at = None
        # The server's own process, on the machine the server runs on now: its fingerprint is stated anew at each start
        # (a state folder moved to another machine must not stop its local workers on a mismatch).
        unbind(worker)
    session.flush()
    return token


def set_participant_digest(session: Session, name: str, old: str, new: str) -> bool:
    """Replace participant ``name``'s token digest ``old`` by ``new`` (a person's token rotated); False when ``name``
    is not a participant here holding ``old``."""
    participant = session.scalar(select(Participant).where(Participant.name == name))
    if participant is None or participant.token_sha256 != old:
        return False
    participant.token_sha256 = new
    return True
