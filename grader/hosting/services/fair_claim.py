"""Claims of a worker of many competitions: each competition it names, tried in a fair order (docs/hosting.md, "Workers of many competitions").

Each competition keeps its queue in its own database, and its own claim service decides which of its jobs a worker
gets (:func:`grader.hosting.services.jobs.claim_once`: a replica first, then the oldest queued). What is decided
here is only which competition is asked first.

The policy is a round robin over competitions, kept by the server (:class:`RoundRobin`): a look asks the named
competitions in name order, starting after the competition whose job this server handed out last, and the first
that has a job for the worker gives it. So a competition with claimable work waits, from the moment its job is
queued, for at most one job of each other competition before its own is handed out: a flood of submissions to
one competition delays another's next grade by about one grade per competition, never by the flood.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from grader.hosting.context import ServerContext
from grader.hosting.errors import HostingError
from grader.hosting.identity.auth import by_token
from grader.hosting.identity.principal import Principal, Role
from grader.hosting.protocol.messages import Job
from grader.hosting.services import fingerprints, jobs
from grader.hosting.services.jobs import Empty


class SeatRefused(HostingError):
    """A claim refused in one of the competitions it names: ``status`` is the HTTP status, the message names the competition."""

    def __init__(self, message: str, status: int, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


@dataclass(frozen=True)
class Seat:
    """One competition as one claim sees it: its context, the worker as that competition knows it, the fingerprint bound there."""

    name: str
    ctx: ServerContext
    worker: Principal
    digest: str


def seat(name: str, ctx: ServerContext, token: str, named: str, bucket: str) -> Seat:
    """The worker holding ``token`` in competition ``name``, which may claim there under the fingerprint ``named``.

    The same checks, in the same order, as the competition's own claim route: the token (each competition keeps
    its workers: the host registers a worker in each competition it serves, with the same token), then whether
    the worker may take jobs (a remote worker's key), then the fingerprint bound to it there. A failed token counts
    in the competition's limiter under ``bucket`` (the caller's address), as on its own routes.
    """
    worker = by_token(ctx.db, Role.WORKER, token) if token else None
    if worker is None:
        failures = f"{Role.WORKER.value} {bucket}"
        wait = ctx.limiter.blocked_for(failures)
        if wait > 0:
            raise SeatRefused(f"too many failed sign-ins from this address; try again in {wait:.0f} s", 429, int(wait) + 1)
        ctx.limiter.failed(failures)
        raise SeatRefused(
            f"competition {name}: missing, unknown or revoked token (the host registers this worker in each competition it serves)", 401
        )
    if (why := jobs.refusal(ctx, worker)) is not None:
        raise SeatRefused(f"competition {name}: {why}", 403)
    try:
        digest = fingerprints.for_claim(ctx, worker, named)
    except fingerprints.FingerprintRefused as refused:
        raise SeatRefused(f"competition {name}: {refused}", refused.refusal.value) from None
    return Seat(name, ctx, worker, digest)


class RoundRobin:
    """The server's turn over competitions: which competition a look asks first (see the module's docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: the competition whose job this server handed out last (None before the first)
        self._last: str | None = None

    def order(self, names: list[str]) -> list[str]:
        """``names`` in the order a look asks them: name order, starting after the competition served last."""
        ordered = sorted(names)
        with self._lock:
            last = self._last
        if last is None:
            return ordered
        return [n for n in ordered if n > last] + [n for n in ordered if n <= last]

    def served(self, name: str) -> None:
        """A job of ``name`` was handed out: the next look asks the competitions after it first."""
        with self._lock:
            self._last = name


def look(seats: list[Seat], turn: RoundRobin) -> Job | Empty:
    """One look at each named competition's queue in ``turn``'s order: the first job leased to the worker, or why none.

    :data:`Empty.END` when a competition has a shard job free for the worker (it takes those first, at that
    competition's routes), :data:`Empty.WAIT` otherwise. Several workers' looks may run at once: each claim
    is its competition's own transaction, so they take different jobs; the turn is a hint of order, not a lock.
    """
    by_name = {s.name: s for s in seats}
    ended = False
    for name in turn.order(list(by_name)):
        chosen = by_name[name]
        found = jobs.claim_once(chosen.ctx, chosen.worker, chosen.digest)
        if isinstance(found, Job):
            turn.served(name)
            return found
        ended = ended or found is Empty.END
    return Empty.END if ended else Empty.WAIT
