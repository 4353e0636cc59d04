"""What ``grader serve`` asks of the database before it serves: the partition commitment, the blinding key id, the pin, the known submissions, local worker tokens, and that an end the log holds stays."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from grader.hosting.clock import iso, utcnow
from grader.hosting.config import Competition
from grader.hosting.db.models import Submission
from grader.hosting.db.session import Database
from grader.hosting.errors import HostingError
from grader.hosting.identity.participants import rekey_local_worker
from grader.hosting.keyring.blinding_key import record_blinding_key_id
from grader.hosting.keyring.partition_secret import record_commitment
from grader.hosting.results.pins import ensure_pin
from grader.hosting.schedule import record_logged_end, stored_ends
from grader.hosting.services.phase_close import reopened_phase
from grader.hosting.transparency.log_events import logged_end
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


class EndReopened(HostingError):
    """The log holds the competition's end (or a phase's), and the competition file now says it is open."""


def hold_the_end(db: Database, competition: Competition) -> None:
    """Before serving: refuse, in one line, a competition file whose ``end`` lies in the future when the log holds an
    end the file's ``end`` reached (moved later since); store the logged end where a log written before the end was
    stored with it holds one.

    The end reveals the partition secret and the blinding key: reopened under them, anyone could tell the private
    queries and compute every pseudonym. The host's early end (``grader admin end``) is no such case: there the file's
    ``end`` was later all along, and the stored end decides (:mod:`grader.hosting.schedule`). A phase whose end the log
    holds stays closed the same way (:func:`grader.hosting.services.phase_close.reopened_phase`).
    """
    if (refusal := reopened_phase(db, competition)) is not None:
        raise EndReopened(refusal)
    with db.session() as session:
        host_end, stored = stored_ends(session)
        entry = logged_end(session)
        if entry is None:
            return
        index, at = entry
        if stored is None:
            record_logged_end(session, at)
        if host_end is None and (competition.end is None or competition.end > utcnow()):
            raise EndReopened(
                f"the log holds the competition's end at {iso(at)} (entry {index}), but the competition file now says it ends at "
                f"{iso(competition.end) or 'never (no end: a standing leaderboard)'}: an ended competition stays ended (its partition secret and blinding key are public); "
                f"set `end` back to {iso(at)}, or open a new competition for more time"
            )
