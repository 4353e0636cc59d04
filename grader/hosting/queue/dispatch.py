"""Dispatch: telling workers that a committed job is waiting.

The database is the queue; a dispatch is only a wake-up call, sent after the
commit that made the job claimable. A lost dispatch costs latency, never a
submission: the reaper re-dispatches jobs that wait unclaimed too long. A
broker-backed dispatcher (Celery) implements the same protocol.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Protocol


class Dispatcher(Protocol):
    """Wakes workers for a job that is already committed as ``queued``, and lets this server's long-polls wait for one.

    The one interface of a dispatcher: the lifecycle dispatches, the claim routes wait, the
    server closes it. :class:`LocalDispatcher` and the Celery one implement it.
    """

    def dispatch(self, submission_id: str) -> None:
        """Wake workers for ``submission_id`` (already committed as queued)."""

    def generation(self) -> int:
        """A counter that changes on every dispatch (read it before looking for work)."""

    async def wait_async(self, seen: int, timeout: float) -> None:
        """Wait, holding no thread, until a dispatch newer than ``seen`` or ``timeout`` seconds (the claim routes' long-polls)."""

    def broker_counts(self) -> tuple[int, int] | None:
        """``(published, failed)`` broker wake-ups since the start; ``None`` without a broker (the metrics page shows them)."""

    def close(self) -> None:
        """Release what the dispatcher holds (a publisher thread, a broker connection); called once, at shutdown."""


class LocalDispatcher:
    """Wakes the long-polling ``claim`` requests of this server's workers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = 0
        #: The event-loop long-polls waiting now (:meth:`wait_async`), each woken through its own loop: a dispatch
        #: comes from a thread (an upload's, the reaper's). As many as long-polls wait, which the claim routes bound.
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    def dispatch(self, submission_id: str) -> None:
        """Wake every long-poll waiting on this server."""
        with self._lock:
            self._generation += 1
            waiters = list(self._waiters)
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop is closed: its long-poll is gone with it
                pass

    def generation(self) -> int:
        """A counter that changes on every dispatch (read it before looking for work)."""
        with self._lock:
            return self._generation

    def broker_counts(self) -> None:
        """No broker: nothing published."""
        return None

    def close(self) -> None:
        """Nothing to release: long-polls end with their requests."""

    async def wait_async(self, seen: int, timeout: float) -> None:
        """Wait, holding no thread, until a dispatch newer than ``seen`` or ``timeout`` seconds (the claim routes' long-polls)."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:  # held for a moment only (a dispatch's increment): never long enough to stall the event loop
            if self._generation != seen:
                return
            self._waiters.add(waiter)
        try:
            await asyncio.wait_for(waiter[1].wait(), timeout)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                self._waiters.discard(waiter)
