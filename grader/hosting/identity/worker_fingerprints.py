"""A worker's fingerprint, bound to its row: stated once, compared at every claim, reset only by the host.

Replicas of an ONNX grade are paired only between workers of equal fingerprint
(:mod:`grader.hosting.services.replication`), so a fingerprint a worker could change at will,
claim by claim, would let it choose whose grades it is compared with. These functions keep
what the worker stated first: the services decide what to refuse; here is only what is stored.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.hosting.db.models import Worker
from grader.hosting.errors import HostingError


def bind(worker: Worker, digest: str, stated: dict[str, Any], signature: str | None) -> str:
    """Bind ``digest`` (of ``stated``) to ``worker`` unless one is bound: ``bound``, ``same`` or ``different`` (nothing written)."""
    if worker.fingerprint is None:
        worker.fingerprint, worker.fingerprint_stated, worker.fingerprint_signature = digest, stated, signature
        return "bound"
    return "same" if worker.fingerprint == digest else "different"


def note_refusal(session: Session, worker_id: int, digest: str | None) -> None:
    """Count a claim or statement refused for ``worker_id``, naming ``digest`` (kept as the last refused): the host sees both."""
    worker = session.get(Worker, worker_id)
    assert worker is not None  # authenticated a moment ago; workers are revoked, never deleted
    worker.fingerprint_refusals = (worker.fingerprint_refusals or 0) + 1
    worker.fingerprint_refused = digest


def unbind(worker: Worker) -> None:
    """Clear ``worker``'s binding: its next statement binds anew (the refusals stay counted: the host's record)."""
    worker.fingerprint = worker.fingerprint_stated = worker.fingerprint_signature = None


def reset(session: Session, name: str) -> str | None:
    """The host's reset of worker ``name``'s binding; the digest that was bound (None: none was)."""
    worker = session.scalar(select(Worker).where(Worker.name == name))
    if worker is None:
        raise HostingError(f"no worker named {name!r}", hint="`grader admin workers` lists them")
    was = worker.fingerprint
    unbind(worker)
    return was
