"""What ``/`` and ``GET /api/v1/competitions`` publish of a server's competitions: name, title, dates, status."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from grader.hosting.clock import iso, utcnow
from grader.hosting.context import ServerContext
from grader.hosting.schedule import ends_at, passed

#: The order of the listing: what a visitor can still take part in first.
_ORDER = {"open": 0, "standing": 0, "upcoming": 1, "ended": 2}
#: Seconds the listing keeps each competition's end as last read. Without it, every ``/`` reads every competition's
#: database (twenty competitions: twenty transactions per request). An early end (``grader admin end``) reaches the
#: listing within this time; each competition's own pages and API read the end per request, as before.
END_TTL_S = 2.0


class ListedEnds:
    """Each competition's end (``schedule.ends_at``), read again once it is older than ``ttl_s``; safe across threads."""

    def __init__(self, ttl_s: float = END_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s, self.clock = ttl_s, clock
        self._lock = threading.Lock()
        # by competition name: a server never reuses one
        self._read: dict[str, tuple[float, datetime | None]] = {}

    def at(self, ctx: ServerContext) -> datetime | None:
        """``ctx``'s end as read at most ``ttl_s`` ago."""
        now, name = self.clock(), ctx.competition.name
        with self._lock:
            found = self._read.get(name)
        if found is not None and now - found[0] < self.ttl_s:
            return found[1]
        at = ends_at(ctx.db, ctx.competition)
        with self._lock:
            self._read[name] = (now, at)
        return at

    def forget(self, keep: Iterable[ServerContext]) -> None:
        """Drop the ends of competitions no longer served (a retired one's)."""
        kept = {ctx.competition.name for ctx in keep}
        with self._lock:
            for key in set(self._read) - kept:
                del self._read[key]


def competition_entry(ctx: ServerContext, *, base: str = "", ends: ListedEnds | None = None) -> dict[str, Any]:
    """One competition as the listing shows it (its end as held: an end that came stays, whatever the file says now).

    ``ends``: the listing's recent reads of the ends (None: read the end now)."""
    c = ctx.competition
    at = ends.at(ctx) if ends is not None else ends_at(ctx.db, c)
    now = utcnow()
    # "standing": open for good, a leaderboard with no end (docs/hosting.md#standing-leaderboards)
    status = "ended" if passed(at, now) else ("upcoming" if now < c.start else ("standing" if at is None else "open"))
    return {
        "name": c.name,
        "title": c.title or c.name,
        "status": status,
        "start": iso(c.start),
        "end": iso(at),
        "page": f"{base}/c/{c.name}/",
        "api": f"{base}/api/v1/competitions/{c.name}/",
    }


def listing(contexts: Iterable[ServerContext], *, base: str = "", ends: ListedEnds | None = None) -> list[dict[str, Any]]:
    """Every competition of the server: open ones and standing boards first, then upcoming, then ended; by start, then name."""
    served = list(contexts)
    if ends is not None:
        ends.forget(served)
    entries = [competition_entry(ctx, base=base, ends=ends) for ctx in served]
    return sorted(entries, key=lambda e: (_ORDER[e["status"]], e["start"] or "", e["name"]))
