"""Claim long-polls that hold no thread while they wait, and a bound on each worker's claims in progress.

A claim waits up to 30 s for a job. Run whole in the server's thread pool (anyio's default: 40 threads, which
every sync route and database call of the server shares), 40 waiting claims left ``/healthz``, the board and
every other route queued behind them. Here a long-poll is a coroutine: each look at the database (a short
service call) runs in one of a few threads of its own (:data:`LOOK_THREADS`, never the shared pool's), and
between looks it waits on the event loop for a dispatch (:meth:`Dispatcher.wait_async`) or at most
:data:`POLL_S`. The database stays the queue: the poll finds jobs that another server process on the same
database queued, which no dispatch of this one announces.

Each worker may have :data:`CLAIMS_PER_WORKER` claims in progress on a server process; one more is answered
429 at once with ``Retry-After`` (when its oldest claim ends at the latest). Refused rather than queued: a
queued claim would hold a connection and a task just the same, and need a bound of its own. A worker
(``grader worker``, local or remote, or a Celery one) makes one claim at a time, so an honest one holds one,
two for the moment a claim whose connection it dropped takes to be noticed (before its next look).
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from typing import Annotated, Protocol, TypeVar

import anyio
import anyio.to_thread
from fastapi import Depends, HTTPException, Request

from grader.hosting.queue.dispatch import Dispatcher
from grader.hosting.services.jobs import POLL_S, Empty

#: Threads that the looks of all long-polls of one server process share: a look is a few short transactions, so
#: a few threads serve many long-polls, and they bound the database load that waiting claims make.
LOOK_THREADS = 4
#: Claims (``/claim`` and ``/shards/claim`` together) one worker may have in progress on one server process.
CLAIMS_PER_WORKER = 4
#: Threads the looks of every ``/me`` watch of a competition share, and the watches one participant may have at once.
WATCH_THREADS = 2
WATCHES_PER_PARTICIPANT = 4

Found = TypeVar("Found")


class ClaimGate:
    """The long-polls of one server process: the threads their looks share, and each worker's claims in progress.

    Used on the event loop only (the claim routes are coroutines), so its counts need no lock.
    """

    def __init__(self, look_threads: int = LOOK_THREADS, per_worker: int = CLAIMS_PER_WORKER) -> None:
        self.looks = anyio.CapacityLimiter(look_threads)
        self.per_worker = per_worker
        #: worker (its row id; on the server's claim of many competitions, its token's digest) -> the deadlines of its
        #: claims in progress (an entry only while it has one: bounded by the workers)
        self._claims: dict[Hashable, list[float]] = {}

    def in_progress(self, worker_id: Hashable) -> int:
        """How many claims of ``worker_id`` are in progress on this server process."""
        return len(self._claims.get(worker_id, ()))

    @contextmanager
    def admit(self, worker_id: Hashable, wait_s: float, *, refusal: str | None = None) -> Iterator[None]:
        """Hold one of ``worker_id``'s claim places while its long-poll runs; 429 with ``Retry-After`` when all are held
        (``refusal``: the words of that 429, when the long-poll is not a worker's claim)."""
        now = time.monotonic()
        held = self._claims.get(worker_id, [])
        if len(held) >= self.per_worker:
            retry = max(1, math.ceil(min(held) - now))
            raise HTTPException(
                429,
                refusal or f"this worker has {len(held)} claims in progress, the most one worker may: claim again when one has ended",
                headers={"Retry-After": str(retry)},
            )
        deadline = now + wait_s
        self._claims[worker_id] = [*held, deadline]
        try:
            yield
        finally:
            left = self._claims[worker_id]
            left.remove(deadline)
            if not left:
                del self._claims[worker_id]


class Wakes(Protocol):
    """What a long-poll waits on between looks: a :class:`Dispatcher`, or :class:`AnyOf` several."""

    def generation(self) -> int:
        """A counter that changes on every dispatch (read before a look)."""

    async def wait_async(self, seen: int, timeout: float) -> None:
        """Wait, holding no thread, until a dispatch newer than ``seen`` or ``timeout`` seconds."""


class AnyOf:
    """The dispatchers of several competitions as one long-poll waits on them: a dispatch of any wakes it.

    Their waits are tasks on the event loop, never threads: a claim naming twenty competitions holds no thread
    while it waits, as a claim of one does.
    """

    def __init__(self, dispatchers: Iterable[Dispatcher]) -> None:
        self.dispatchers = list(dispatchers)

    def generation(self) -> int:
        """The sum of the dispatchers' counters: each only grows, so the sum changes on a dispatch of any."""
        return sum(d.generation() for d in self.dispatchers)

    async def wait_async(self, seen: int, timeout: float) -> None:
        """Wait until a dispatch of any dispatcher newer than ``seen`` (a :meth:`generation`), or ``timeout`` seconds."""
        each = [d.generation() for d in self.dispatchers]
        if sum(each) != seen:
            return
        async with anyio.create_task_group() as group:

            async def one(dispatcher: Dispatcher, generation: int) -> None:
                await dispatcher.wait_async(generation, timeout)
                group.cancel_scope.cancel()  # the first to wake (or time out) ends the others' waits

            for dispatcher, generation in zip(self.dispatchers, each, strict=True):
                group.start_soon(one, dispatcher, generation)


async def long_poll(request: Request, gate: ClaimGate, dispatcher: Wakes, wait_s: float, look: Callable[[], Found | Empty]) -> Found | None:
    """Look with ``look`` until it leases something or says to stop, for up to ``wait_s`` in all; None when nothing came.

    Each look runs in one of the gate's threads; between looks the long-poll holds no thread, and ends as soon
    as its client goes away. The client is asked for again before each look, so a long-poll nobody waits for
    any more takes no job (a lease taken by a look already running when the client leaves is lost as a lost
    worker's is: it expires and the reaper re-queues the job).
    """
    deadline = time.monotonic() + wait_s
    while True:
        if await request.is_disconnected():
            return None
        seen = dispatcher.generation()  # before the look: a dispatch during it wakes the wait that follows
        found = await anyio.to_thread.run_sync(look, limiter=gate.looks)
        if not isinstance(found, Empty):
            return found
        left = deadline - time.monotonic()
        if found is Empty.END or left <= 0:
            return None
        if await _client_left_during(request, dispatcher.wait_async(seen, min(left, POLL_S))):
            return None


#: Seconds between two looks of a page's watch (:func:`watch`); a dispatch of the competition wakes it sooner.
WATCH_LOOK_S = 2.0


async def watch(
    request: Request, gate: ClaimGate, dispatcher: Wakes, wait_s: float, look: Callable[[], Found], changed: Callable[[Found], bool]
) -> Found:
    """Look with ``look`` until what it finds ``changed`` (or ``wait_s`` passed, or the client left): the last thing found.

    The long-poll of a page that follows its grades (``/me``): like :func:`long_poll`, each look runs in one of the
    gate's threads and between looks the watch holds no thread; it looks every :data:`WATCH_LOOK_S` at most, or at a
    dispatch of the competition (a grade queued), so a watcher costs a few short reads a minute.
    """
    deadline = time.monotonic() + wait_s
    while True:
        seen = dispatcher.generation()
        found = await anyio.to_thread.run_sync(look, limiter=gate.looks)
        left = deadline - time.monotonic()
        if changed(found) or left <= 0:
            return found
        if await _client_left_during(request, dispatcher.wait_async(seen, min(left, WATCH_LOOK_S))):
            return found


async def _client_left_during(request: Request, wait: Awaitable[None]) -> bool:
    """Await ``wait`` (a dispatch or a timeout), cut short if the client goes away meanwhile; whether it went away.

    The claim's body was read whole, so what the server can receive from the client now is its disconnect: its
    claim place is freed at once, not at the next look.
    """
    left = False
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            nonlocal left
            if (await request.receive())["type"] == "http.disconnect":
                left = True
                group.cancel_scope.cancel()

        group.start_soon(watch)
        await wait
        group.cancel_scope.cancel()
    return left


def claim_gate(request: Request) -> ClaimGate:
    """The server process's :class:`ClaimGate` (made with its app)."""
    return request.app.state.claim_gate  # type: ignore[no-any-return]


#: A route parameter annotated ``Gate`` receives the server process's claim gate.
Gate = Annotated[ClaimGate, Depends(claim_gate)]
