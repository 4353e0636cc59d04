"""The listing of a server of many competitions keeps each end for a moment (grader/hosting/services/listing.py).

``/`` would otherwise read every competition's database on every request; an early end still reaches it within
``END_TTL_S``.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from grader.hosting.clock import utcnow
from grader.hosting.config import load_competition
from grader.hosting.db.models import Setting
from grader.hosting.db.session import open_database
from grader.hosting.schedule import ENDED_AT_KEY
from grader.hosting.services.listing import END_TTL_S, ListedEnds, listing
from tests.hosting.support import write_competition


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def served(tmp_path: Path, name: str) -> Any:
    """What the listing reads of a served competition: its file and its database."""
    competition = load_competition(write_competition(tmp_path / f"{name}.toml", name=name))
    return SimpleNamespace(competition=competition, db=open_database(tmp_path / name))


def test_an_early_end_reaches_the_listing_within_the_ttl(tmp_path: Path) -> None:
    alpha, beta = served(tmp_path, "alpha"), served(tmp_path, "beta")
    clock = Clock()
    ends = ListedEnds(clock=clock)
    first = listing([alpha, beta], ends=ends)
    assert [(e["name"], e["status"]) for e in first] == [("alpha", "open"), ("beta", "open")]
    early = utcnow() - timedelta(minutes=1)
    with alpha.db.session() as session:  # grader admin end, from another process
        session.add(Setting(key=ENDED_AT_KEY, value=early.isoformat()))
    clock.now += END_TTL_S / 2
    assert listing([alpha, beta], ends=ends) == first  # as read a moment ago: no database read
    clock.now += END_TTL_S
    again = {e["name"]: e for e in listing([alpha, beta], ends=ends)}
    assert again["alpha"]["status"] == "ended" and again["alpha"]["end"].startswith(early.strftime("%Y-%m-%dT%H:%M"))
    assert again["beta"]["status"] == "open"
    # without the listing's reads (one competition's own pages), the end is read each time
    assert listing([alpha])[0]["status"] == "ended"
    # a competition no longer served is forgotten
    listing([beta], ends=ends)
    assert set(ends._read) == {"beta"}
    for ctx in (alpha, beta):
        ctx.db.dispose()
