"""Rate limiting of failed authentication, per bucket (a role and a client address; in memory: one server process).

An IPv6 client is bucketed by its /64: one host (or one customer of a provider) usually holds a whole /64 and may
use any of its 2^64 addresses, so per address it would never be limited. The table is capped
(:data:`MAX_BUCKETS`): a spray of addresses evicts the buckets whose last failure is oldest, not the server's memory.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections import deque

#: The most buckets held; past it the buckets whose last failure is oldest are dropped (a tenth at a time).
MAX_BUCKETS = 10_000


def client_bucket(host: str) -> str:
    """The limiter's key of a client address: an IPv6 address's /64, an IPv4 one (mapped into IPv6 too) as itself;
    anything else (no address, a test client's name) as given."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # a zone index (fe80::1%eth0) names no other host
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class FailureLimiter:
    """After ``max_failures`` failed attempts within ``window_s`` seconds, a bucket is refused until they age out."""

    def __init__(self, max_failures: int = 10, window_s: float = 60.0, max_buckets: int = MAX_BUCKETS) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.max_buckets = max_buckets
        #: bucket -> its failures' times, in the order of each bucket's last failure (oldest first)
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, failures: deque[float], now: float) -> deque[float]:
        while failures and failures[0] < now - self.window_s:
            failures.popleft()
        return failures

    def blocked_for(self, bucket: str) -> float:
        """Seconds until ``bucket`` may try again (0 when it may now)."""
        now = time.monotonic()
        with self._lock:
            failures = self._recent(self._failures.get(bucket, deque()), now)
            if len(failures) < self.max_failures:
                return 0.0
            return max(0.0, failures[len(failures) - self.max_failures] + self.window_s - now)

    def failed(self, bucket: str) -> None:
        """Record one failed authentication."""
        now = time.monotonic()
        with self._lock:
            failures = self._recent(self._failures.pop(bucket, deque()), now)
            failures.append(now)
            self._failures[bucket] = failures  # re-inserted: the dict's order is that of the last failures
            if len(self._failures) > self.max_buckets:
                self._evict(now)

    def _evict(self, now: float) -> None:
        """Drop the buckets whose failures all aged out, then, while still over a tenth below the cap, the buckets whose
        last failure is oldest (a tenth at a time, so that a spray does not pay a full walk per failure)."""
        self._failures = {bucket: failures for bucket, failures in self._failures.items() if self._recent(failures, now)}
        excess = len(self._failures) - self.max_buckets + self.max_buckets // 10
        for bucket in list(self._failures)[: max(0, excess)]:
            del self._failures[bucket]

    def __len__(self) -> int:
        """How many buckets are held."""
        return len(self._failures)
