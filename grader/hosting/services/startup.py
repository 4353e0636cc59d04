"""What ``grader serve`` asks of the database before it serves: the partition commitment, the blinding key id, the pin, the known submissions, local worker tokens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from grader.hosting.config import Competition
from grader.hosting.db.models import Submission
from grader.hosting.db.session import Database
from grader.hosting.identity.participants import rekey_local_worker
from grader.hosting.keyring.blinding_key import record_blinding_key_id
from grader.hosting.keyring.partition_secret import record_commitment
from grader.hosting.results.pins import ensure_pin
from grader.sandbox.blinding import BlindingKey


@dataclass(frozen=True)
class Opened:
    """The facts a server starts from."""

    commitment: str
    pin_id: int
    #: every submission id in the database (upload files of no submission are half uploads to remove)
    known: frozenset[str]
    #: the active pin's data digests (entry 0 of the log names them)
    pin_digests: dict[str, Any]


def open_competition(db: Database, competition: Competition, secret: bytes, blinding_key: BlindingKey) -> Opened:
    """Record (or check) the partition commitment, the blinding key's id and the pin, in one transaction; list the known submissions."""
    with db.session() as session:
        commitment = record_commitment(session, secret)
        record_blinding_key_id(session, blinding_key)
        pin = ensure_pin(session, competition)
        return Opened(commitment, pin.id, frozenset(session.scalars(select(Submission.id)).all()), dict(pin.digests))


def local_worker_tokens(db: Database, count: int) -> dict[str, str]:
    """Fresh tokens for the local workers ``local-1`` … ``local-<count>`` (created or re-keyed)."""
    with db.session() as session:
        return {f"local-{index}": rekey_local_worker(session, f"local-{index}") for index in range(1, count + 1)}
