"""The submission lifecycle: one function per event of :mod:`grader.hosting.states`, all through :func:`move`.

Every move is one guarded UPDATE (``WHERE id = ? AND version = ?`` plus the
state it was read in) and one audit row, in one transaction; a move whose guard
no longer holds changes nothing. So a duplicate event, a stale worker or a
reaper racing a result is harmless: exactly one of them wins. A move outside
the state table (:data:`grader.hosting.states.TRANSITIONS`) is a bug of ours and
raises :class:`grader.errors.InternalError`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, func, or_, select, true, update
from sqlalchemy.orm import Session

from grader.errors import InternalError
from grader.failures import FailureCode
from grader.hosting.clock import utcnow
from grader.hosting.config import QueueTiming
from grader.hosting.db.models import Attempt, Submission, Transition
from grader.hosting.db.session import Database
from grader.hosting.notify.outbox import board_changed, state_changed
from grader.hosting.queue.dispatch import Dispatcher
from grader.hosting.queue.replica_rows import open_replicas
from grader.hosting.states import CANCEL, CLAIM, ENQUEUE, FINISH, REJUDGE, REPLICATE, REQUEUE_OR_ERROR, Event, State, require
from grader.hosting.transparency.host_log import HostLog
from grader.hosting.transparency.log_events import log_cancellation, log_outcome, log_rejudge

#: Failure codes caused by the submission (``FailureCode.charged``); they end ``failed`` and count against the quota.
PARTICIPANT_CODES = frozenset(code for code in FailureCode if code.charged)
#: The platform's own failure: retried, and at the end ``error``, never charged.
INFRA = FailureCode.INFRA


def new_submission_id() -> str:
    """An opaque, unguessable id (no enumeration of other participants' submissions)."""
    return "s" + secrets.token_hex(8)


#: How many rounds :func:`claim` tries optimistically before it takes the queue's lock (each lost round: others took every job it saw).
CLAIM_ROUNDS = 5
#: How many of the oldest queued jobs one round of :func:`claim` tries.
CLAIM_BATCH = 5


def move(session: Session, submission: Submission, to: State, *, event: Event, actor: str, reason: str = "", **values: Any) -> bool:
    """Move ``submission`` from the state it was read in to ``to`` by ``event`` if its state and version still hold; audit it.

    Returns False (and changes nothing) when another writer got there first.
    Raises :class:`grader.errors.InternalError` when the move is outside the state
    table or not one ``event`` makes: callers check ``event.applies`` first.
    """
    source = State(submission.state)
    require(source, to)
    if (source, to) not in event.edges():
        raise InternalError(f"event {event.name} does not move a submission {source} -> {to}")
    now = utcnow()
    if not _compare_and_set(session, submission, state=to, updated_at=now, **values):
        return False
    session.add(
        Transition(
            submission_id=submission.id,
            from_state=source.value,
            to_state=to.value,
            attempt=values.get("attempt", submission.attempt),
            actor=actor,
            reason=reason,
            at=now,
        )
    )
    state_changed(session, submission, source.value, to.value)  # the participant's notifications, in the move's transaction
    session.flush()
    session.refresh(submission)
    return True


def _compare_and_set(session: Session, submission: Submission, **values: Any) -> bool:
    """One guarded UPDATE: ``values`` written, the version raised, only if the row is still in the state and version it was read in."""
    result = session.execute(
        update(Submission)
        .where(Submission.id == submission.id, Submission.version == submission.version, Submission.state == submission.state)
        .values(version=Submission.version + 1, **values)
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1  # type: ignore[attr-defined,no-any-return]


def replace_result(session: Session, submission: Submission, *, result_id: int, public_score: float | None) -> bool:
    """A re-scoring's result becomes a finished submission's current one; its state, attempts and lease stay.

    Not a move: the state stays, and staying put is never a move (the state table has no self-loop, and a test holds
    it), so no transition row is written; the new result row and the log's ``rejudge`` entry record the re-scoring.
    Guarded as a move is, by the state and version the submission was read in; False (nothing changed) when another
    writer was first.
    """
    if submission.state not in (State.SCORED, State.FAILED):
        raise InternalError(f"a {submission.state} submission has no result to replace (only scored or failed ones are re-scored)")
    if not _compare_and_set(session, submission, result_id=result_id, public_score=public_score, updated_at=utcnow()):
        return False
    session.refresh(submission)
    board_changed(session, submission)  # the participant's notifications, in the re-scoring's transaction
    return True


def record_received(session: Session, submission: Submission) -> None:
    """Insert a new submission in ``received`` with its first audit row."""
    session.add(submission)
    session.flush()
    session.add(
        Transition(
            submission_id=submission.id,
            from_state=None,
            to_state=State.RECEIVED.value,
            attempt=0,
            actor="upload",
            reason=f"{submission.upload_bytes} bytes, sha256 {submission.upload_sha256}",
            at=submission.uploaded_at,
        )
    )


def _to_queue(
    db: Database,
    dispatcher: Dispatcher,
    submission_id: str,
    event: Event,
    *,
    actor: str,
    reason: str,
    more_attempts: int | None = None,
    host_log: HostLog | None = None,
) -> bool:
    """Move a submission to ``queued`` by ``event`` (ENQUEUE, or REJUDGE with ``more_attempts`` allowed); commit; then dispatch.
    A rejudge is logged (``host_log``) in the same transaction."""
    with db.session() as session:
        submission = session.get(Submission, submission_id)
        if submission is None or not event.applies(submission.state):
            return False
        values: dict[str, Any] = {} if more_attempts is None else {"attempt_limit": submission.attempt + more_attempts}
        if event is REJUDGE:  # a new grade: its platform failures are retried afresh
            values.update(retry_at=None, infra_since=None)
        moved = move(
            session,
            submission,
            State.QUEUED,
            event=event,
            actor=actor,
            reason=reason,
            dispatched_at=utcnow(),
            failure_code=None,
            lease_worker_id=None,
            lease_expires_at=None,
            **values,
        )
        if moved and host_log is not None and event is REJUDGE:
            log_rejudge(session, host_log, submission, attempt=submission.attempt + 1, reason=reason)
    if moved:
        dispatcher.dispatch(submission_id)  # after the commit, never before
    return moved


def enqueue(db: Database, dispatcher: Dispatcher, submission_id: str, *, actor: str, reason: str = "") -> bool:
    """Event ENQUEUE: ``received -> queued``; commit; then dispatch. False when the submission is unknown or not ``received``."""
    return _to_queue(db, dispatcher, submission_id, ENQUEUE, actor=actor, reason=reason)


@dataclass(frozen=True)
class Claim:
    """A job handed to a worker: the submission, the attempt it holds, and its lease."""

    submission_id: str
    attempt: int
    lease_expires_at: datetime


def claim(db: Database, worker_id: int, lease_s: float) -> Claim | None:
    """Event CLAIM: atomically take the queued job uploaded first; None only when no job is queued.

    Order is by upload time only: a re-dispatch or a re-queue after a lost worker
    never sends a job to the back of the queue. Optimistic first: a lost race
    (another worker took the job) tries the next one, for at most
    :data:`CLAIM_ROUNDS` rounds of :data:`CLAIM_BATCH` jobs; a worker that lost
    them all takes the queue's lock and claims without a race, so a claim does
    not come back empty-handed while jobs wait (on PostgreSQL, jobs another
    transaction is moving at that instant are skipped, not waited for).
    """
    for _ in range(CLAIM_ROUNDS):
        with db.session() as session:
            candidates = session.scalars(_oldest_queued().limit(CLAIM_BATCH)).all()
            if not candidates:
                return None
            for submission in candidates:
                if (taken := _take(session, submission, worker_id, lease_s)) is not None:
                    return taken
    with db.session() as session:
        _lock_queue(session)
        oldest = session.scalars(_oldest_queued().limit(1).with_for_update(skip_locked=True)).first()
        if oldest is None:
            return None
        taken = _take(session, oldest, worker_id, lease_s)
        if taken is None:
            raise InternalError(f"claim of {oldest.id} under the queue's lock lost a race")
        return taken


def _oldest_queued() -> Select[Submission]:
    """Queued submissions, oldest upload first; one waiting out a platform failure's backoff (``retry_at``) is not yet claimable."""
    due = or_(Submission.retry_at.is_(None), Submission.retry_at <= utcnow())
    return select(Submission).where(Submission.state == State.QUEUED, due).order_by(Submission.uploaded_at, Submission.id)


def _lock_queue(session: Session) -> None:
    """Make the rest of ``session`` a claim no other writer can race: SQLite's write lock (``BEGIN IMMEDIATE``, must be first);
    on PostgreSQL the caller's ``FOR UPDATE SKIP LOCKED`` locks the row it reads instead."""
    if session.get_bind().dialect.name == "sqlite":
        session.connection().exec_driver_sql("BEGIN IMMEDIATE")


def _take(session: Session, submission: Submission, worker_id: int, lease_s: float) -> Claim | None:
    """Move ``submission`` (read ``queued`` or ``replicating``) to ``running`` under a new lease of ``worker_id``; None if another writer was first."""
    now = utcnow()
    expires = now + timedelta(seconds=lease_s)
    attempt = submission.attempt + 1
    if not move(
        session,
        submission,
        State.RUNNING,
        event=CLAIM,
        actor=f"worker:{worker_id}",
        reason=f"attempt {attempt} claimed",
        attempt=attempt,
        lease_worker_id=worker_id,
        lease_expires_at=expires,
    ):
        return None
    session.add(
        Attempt(
            submission_id=submission.id,
            number=attempt,
            worker_id=worker_id,
            claimed_at=now,
            heartbeat_at=now,
            lease_expires_at=expires,
            ended_at=None,
            outcome=None,
        )
    )
    return Claim(submission.id, attempt, expires)


#: The claim of one chosen job (grader.hosting.services.replication chooses replicating ones).
take = _take


def holds_lease(submission: Submission | None, attempt: int, worker_id: int) -> bool:
    """Whether ``worker_id`` holds the current lease of ``attempt`` on a running submission."""
    return submission is not None and submission.state == State.RUNNING and submission.attempt == attempt and submission.lease_worker_id == worker_id


#: The least time between two progress reports the server stores for one attempt: a worker beating faster renews its
#: lease, and its progress waits for the next beat past this.
PROGRESS_EVERY_S = 1.0


def heartbeat(
    db: Database, submission_id: str, attempt: int, worker_id: int, lease_s: float, progress: dict[str, Any] | None = None
) -> datetime | None:
    """Renew the lease and keep ``progress`` (at most once every :data:`PROGRESS_EVERY_S` per attempt); None when the
    attempt is stale, cancelled or not this worker's (stop grading)."""
    with db.session() as session:
        now = utcnow()
        expires = now + timedelta(seconds=lease_s)
        result = session.execute(
            update(Submission)
            .where(
                Submission.id == submission_id,
                Submission.state == State.RUNNING,
                Submission.attempt == attempt,
                Submission.lease_worker_id == worker_id,
                Submission.lease_expires_at > now,
            )
            .values(lease_expires_at=expires)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            return None
        session.execute(
            update(Attempt)
            .where(Attempt.submission_id == submission_id, Attempt.number == attempt)
            .values(heartbeat_at=now, lease_expires_at=expires)
        )
        if progress is not None:
            record_progress(session, submission_id, attempt, progress, now)
        return expires


def record_progress(session: Session, submission_id: str, attempt: int, progress: dict[str, Any], now: datetime, *, always: bool = False) -> None:
    """Keep ``progress`` as the attempt's last report, unless one was kept within :data:`PROGRESS_EVERY_S` (``always``: the server's own)."""
    recent = Attempt.progress_at.is_(None) | (Attempt.progress_at <= now - timedelta(seconds=PROGRESS_EVERY_S))
    session.execute(
        update(Attempt)
        .where(Attempt.submission_id == submission_id, Attempt.number == attempt, true() if always else recent)
        .values(progress=progress, progress_at=now)
    )


def end_attempt(session: Session, submission_id: str, attempt: int, outcome: str, at: datetime | None = None) -> None:
    """Record how an attempt ended (audit, and the count of a grade's platform failures), ``at`` (default: now)."""
    session.execute(
        update(Attempt)
        .where(Attempt.submission_id == submission_id, Attempt.number == attempt, Attempt.ended_at.is_(None))
        .values(ended_at=at or utcnow(), outcome=outcome)
    )


def retry_or_error(
    session: Session, submission: Submission, *, actor: str, reason: str, retry: QueueTiming | None = None, reported: bool = True
) -> State | None:
    """Event REQUEUE_OR_ERROR: a platform failure of the current attempt: back to the queue, or ``error``/INFRA once
    its retries are spent (:func:`_retries_left`).

    With ``retry`` (the competition's queue timing), a failure a worker ``reported`` (its engine went away, say)
    starts the grade's retry clock (``infra_since``) and the attempt waits out a backoff (``retry_at``) before it
    may be claimed again, so a short outage does not burn the attempts back to back; a lost lease (``reported``
    False: the worker is gone, others may take the job now) is re-queued at once, within the same bounds.
    Without ``retry``: at once, bounded by the attempt limit alone.

    A job with replicas recorded (``replicas`` > 1) goes back to ``replicating`` instead (event REPLICATE).

    None when the submission is no longer ``running`` or another writer moved it first.
    """
    if not REQUEUE_OR_ERROR.applies(submission.state):
        return None
    now = utcnow()
    end_attempt(session, submission.id, submission.attempt, "infra", now)
    since = submission.infra_since if retry is None or not reported else (submission.infra_since or now)
    left = _retries_left(submission, since, retry, now)
    if left and open_replicas(session, submission):
        # A replica's attempt lost: only a worker of the replicas' fingerprint that graded none of them may take it.
        done = move(
            session,
            submission,
            State.REPLICATING,
            event=REPLICATE,
            actor=actor,
            reason=reason,
            dispatched_at=utcnow(),
            lease_worker_id=None,
            lease_expires_at=None,
        )
        return State.REPLICATING if done else None
    if not left:
        spent = (
            "attempt limit reached"
            if since is None
            else f"attempt limit reached and platform failures retried for {(now - since).total_seconds():.0f} s"
        )
        done = move(
            session,
            submission,
            State.ERROR,
            event=REQUEUE_OR_ERROR,
            actor=actor,
            reason=f"{reason}; {spent}",
            failure_code=INFRA,
            lease_worker_id=None,
            lease_expires_at=None,
        )
        return State.ERROR if done else None
    wait = retry.backoff_s(_platform_failures(session, submission.id, since)) if retry is not None and reported else 0.0
    done = move(
        session,
        submission,
        State.QUEUED,
        event=REQUEUE_OR_ERROR,
        actor=actor,
        reason=reason if wait == 0 else f"{reason}; claimable again in {wait:g} s",
        dispatched_at=now,
        lease_worker_id=None,
        lease_expires_at=None,
        retry_at=now + timedelta(seconds=wait) if wait else None,
        infra_since=since,
    )
    return State.QUEUED if done else None


def _retries_left(submission: Submission, since: datetime | None, retry: QueueTiming | None, now: datetime) -> bool:
    """Whether a platform failure of the current attempt is retried: while attempts are left (``attempt_limit``), and
    beyond them while the grade's platform failures, from the first (``since``), have lasted less than ``infra_retry_s``."""
    if submission.attempt < submission.attempt_limit:
        return True
    return retry is not None and since is not None and (now - since).total_seconds() < retry.infra_retry_s


def _platform_failures(session: Session, submission_id: str, since: datetime | None) -> int:
    """The attempts of the submission that ended ``infra`` since ``since`` (the backoff doubles with each)."""
    ended = select(func.count()).where(Attempt.submission_id == submission_id, Attempt.outcome == "infra")
    if since is not None:
        ended = ended.where(Attempt.ended_at >= since)
    return int(session.scalar(ended) or 1)


def finish(session: Session, submission: Submission, final: State, *, actor: str, reason: str, **values: Any) -> bool:
    """Event FINISH: the lease holder's result is accepted: ``running -> scored | failed``; ``values`` are the result's columns.

    False when the submission is no longer ``running`` or another writer moved it first.
    """
    if not FINISH.applies(submission.state):
        return False
    return move(session, submission, final, event=FINISH, actor=actor, reason=reason, lease_worker_id=None, lease_expires_at=None, **values)


def cancel_submission(db: Database, submission_id: str, *, actor: str = "host", host_log: HostLog | None = None) -> bool:
    """Event CANCEL: cancel a submission that has not ended (never charged); a running worker learns it at its next heartbeat.
    Logged (``host_log``) in the same transaction."""
    with db.session() as session:
        submission = session.get(Submission, submission_id)
        if submission is None or not CANCEL.applies(submission.state):
            return False
        if submission.state == State.RUNNING:
            end_attempt(session, submission.id, submission.attempt, "cancelled")
        moved = move(
            session,
            submission,
            State.CANCELLED,
            event=CANCEL,
            actor=actor,
            reason="cancelled by the host",
            lease_worker_id=None,
            lease_expires_at=None,
        )
        if moved and host_log is not None:
            log_cancellation(session, host_log, submission, by="admin" if actor == "host" else "participant")
        return moved


@dataclass
class ReapReport:
    """What one pass of the reaper did."""

    requeued: list[str]
    errored: list[str]
    queued_received: list[str]
    redispatched: list[str]
    #: Jobs held under a live lease after the pass: some worker is alive and busy.
    running: int = 0


def reap(
    db: Database, dispatcher: Dispatcher, *, redispatch_s: float, host_log: HostLog | None = None, retry: QueueTiming | None = None
) -> ReapReport:
    """Return expired leases to the queue (or end them ``error``; ``retry``: :func:`retry_or_error`), queue stale ``received``
    jobs, re-dispatch stale ``queued`` ones. An ``error`` is logged (``host_log``) in the same transaction."""
    report = ReapReport([], [], [], [])
    now = utcnow()
    stale = now - timedelta(seconds=redispatch_s)
    with db.session() as session:
        for submission in session.scalars(select(Submission).where(Submission.state == State.RUNNING, Submission.lease_expires_at < now)).all():
            outcome = retry_or_error(
                session,
                submission,
                actor="reaper",
                reason=f"lease of attempt {submission.attempt} expired (worker lost)",
                retry=retry,
                reported=False,
            )
            if outcome is State.QUEUED:
                report.requeued.append(submission.id)
            elif outcome is State.ERROR:
                report.errored.append(submission.id)
                if host_log is not None:
                    log_outcome(session, host_log, submission, attempt=submission.attempt, status=outcome.value, failure_code=INFRA)
        for submission in session.scalars(select(Submission).where(Submission.state == State.RECEIVED, Submission.uploaded_at < stale)).all():
            if move(
                session,
                submission,
                State.QUEUED,
                event=ENQUEUE,
                actor="reaper",
                reason="left received (a dispatch lost between commit and publish)",
                dispatched_at=now,
            ):
                report.queued_received.append(submission.id)
        waiting = (State.QUEUED, State.REPLICATING)
        for submission in session.scalars(select(Submission).where(Submission.state.in_(waiting), Submission.dispatched_at < stale)).all():
            session.execute(  # not a move: the job stays where it waits, only its wake-up is sent again
                update(Submission).where(Submission.id == submission.id, Submission.state == submission.state).values(dispatched_at=now)
            )
            report.redispatched.append(submission.id)
        report.running = (
            session.scalar(select(func.count()).select_from(Submission).where(Submission.state == State.RUNNING, Submission.lease_expires_at >= now))
            or 0
        )
    for submission_id in report.requeued + report.queued_received + report.redispatched:
        dispatcher.dispatch(submission_id)
    return report


def rejudge_submission(db: Database, dispatcher: Dispatcher, submission_id: str, *, max_attempts: int, host_log: HostLog | None = None) -> bool:
    """Event REJUDGE: grade a finished submission again (a new result row; earlier results stay), with ``max_attempts`` more attempts.

    False when the submission is unknown or has not ended.
    """
    return _to_queue(
        db, dispatcher, submission_id, REJUDGE, actor="rejudge", reason="rejudge requested by the host", more_attempts=max_attempts, host_log=host_log
    )
