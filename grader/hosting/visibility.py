"""Who may see what, and from when: the visibility rules of a hosted competition, in one place.

- The competition ends at the file's ``end`` or earlier, when the host ends it (``grader admin end``).
- The public board is visible always; the private board from the end on (the host sees both at any time
  through ``grader admin leaderboard``, never over HTTP).
- A participant downloads their own reports: a sample-split run's full report at once; of a hidden-split
  grade, the public-part report (signed by the host) until the end, and only of a scored grade, and never in
  Ladder mode (its finer numbers would undo the Ladder); the full report from the end on.
- Container logs are shown of sample-split runs only, never of hidden grades (they could carry hidden data).

The routes, the pages, the submission view and the board's report links all ask these functions, so they
cannot disagree. The module decides and writes nothing; it reads one fact, the host's early end.
"""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import select

from grader.hosting.clock import utcnow
from grader.hosting.config import Competition
from grader.hosting.db.models import Setting
from grader.hosting.db.session import Database

#: Settings key of the moment the host ended the competition early.
ENDED_AT_KEY = "ended_at"
BOARD_PARTS = ("public", "private")


class Download(enum.Enum):
    """Which signed report a participant may download of one of their submissions."""

    NONE = "none"
    #: the public-part report, signed by the host on the server (a hidden grade before the end)
    PUBLIC_PART = "public-part"
    #: the full report as graded (a sample run at once, a hidden grade after the end)
    FULL = "full"


def ends_at(db: Database, competition: Competition) -> datetime:
    """The competition's end: the file's, or earlier if the host ended it."""
    with db.session() as session:
        ended = session.scalar(select(Setting.value).where(Setting.key == ENDED_AT_KEY))
    return competition.end if ended is None else min(competition.end, datetime.fromisoformat(ended))


def has_ended(db: Database, competition: Competition) -> bool:
    """Whether the competition has ended (the private board and full reports are public from then on)."""
    return utcnow() >= ends_at(db, competition)


def board_visible(part: str, *, ended: bool) -> bool:
    """Whether anyone may see the board of ``part``: the public one always, the private one from the end on."""
    return part == "public" or (part == "private" and ended)


def report_download(*, track: str, result_state: str | None, ended: bool, ladder: bool) -> Download:
    """Which report of a submission its participant may download.

    ``result_state`` is the state of the submission's current result (``scored``, ``failed``), None when it
    has no result with a signed report.
    """
    if result_state is None:
        return Download.NONE
    if track != "hidden" or ended:
        return Download.FULL
    if result_state != "scored" or ladder:
        return Download.NONE
    return Download.PUBLIC_PART


def logs_visible(track: str) -> bool:
    """Whether a submission's container logs may be shown to its participant (sample-split runs only)."""
    return track == "sample"
