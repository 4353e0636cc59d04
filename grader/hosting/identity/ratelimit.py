"""Rate limiting of failed authentication, per bucket (a role and a client address; in memory: one server process)."""

from __future__ import annotations

import threading
import time
from collections import deque


class FailureLimiter:
    """After ``max_failures`` failed attempts within ``window_s`` seconds, an address is refused until they age out."""

    def __init__(self, max_failures: int = 10, window_s: float = 60.0) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, address: str, now: float) -> deque[float]:
        failures = self._failures.setdefault(address, deque())
        while failures and failures[0] < now - self.window_s:
            failures.popleft()
        return failures

    def blocked_for(self, address: str) -> float:
        """Seconds until ``address`` may try again (0 when it may now)."""
        now = time.monotonic()
        with self._lock:
            failures = self._recent(address, now)
            if len(failures) < self.max_failures:
                return 0.0
            return max(0.0, failures[len(failures) - self.max_failures] + self.window_s - now)

    def failed(self, address: str) -> None:
        """Record one failed authentication."""
        now = time.monotonic()
        with self._lock:
            self._recent(address, now).append(now)
            if len(self._failures) > 10_000:  # bound memory under a spray of addresses
                self._failures = {a: d for a, d in self._failures.items() if d}
