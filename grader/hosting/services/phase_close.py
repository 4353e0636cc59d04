"""When a phase of a competition closes (not its last: that one's end is the competition's): its ``phase_end`` entry in
the transparency log, then, once none of its grades is in flight, its ``phase_board`` entry (docs/hosting.md#phases).

The end of a phase is logged by the first server pass after the phase's ``end`` (with that time, as the competition's
``end`` is), before the competition's own end, once; from then on the phase stays closed: a server whose file now says
it is open (its ``end`` moved later, or the phase gone) refuses to start (:func:`reopened_phase`), as it does for
the competition's end.

A closed phase's board is final once its grades in flight finish, as the competition's reveal waits for them: then its
public and private boards' digests are logged, as ``/api/v1/leaderboard?phase=NAME&part=...`` will serve them after
the competition's end. Its keys are not revealed: one partition secret and one identifier key serve every phase (the
phases' splits are the competition's or its sample split, partitioned by that secret), so opening them when an early
phase closes would tell everyone which queries of the next phases are private and open every pseudonym of a log still
taking entries. They are revealed once, at the competition's reveal, which then lets anyone check each phase's digests.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from grader.hosting.clock import iso, utcnow
from grader.hosting.config import Competition, Phase
from grader.hosting.context import ServerContext
from grader.hosting.db.models import IN_FLIGHT_STATES, LogEntry, Submission
from grader.hosting.db.session import Database
from grader.hosting.schedule import ends_at
from grader.hosting.states import Track
from grader.hosting.transparency.host_log import HostLog
from grader.hosting.transparency.log_store import append_entry, lock_head, reveal_index
from grader.transparency import entries

log = logging.getLogger(__name__)


def _logged(session: Session, kind: str) -> dict[str, tuple[int, datetime]]:
    """Each phase's entry of ``kind`` in the log: its index and time, by the phase's name."""
    found: dict[str, tuple[int, datetime]] = {}
    for index, data in session.execute(select(LogEntry.index, LogEntry.entry).where(LogEntry.kind == kind).order_by(LogEntry.index)):
        entry = entries.decode_entry(bytes(data))
        found.setdefault(str(entry["phase"]), (int(index), entries.parse_time(str(entry["time"]))))
    return found


def _has_ended(session: Session) -> bool:
    return bool(session.scalar(select(func.count()).select_from(LogEntry).where(LogEntry.kind == "end")))


def phase_in_flight(session: Session, phase: Phase) -> int:
    """How many hidden-track submissions uploaded within ``phase``'s window are still queued or being graded."""
    query = (
        select(func.count())
        .select_from(Submission)
        .where(Submission.track == Track.HIDDEN, Submission.state.in_(IN_FLIGHT_STATES), Submission.uploaded_at >= phase.start)
    )
    if phase.end is not None:
        query = query.where(Submission.uploaded_at < phase.end)
    return int(session.scalar(query) or 0)


def _closing(competition: Competition, end: datetime | None, now: datetime) -> list[Phase]:
    """The phases before the last whose end has come by ``now`` and is no later than the competition's ``end`` (an
    early end by the host ends them all: its ``end`` entry says so)."""
    return [phase for phase in competition.phases[:-1] if phase.end is not None and phase.end <= now and (end is None or phase.end <= end)]


def log_phase_ends_if_due(db: Database, host_log: HostLog, competition: Competition) -> list[str]:
    """The ``phase_end`` entry of every phase (not the last) whose end has come, once each, in the phases' order, and
    never after the competition's end entry; the names of those this call logged."""
    closing = _closing(competition, ends_at(db, competition), utcnow())
    if not closing:
        return []
    with db.session() as session:  # read first: no lock taken on every pass once they are logged
        if _has_ended(session) or not [p for p in closing if p.name not in _logged(session, "phase_end")]:
            return []
    with db.session() as session:
        lock_head(session)
        if _has_ended(session):
            return []
        logged = _logged(session, "phase_end")
        made = [phase.name for phase in closing if phase.name not in logged]
        for name in made:
            phase = competition.phase_named(name)
            assert phase is not None and phase.end is not None
            append_entry(session, host_log, entries.phase_end_entry(time=phase.end, phase=name))
    for name in made:
        log.info("transparency log: phase %r closed (its end logged)", name)
    return made


def log_phase_boards_when_due(ctx: ServerContext) -> list[str]:
    """The ``phase_board`` entry of every closed phase whose grades have all finished, once each; the names logged."""
    host_log = ctx.log
    if host_log is None or not ctx.competition.phases:
        return []
    with ctx.db.session() as session:
        if reveal_index(session) is not None:
            return []  # the log takes nothing more (the host logged the reveal by hand first): the reveal's boards stand
        ended, boards = _logged(session, "phase_end"), _logged(session, "phase_board")
        due = [
            phase for phase in ctx.competition.phases[:-1] if phase.name in ended and phase.name not in boards and not phase_in_flight(session, phase)
        ]
    made = [phase.name for phase in due if _log_phase_board(ctx, host_log, phase)]
    for name in made:
        log.info("transparency log: phase %r's final boards logged", name)
    return made


def _log_phase_board(ctx: ServerContext, host_log: HostLog, phase: Phase) -> bool:
    from grader.hosting.leaderboard.host_view import board_sha256  # the boards' statistics: only this pass pays for them

    digests = {part: board_sha256(ctx.state.root, ctx.db, ctx.competition, part, phase=phase) for part in ("public", "private")}
    with ctx.db.session() as session:
        lock_head(session)
        if phase.name in _logged(session, "phase_board") or phase_in_flight(session, phase):
            return False  # another server process logged it, or a rejudge queued one of its grades meanwhile
        entry = entries.phase_board_entry(
            time=utcnow(), phase=phase.name, public_board_sha256=digests["public"], private_board_sha256=digests["private"]
        )
        append_entry(session, host_log, entry)
    return True


def reopened_phase(db: Database, competition: Competition) -> str | None:
    """Before serving: the one line refusing a competition file under which a phase whose end the log holds would be
    open again (its ``end`` moved later, taken out, or the phase renamed away), or None: a closed phase's board is final."""
    now = utcnow()
    with db.session() as session:
        logged = _logged(session, "phase_end")
    for name, (index, at) in logged.items():
        phase = competition.phase_named(name)
        if phase is None or phase.end is None or phase.end > now:
            said = "has no such phase" if phase is None else f"now says it ends at {iso(phase.end) or 'never'}"
            return (
                f"the log holds the end of phase {name!r} at {iso(at)} (entry {index}), but the competition file {said}: "
                f"a closed phase stays closed (its board is final); set its `end` back to {iso(at)}, or open a new competition"
            )
    return None
