"""The leaderboard's caches, sized per competition and bounded overall.

A server of many competitions serves each from one process: a cache sized for one competition and shared by all of
them (cleared whole when full, as the first ones were) would let twenty boards evict each other's verified reports
and statistics on every request. Each cache here keeps its entries per competition, least recently used first out,
at most ``per_competition`` of them; all competitions together hold at most ``overall``, the least recently read
competition giving way first. A competition is named by its host public key (each competition has its own).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def competition_of(public_key: Ed25519PublicKey) -> bytes:
    """The name a cache files a competition's entries under: its host public key's bytes."""
    return public_key.public_bytes_raw()


class CompetitionCache(Generic[K, V]):
    """A least-recently-used cache per competition, bounded per competition and overall; safe across threads."""

    def __init__(self, per_competition: int, overall: int) -> None:
        assert 0 < per_competition <= overall, (per_competition, overall)
        self.per_competition, self.overall = per_competition, overall
        self._lock = threading.Lock()
        # competitions in the order they were last read (the first gives way first), each its entries in that order
        self._by: OrderedDict[bytes, OrderedDict[K, V]] = OrderedDict()
        self._count = 0

    def get(self, competition: bytes, key: K) -> V | None:
        """The entry ``key`` of ``competition`` (now its most recently used), or None."""
        with self._lock:
            own = self._by.get(competition)
            if own is None or key not in own:
                return None
            self._by.move_to_end(competition)
            own.move_to_end(key)
            return own[key]

    def put(self, competition: bytes, key: K, value: V) -> None:
        """Keep ``value`` as ``competition``'s entry ``key``, evicting its own oldest beyond ``per_competition`` and the
        least recently read competition's oldest beyond ``overall``."""
        with self._lock:
            own = self._by.setdefault(competition, OrderedDict())
            self._by.move_to_end(competition)
            if key not in own:
                self._count += 1
            own[key] = value
            own.move_to_end(key)
            while len(own) > self.per_competition:
                own.popitem(last=False)
                self._count -= 1
            while self._count > self.overall:
                oldest, entries = next(iter(self._by.items()))
                entries.popitem(last=False)
                self._count -= 1
                if not entries:
                    del self._by[oldest]

    def sizes(self) -> dict[bytes, int]:
        """How many entries each competition holds now."""
        with self._lock:
            return {competition: len(entries) for competition, entries in self._by.items()}

    def __len__(self) -> int:
        with self._lock:
            return self._count

    def clear(self) -> None:
        with self._lock:
            self._by.clear()
            self._count = 0
