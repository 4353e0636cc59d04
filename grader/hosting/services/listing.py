"""What ``/`` and ``GET /api/v1/competitions`` publish of a server's competitions: name, title, dates, status."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from grader.hosting.clock import iso, utcnow
from grader.hosting.context import ServerContext
from grader.hosting.services.competition import competition_end

#: The order of the listing: what a visitor can still take part in first.
_ORDER = {"open": 0, "upcoming": 1, "ended": 2}


def competition_entry(ctx: ServerContext, *, base: str = "") -> dict[str, Any]:
    """One competition as the listing shows it (its end as held: an end that came stays, whatever the file says now)."""
    c = ctx.competition
    end = competition_end(ctx)
    status = "ended" if end.ended else ("upcoming" if utcnow() < c.start else "open")
    return {
        "name": c.name,
        "title": c.title or c.name,
        "status": status,
        "start": iso(c.start),
        "end": iso(end.at),
        "page": f"{base}/c/{c.name}/",
        "api": f"{base}/api/v1/competitions/{c.name}/",
    }


def listing(contexts: Iterable[ServerContext], *, base: str = "") -> list[dict[str, Any]]:
    """Every competition of the server: open ones first, then upcoming, then ended; by start, then name."""
    entries = [competition_entry(ctx, base=base) for ctx in contexts]
    return sorted(entries, key=lambda e: (_ORDER[e["status"]], e["start"] or "", e["name"]))
