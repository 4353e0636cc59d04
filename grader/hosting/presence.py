"""Which workers this server process heard from lately: the workers a waiting grade can count on.

A worker is *present* while it claims (a long-poll look) or renews a lease (a heartbeat) at least every
:data:`PRESENT_S` seconds; an honest worker does one or the other every few seconds. Kept in memory, per
server process (one process serves a competition's workers, as its long-polls assume): nothing to store,
and a restart forgets only for a few seconds. Thread-safe: looks and heartbeats run in threads.
"""

from __future__ import annotations

import threading
import time

#: Seconds after its last claim or heartbeat a worker still counts as connected (a claim waits up to 30 s).
PRESENT_S = 45.0


class Presence:
    """The moment each worker (its row id) was last heard from, bounded by the competition's workers."""

    def __init__(self, present_s: float = PRESENT_S) -> None:
        self.present_s = present_s
        self._lock = threading.Lock()
        self._seen: dict[int, float] = {}

    def seen(self, worker_id: int) -> None:
        """``worker_id`` claimed or renewed a lease now."""
        with self._lock:
            self._seen[worker_id] = time.monotonic()

    def present(self) -> set[int]:
        """The workers heard from within :attr:`present_s` (those heard from before are forgotten)."""
        now = time.monotonic()
        with self._lock:
            for worker_id in [w for w, at in self._seen.items() if now - at > self.present_s]:
                del self._seen[worker_id]
            return set(self._seen)
