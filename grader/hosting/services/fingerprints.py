"""A worker's fingerprint is bound to it: stated once (signed by a remote worker's key), then named by every claim.

Replicas are paired only between workers of equal fingerprint (:mod:`grader.hosting.services.replication`)
and a task's shard jobs run under one (:mod:`grader.hosting.queue.shard_jobs`). Were the fingerprint
whatever each claim said, a worker could pick, claim by claim, the workers its grades are compared
with. So a worker states it once (:func:`state`): a remote worker signs the statement with its
registered key, over its name and the competition's (:func:`grader.hosting.keyring.worker_signing.fingerprint_message`);
the first statement binds it to the worker's row. A statement or a claim naming another fingerprint
is refused (409), logged as a warning, and counted on the row with the digest it named (``grader
admin workers``). Only the host unbinds it (``grader admin reset-fingerprint NAME``): the worker's
next statement binds anew.

Binding proves nothing about the machine: a worker may state an honest machine's fingerprint and
run on another. What it stops is the switching; docs/security.md says what is left.
"""

from __future__ import annotations

import logging
from enum import Enum
from typing import Any

from grader.hosting.context import ServerContext
from grader.hosting.db.models import Worker
from grader.hosting.db.session import Database
from grader.hosting.errors import HostingError
from grader.hosting.identity import worker_fingerprints
from grader.hosting.identity.principal import Principal
from grader.hosting.identity.workers import job_refusal
from grader.hosting.keyring.worker_signing import verify_fingerprint
from grader.hosting.protocol.messages import UNBOUND, FingerprintBinding, FingerprintStatement
from grader.hosting.services.replication import fingerprint_digest

log = logging.getLogger("grader.hosting.fingerprints")
#: How a refusal names the host's remedy.
RESET = "the host may reset it (`grader admin reset-fingerprint NAME`)"


class Refusal(Enum):
    """Why a statement or a claim was refused: the route's status."""

    #: a remote worker's statement not signed by its registered key (or a remote worker with no key): 403
    UNSIGNED = 403
    #: another fingerprint than the one bound, or (a claim) none bound yet: 409
    CONFLICT = 409
    #: an empty fingerprint: nothing to pair replicas on, 422
    EMPTY = 422


class FingerprintRefused(HostingError):
    """A fingerprint statement or claim refused; ``refusal`` says how, the message (one line) why."""

    def __init__(self, message: str, refusal: Refusal) -> None:
        super().__init__(message)
        self.refusal = refusal


def binding(ctx: ServerContext, worker: Principal) -> FingerprintBinding:
    """What ``worker`` signs a statement over (its name, the competition's) and the digest bound to it now."""
    with ctx.db.session() as session:
        row = session.get(Worker, worker.id)
        assert row is not None  # authenticated a moment ago; workers are revoked, never deleted
        return FingerprintBinding(worker=row.name, competition=ctx.competition.name, fingerprint=row.fingerprint)


def state(ctx: ServerContext, worker: Principal, statement: FingerprintStatement) -> str:
    """Bind the stated fingerprint to ``worker`` (``bound``), or find it bound already (``same``); its digest is then the claims'.

    Raises :class:`FingerprintRefused`: UNSIGNED for a remote worker's statement its registered key did not sign
    (checked first, so an unsigned statement learns nothing of the binding), CONFLICT when another is bound.
    """
    stated: dict[str, Any] = dict(statement.fingerprint)
    digest = fingerprint_digest(stated)
    if digest is None:
        raise FingerprintRefused("an empty fingerprint cannot be bound: state the machine's", Refusal.EMPTY)
    with ctx.db.session() as session:
        row = session.get(Worker, worker.id)
        assert row is not None
        if (why := _unsigned(ctx, row, stated, statement.signature)) is not None:
            worker_fingerprints.note_refusal(session, row.id, digest)
            refused = FingerprintRefused(why, Refusal.UNSIGNED)
        else:
            outcome = worker_fingerprints.bind(row, digest, stated, None if row.local else statement.signature)
            if outcome == "bound":
                log.info("worker %s: fingerprint %s bound", row.name, digest[:12])
            if outcome != "different":
                return outcome
            worker_fingerprints.note_refusal(session, row.id, digest)
            refused = FingerprintRefused(_conflict("statement", digest, row.fingerprint), Refusal.CONFLICT)
    # After the commit: the refusal is counted on the row whatever the caller does with the error.
    log.warning("worker %s: fingerprint statement refused: %s", worker.name, refused)
    raise refused


def _unsigned(ctx: ServerContext, row: Worker, stated: dict[str, Any], signature: str | None) -> str | None:
    """Why a statement of ``row`` is not signed as it must be (a remote worker signs with its registered key), or None."""
    if row.local:
        return None  # the server's own process, re-keyed at each start: its statement needs no signature
    if (why := job_refusal(row)) is not None:
        return why
    assert row.public_key is not None  # job_refusal says so otherwise
    if verify_fingerprint(row.public_key, signature, worker=row.name, competition=ctx.competition.name, fingerprint=stated):
        return None
    return "fingerprint statement refused: not signed by this worker's registered key over its name, the competition and the fingerprint"


def _conflict(what: str, named: str, bound: str | None) -> str:
    """The one line a statement or claim naming ``named`` is refused with, ``bound`` being bound."""
    return f"the {what}'s fingerprint {named[:12]} is not the one bound to this worker ({(bound or '-')[:12]}): refused and logged; {RESET}"


def for_claim(ctx: ServerContext, worker: Principal, named: str) -> str:
    """The digest bound to ``worker``, under which its claim leases, once the claim named it; else :class:`FingerprintRefused` (CONFLICT).

    The lease is taken under the server's stored digest, never the body's: they are equal here, and the check is one read.
    A claim of a worker with none bound is told to state it (:data:`~grader.hosting.protocol.messages.UNBOUND`): after a
    host's reset, the worker states it again. A claim naming another is counted on the row.
    """
    with ctx.db.session() as session:
        row = session.get(Worker, worker.id)
        assert row is not None
        bound = row.fingerprint
        if bound is not None and bound == named:
            return bound
        if bound is not None:
            worker_fingerprints.note_refusal(session, row.id, named)
    why = UNBOUND if bound is None else _conflict("claim", named, bound)
    log.warning("worker %s: claim refused: %s", worker.name, why)
    raise FingerprintRefused(why, Refusal.CONFLICT)


def reset(db: Database, name: str) -> str | None:
    """The host's reset (``grader admin reset-fingerprint NAME``): the digest that was bound, None when none was."""
    with db.session() as session:
        was = worker_fingerprints.reset(session, name)
    log.warning("worker %s: fingerprint binding reset by the host (was %s)", name, (was or "none")[:12])
    return was
