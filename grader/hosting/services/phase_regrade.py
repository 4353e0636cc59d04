"""When a phase opens, the previous phase's entries it takes over, graded again on its own split, not charged.

A phase with ``regrade = "best"`` (docs/hosting.md#phases) takes, once, each participant's best public entry of the
phase before it (their best-scored hidden submission of that phase's window, each training setting apart: as the
public board ranks), or with ``regrade = "chosen"`` the submissions each participant (or team) chose during that phase
(``grader finals ID``: the choices of a phase whose next one carries them), and grades each again as a submission of its own: the same upload, a new row, uploaded "now" (within
the new phase's window, so it is on the new phase's board), its receipt logged as any upload's. It costs the
participant nothing: its idempotency key marks it (``regrade:<source id>``), and the quotas leave such rows out.

As the reveal does, the selection waits until no submission of the previous phase is in flight (a grade finishing
late could be a participant's best), and it is done once: a settings row written in the same transaction as the rows
(two server processes on one database: the second's insert fails and it does nothing). A server that was down for the
whole of a phase's window does nothing for it (the phase is closed: its board is final).
"""

from __future__ import annotations

import itertools
import logging

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from grader.hosting.clock import utcnow
from grader.hosting.config import REGRADE_BEST, REGRADE_CHOSEN, Phase
from grader.hosting.context import ServerContext
from grader.hosting.db.models import FinalChoice, Setting, Submission
from grader.hosting.intake.quotas import REGRADE_KEY
from grader.hosting.intake.submission_rows import received_submission
from grader.hosting.leaderboard.board import SETTINGS, scored_rows, select_entries, setting_of
from grader.hosting.queue.lifecycle import enqueue, new_submission_id, record_received
from grader.hosting.services.phase_close import phase_in_flight
from grader.hosting.states import Track
from grader.hosting.transparency.log_events import log_receipt
from grader.hosting.visibility import Part

log = logging.getLogger(__name__)

#: What each kind of re-grade takes over, as the queue's reason and the server's log say it.
_WHAT = {REGRADE_BEST: "best entry", REGRADE_CHOSEN: "chosen submission"}

#: The settings row that says a phase's re-grades were made (the selection is done once).
_DONE_KEY = "regraded:{}"


def regrade_key(source_id: str) -> str:
    """The idempotency key that marks a re-grade of ``source_id`` (left out of every quota)."""
    return REGRADE_KEY + source_id


def _due(ctx: ServerContext) -> list[tuple[Phase, Phase]]:
    """The (previous, opened) phases whose re-grades are due now: open, asking for them, not yet made."""
    now = utcnow()
    phases = ctx.competition.phases
    return [
        (previous, phase) for previous, phase in itertools.pairwise(phases) if phase.regrade in (REGRADE_BEST, REGRADE_CHOSEN) and phase.holds(now)
    ]


def regrade_opened_phases(ctx: ServerContext) -> list[str]:
    """Make the re-grades of every phase that opened and asks for them (once each); the new submissions' ids, queued."""
    made: list[str] = []
    for previous, phase in _due(ctx):
        made += _regrade(ctx, previous, phase)
    return made


def _sources(session: Session, previous: Phase, phase: Phase) -> list[Submission]:
    """What ``phase`` takes over of ``previous``, in a fixed order: each row's best public entry per training setting
    (``best``), or the submissions each row chose during it (``chosen``; a team's, whichever member chose)."""
    if phase.regrade == REGRADE_CHOSEN:
        chosen = select(Submission).join(FinalChoice, FinalChoice.submission_id == Submission.id).where(Submission.track == Track.HIDDEN)
        return [s for s in session.scalars(chosen.order_by(Submission.id)).all() if previous.holds(s.uploaded_at)]
    rows = [r for r in scored_rows(session) if previous.holds(r.submission.uploaded_at)]
    best = [row for setting in SETTINGS for row in select_entries([r for r in rows if setting_of(r.submission.labels) == setting], Part.PUBLIC, {})]
    return [source for row in sorted(best, key=lambda r: r.submission.id) if (source := session.get(Submission, row.submission.id)) is not None]


def _regrade(ctx: ServerContext, previous: Phase, phase: Phase) -> list[str]:
    with ctx.db.session() as session:
        if session.get(Setting, _DONE_KEY.format(phase.name)) is not None:
            return []
        in_flight = phase_in_flight(session, previous)
    if in_flight:
        return []  # a grade of the previous phase still running may be someone's best: wait for it, as the reveal waits
    now = utcnow()
    made: list[str] = []
    try:
        with ctx.db.session() as session:
            session.add(Setting(key=_DONE_KEY.format(phase.name), value=now.isoformat()))
            session.flush()  # a second server process's pass stops here (the key is the settings table's primary key)
            for source in _sources(session, previous, phase):
                copy = received_submission(
                    submission_id=new_submission_id(),
                    participant_id=source.participant_id,
                    pin_id=ctx.pin_id,
                    name=source.name,
                    kind=source.kind,
                    track=Track.HIDDEN,
                    split=phase.split or ctx.split,
                    upload_path=source.upload_path,
                    upload_sha256=source.upload_sha256,
                    upload_bytes=source.upload_bytes,
                    content_digest=source.content_digest,
                    uploaded_at=now,
                    attempt_limit=ctx.competition.max_attempts,
                    labels=source.labels,
                    idempotency_key=regrade_key(source.id),
                )
                record_received(session, copy)
                if ctx.log is not None:
                    log_receipt(session, ctx.log, copy)
                made.append(copy.id)
    except IntegrityError:
        return []  # another server process made them
    for submission_id in made:
        enqueue(
            ctx.db,
            ctx.dispatcher,
            submission_id,
            actor="phase",
            reason=f"phase {phase.name!r} opened: {_WHAT[phase.regrade]} of {previous.name!r} graded again",
        )
    if made:
        log.info("phase %r opened: %d %s of phase %r graded again, not charged", phase.name, len(made), _WHAT[phase.regrade], previous.name)
    return made
