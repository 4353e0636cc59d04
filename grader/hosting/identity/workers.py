"""Remote workers: registration by the host (token shown once, stored hashed) and their Ed25519 public keys."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.errors import KeyFileError
from grader.hosting.clock import utcnow
from grader.hosting.db.models import Worker
from grader.hosting.errors import HostingError
from grader.hosting.identity.tokens import new_token
from grader.hosting.keyring.worker_signing import check_public_key

MAX_NAME = 100


def create_worker(session: Session, name: str, public_key: str | None = None) -> tuple[Worker, str]:
    """Register remote worker ``name`` (optionally with its public key); return it and its token."""
    if not name.strip() or len(name) > MAX_NAME or any(ord(c) < 32 or c.isspace() for c in name) or name.startswith("local-"):
        raise HostingError(f"worker name must be 1-{MAX_NAME} printable characters without spaces, not starting with 'local-'")
    if session.scalar(select(Worker).where(Worker.name == name)) is not None:
        raise HostingError(f"worker {name!r} already exists", hint="`grader admin revoke-worker NAME` first to replace it")
    pem = None
    if public_key is not None:
        try:
            pem = check_public_key(public_key)
        except KeyFileError as error:
            raise HostingError(f"--public-key: {error}") from None
    token, digest = new_token("gw")
    worker = Worker(name=name, token_sha256=digest, public_key=pem, local=False, created_at=utcnow(), revoked_at=None)
    session.add(worker)
    session.flush()
    return worker, token


def mark_worker_revoked(session: Session, name: str) -> Worker:
    """Revoke a remote worker: its token stops working; results it has not posted yet are refused."""
    worker = session.scalar(select(Worker).where(Worker.name == name, Worker.local.is_(False)))
    if worker is None:
        raise HostingError(f"no remote worker named {name!r}")
    if worker.revoked_at is None:
        worker.revoked_at = utcnow()
    return worker


def record_key(session: Session, worker_id: int, public_key: str) -> str:
    """Record a remote worker's key on first use; ``same`` / ``recorded`` / ``different`` (refused) / ``local``."""
    worker = session.get(Worker, worker_id)
    assert worker is not None
    if worker.local:
        return "local"
    try:
        pem = check_public_key(public_key)
    except KeyFileError as error:
        raise HostingError(str(error)) from None
    if worker.public_key is None:
        worker.public_key = pem
        return "recorded"
    return "same" if worker.public_key == pem else "different"


#: Why a remote worker without a recorded key may not take jobs (the 403's words).
UNKEYED = "this worker's public key is not registered: record it first (`grader worker` does at start, or the host with `grader admin add-worker --public-key`)"


def job_refusal(worker: Worker) -> str | None:
    """Why ``worker`` may not claim jobs or download uploads, or None when it may.

    A remote worker's results count only when its registered key signs them, so one
    without a key could grade nothing that counts; yet it could still claim jobs (each
    then costs an attempt) and download every participant's upload. Until its key is
    recorded it gets neither. Local workers are the server's own and carry no key.
    """
    if worker.local or worker.public_key is not None:
        return None
    return UNKEYED
