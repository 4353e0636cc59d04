"""The events of the transparency log: each appends its entry in the transaction of its event (see
:mod:`grader.hosting.transparency.log_store`): receipts, reports, grades that ended without a report, finals and the end,
cancellations, rejudges, retractions, the reveal."""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from grader import jsonio
from grader.errors import InternalError
from grader.hosting.clock import utcnow
from grader.hosting.config import Competition
from grader.hosting.db.models import FinalChoice, LogEntry, Participant, Submission, Team
from grader.hosting.db.session import Database
from grader.hosting.errors import HostingError
from grader.hosting.schedule import ends_at, record_logged_end
from grader.hosting.states import IN_FLIGHT
from grader.hosting.transparency.host_log import HostLog
from grader.hosting.transparency.log_store import LogClosedError, append_entry, lock_head, reveal_index
from grader.transparency import entries
from grader.transparency.commitments import EntryCommitter
from grader.transparency.errors import LogVerificationError


def _participant_name(session: Session, submission: Submission) -> str:
    participant = session.get(Participant, submission.participant_id)
    return participant.name if participant is not None else str(submission.participant_id)


def log_receipt(session: Session, host_log: HostLog, submission: Submission) -> int:
    """An accepted upload's receipt, in the transaction that stores the submission."""
    entry = entries.receipt_entry(
        EntryCommitter.fresh(host_log.identifier_key),
        time=submission.uploaded_at,
        participant=_participant_name(session, submission),
        submission=submission.id,
        upload_sha256=submission.upload_sha256,
    )
    return append_entry(session, host_log, entry, submission_id=submission.id)


def log_team(session: Session, host_log: HostLog, *, name: str, team: str, action: str) -> int:
    """A team membership change (participant and team committed, like a receipt's), in the transaction that makes it."""
    entry = entries.team_entry(EntryCommitter.fresh(host_log.identifier_key), time=utcnow(), participant=name, team=team, action=action)
    return append_entry(session, host_log, entry)


def log_registration(session: Session, host_log: HostLog, *, name: str, rules_sha256: str) -> int:
    """A sign-up's registration (the participant committed, like a receipt's), in the transaction that registers it."""
    entry = entries.registration_entry(EntryCommitter.fresh(host_log.identifier_key), time=utcnow(), participant=name, rules_sha256=rules_sha256)
    return append_entry(session, host_log, entry)


def _payload_sha256(envelope: bytes) -> str:
    payload = jsonio.loads(envelope)["payload"]
    return hashlib.sha256(base64.b64decode(str(payload))).hexdigest()


def log_report(
    session: Session, host_log: HostLog, submission: Submission, *, attempt: int, status: str, envelopes: list[Path], failure_code: str | None = None
) -> list[int]:
    """Each report the host signed for ``attempt`` (the full one, and the public part's when there is one), in the
    transaction that records the result. A failed grade with no signed report (a participant failure code the worker
    sent without a report) is logged as an ``outcome`` entry instead (:func:`log_outcome`), naming ``failure_code``."""
    if not envelopes:
        if failure_code is None:
            raise InternalError(f"a {status} grade of {submission.id} with neither a signed report nor a failure code to log")
        return [log_outcome(session, host_log, submission, attempt=attempt, status=status, failure_code=failure_code)]
    indexes = []
    name = _participant_name(session, submission)
    for path in envelopes:
        envelope = path.read_bytes()
        envelope_sha256 = hashlib.sha256(envelope).hexdigest()
        entry = entries.report_entry(
            EntryCommitter.fresh(host_log.identifier_key),
            time=utcnow(),
            participant=name,
            submission=submission.id,
            attempt=attempt,
            status=status,
            payload_sha256=_payload_sha256(envelope),
            envelope_sha256=envelope_sha256,
        )
        indexes.append(append_entry(session, host_log, entry, submission_id=submission.id, envelope_sha256=envelope_sha256))
    return indexes


def log_outcome(session: Session, host_log: HostLog, submission: Submission, *, attempt: int, status: str, failure_code: str) -> int:
    """A grade that ended with no report signed, in the transaction that records it: a participant failure without a
    report (``failed``), or a platform failure at the attempt limit (``error``, from a worker's post or the reaper)."""
    entry = entries.outcome_entry(
        EntryCommitter.fresh(host_log.identifier_key),
        time=utcnow(),
        participant=_participant_name(session, submission),
        submission=submission.id,
        attempt=attempt,
        status=str(status),
        failure_code=str(failure_code),  # a FailureCode's plain value
    )
    return append_entry(session, host_log, entry, submission_id=submission.id)


def _last_phase_end(session: Session) -> datetime | None:
    """The latest end of an earlier phase the log holds (None: none, or a competition without phases)."""
    times = [entries.decode_entry(bytes(data))["time"] for data in session.scalars(select(LogEntry.entry).where(LogEntry.kind == "phase_end"))]
    return entries.parse_time(str(max(times))) if times else None


def log_finals(session: Session, host_log: HostLog, time: datetime) -> list[int]:
    """At the end: one entry per board row with final choices (committed, in a fixed order), in the ending
    transaction. A participant's own row names them; a team's row (its choices are shared: any member replaces them)
    names the team and the member who chose, so a member's choices for their own earlier row and for their team's
    are two entries, as they are two rows. Only the last phase's choices are final: those of an earlier phase (made
    before its logged end) were carried to the next."""
    rows: dict[tuple[int, int], tuple[set[int], list[str]]] = {}
    choices = select(FinalChoice.participant_id, FinalChoice.submission_id, Submission.team_id).join(
        Submission, Submission.id == FinalChoice.submission_id
    )
    if (closed := _last_phase_end(session)) is not None:
        choices = choices.where(Submission.uploaded_at >= closed)
    for chooser, submission_id, team_id in session.execute(choices).all():
        choosers, submissions = rows.setdefault((0, chooser) if team_id is None else (1, team_id), (set(), []))
        choosers.add(chooser)
        submissions.append(submission_id)
    indexes = []
    for (is_team, owner), (choosers, submissions) in sorted(rows.items()):
        who = min(choosers)  # a team's choices are replaced whole by one member: one chooser
        participant = session.get(Participant, who)
        team = session.get(Team, owner) if is_team else None
        entry = entries.finals_entry(
            EntryCommitter.fresh(host_log.identifier_key),
            time=time,
            participant=participant.name if participant is not None else str(who),
            submissions=sorted(submissions)[:16],
            team=None if not is_team else team.name if team is not None else str(owner),
        )
        indexes.append(append_entry(session, host_log, entry))
    return indexes


def _has_ended(session: Session) -> bool:
    """Whether the log already holds its ``end`` entry."""
    return bool(session.scalar(select(func.count()).select_from(LogEntry).where(LogEntry.kind == "end")))


def logged_end(session: Session) -> tuple[int, datetime] | None:
    """The log's ``end`` entry: its index and the end's time (to the second, as logged), or None before the end."""
    row = session.execute(select(LogEntry.index, LogEntry.entry).where(LogEntry.kind == "end").order_by(LogEntry.index).limit(1)).first()
    if row is None:
        return None
    return row[0], entries.parse_time(str(entries.decode_entry(bytes(row[1]))["time"]))


def end_logged_first(session: Session) -> datetime | None:
    """The logged end if there is one, read under the log's head lock: an upload's transaction asks it before its
    receipt, so that the receipt either precedes the end entry or is not written (the audit refuses a receipt after it)."""
    lock_head(session)
    entry = logged_end(session)
    return None if entry is None else entry[1]


def log_end(session: Session, host_log: HostLog, time: datetime) -> bool:
    """The finals and the ``end`` entry, once, and the end stored with them (whoever logs it, the end then stays:
    :mod:`grader.hosting.schedule`): False (nothing appended) when the log already holds its end."""
    lock_head(session)
    if _has_ended(session):
        return False
    log_finals(session, host_log, time)
    append_entry(session, host_log, entries.end_entry(time=time))
    record_logged_end(session, time)
    return True


def log_end_if_due(db: Database, host_log: HostLog, competition: Competition) -> bool:
    """The end reached by the competition file's ``end`` time (no admin command wrote it): logged by the first
    server process whose reaper sees it. True when this call appended it. A standing leaderboard (no ``end``) has none
    to reach: only the host's ``grader admin end`` ends it."""
    end = ends_at(db, competition)
    if end is None or utcnow() < end:
        return False  # not yet; or never, for a standing leaderboard
    with db.session() as session:
        if _has_ended(session):
            return False  # read first: no lock taken on every pass of every reaper after the end
    with db.session() as session:
        return log_end(session, host_log, end)


def log_cancellation(session: Session, host_log: HostLog, submission: Submission, *, by: str) -> int:
    """A submission cancelled by its participant or an admin, in the cancelling transaction."""
    entry = entries.cancellation_entry(
        EntryCommitter.fresh(host_log.identifier_key),
        time=utcnow(),
        participant=_participant_name(session, submission),
        submission=submission.id,
        by=by,
    )
    return append_entry(session, host_log, entry, submission_id=submission.id)


def log_rejudge(session: Session, host_log: HostLog, submission: Submission, *, attempt: int, reason: str) -> int:
    """A submission queued again by an admin, in the rejudging transaction."""
    entry = entries.rejudge_entry(
        EntryCommitter.fresh(host_log.identifier_key),
        time=utcnow(),
        participant=_participant_name(session, submission),
        submission=submission.id,
        attempt=attempt,
        reason=(reason or "rejudged")[:200],
    )
    return append_entry(session, host_log, entry, submission_id=submission.id)


def refuse_after_reveal(db: Database, what: str) -> None:
    """Refuse ``what`` (a rejudge, a re-scoring) up front once the log holds the reveal, before anything is signed or
    queued (:func:`grader.hosting.transparency.log_store.append_entry` refuses its entry anyway)."""
    with db.session() as session:
        revealed = reveal_index(session)
    if revealed is not None:
        raise LogClosedError(
            f"the log holds the reveal (entry {revealed}): the competition's results are final, so {what} is refused "
            "(open a new competition to grade again)"
        )


def log_retraction(db: Database, host_log: HostLog, *, index: int, admin: str, reason: str) -> int:
    """An admin's retraction of entry ``index`` (never a deletion): its own transaction."""
    with db.session() as session:
        size = session.scalar(select(func.count()).select_from(LogEntry)) or 0
        if not 0 < index < size:
            raise LogVerificationError(f"entry {index} is not an entry of this log that can be retracted (entries 1..{size - 1})")
        return append_entry(session, host_log, entries.retraction_entry(time=utcnow(), index=index, admin=admin, reason=reason))


#: How many of the submissions still in flight a refused reveal names.
_NAMED = 5


class AlreadyRevealed(HostingError):
    """The log already holds the reveal (another server process's pass, or the host's command, logged it)."""


class RevealNotDue(HostingError):
    """The reveal cannot be logged yet: no end entry, a submission still in flight, or the log moved since its boards were read."""


def head_index(db: Database) -> int:
    """The index of the log's last entry (-1 for an empty log): read before a reveal's boards, checked again at its append."""
    with db.session() as session:
        last = session.scalar(select(func.max(LogEntry.index)))
    return -1 if last is None else int(last)


def reveal_due(db: Database) -> bool:
    """Whether the reveal is due: the log holds the end and no reveal, and no submission is in flight. A plain read (no
    lock): the server's periodic pass asks it every few seconds; :func:`log_reveal` checks again under the lock."""
    with db.session() as session:
        kinds = set(session.scalars(select(LogEntry.kind).where(LogEntry.kind.in_(("end", "reveal")))).all())
        if kinds != {"end"}:
            return False
        in_flight = session.scalar(select(func.count()).select_from(Submission).where(Submission.state.in_([state.value for state in IN_FLIGHT])))
    return not in_flight


def log_reveal(db: Database, host_log: HostLog, entry: bytes, *, head: int | None = None) -> int:
    """Append the reveal entry in its own transaction: once, after the end entry, and only when no submission is in
    flight (every upload received before the end has its grade; the log takes nothing but retractions after the reveal).

    The check runs under the log's head lock, which every grade, rejudge and receipt takes to log itself, so none
    slips in between the check and the reveal. ``head``: the last index when the entry's board digests were read; if
    the log moved since (a grade, a rejudge or a re-scoring logged meanwhile), the digests may be stale and the reveal is
    refused (:class:`RevealNotDue`): the caller reads the boards again.
    """
    with db.session() as session:
        lock_head(session)
        kinds = set(session.scalars(select(LogEntry.kind).where(LogEntry.kind.in_(("end", "reveal")))).all())
        if "reveal" in kinds:
            raise AlreadyRevealed("the log already holds the reveal")
        if "end" not in kinds:
            raise RevealNotDue("the reveal comes after the end entry (`grader admin end`)")
        waiting = session.scalars(
            select(Submission.id).where(Submission.state.in_([state.value for state in IN_FLIGHT])).order_by(Submission.uploaded_at)
        ).all()
        if waiting:
            named = ", ".join(waiting[:_NAMED]) + (f" and {len(waiting) - _NAMED} more" if len(waiting) > _NAMED else "")
            raise RevealNotDue(
                f"the reveal waits until every submission received before the end is graded: {len(waiting)} still in flight ({named}); "
                "run it again once they have finished (or cancel them)"
            )
        if head is not None and (session.scalar(select(func.max(LogEntry.index))) or 0) != head:
            raise RevealNotDue("the log moved while the final boards were read (a grade or a rejudge was logged meanwhile); run it again")
        return append_entry(session, host_log, entry)
