"""The submission lifecycle: ``received -> queued -> running -> scored | failed | error | cancelled``.

Every move is one guarded UPDATE (``WHERE id = ? AND version = ?`` plus the
expected state) and one audit row, in one transaction; a move whose guard no
longer holds changes nothing. So a duplicate event, a stale worker or a
reaper racing a result is harmless: exactly one of them wins.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from grader.failures import FailureCode
from grader.hosting.clock import utcnow
from grader.hosting.db.models import Attempt, State, Submission, Transition
from grader.hosting.db.session import Database
from grader.hosting.services.dispatch import Dispatcher

#: Failure codes caused by the submission (``FailureCode.charged``); they end ``failed`` and count against the quota.
PARTICIPANT_CODES = frozenset(code for code in FailureCode if code.charged)
#: The platform's own failure: retried, and at the end ``error``, never charged.
INFRA = FailureCode.INFRA


def new_submission_id() -> str:
    """An opaque, unguessable id (no enumeration of other participants' submissions)."""
    return "s" + secrets.token_hex(8)


def move(
    session: Session, submission: Submission, to: State, *, actor: str, reason: str = "", expect: tuple[State, ...] | None = None, **values: Any
) -> bool:
    """Move ``submission`` to ``to`` if its state (one of ``expect``) and version still hold; audit it.

    Returns False (and changes nothing) when another writer got there first.
    """
    now = utcnow()
    allowed = [s.value for s in (expect or (State(submission.state),))]
    result = session.execute(
        update(Submission)
        .where(Submission.id == submission.id, Submission.version == submission.version, Submission.state.in_(allowed))
        .values(state=to.value, version=Submission.version + 1, updated_at=now, **values)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    session.add(
        Transition(
            submission_id=submission.id,
            from_state=submission.state,
            to_state=to.value,
            attempt=values.get("attempt", submission.attempt),
            actor=actor,
            reason=reason,
            at=now,
        )
    )
    session.flush()
    session.refresh(submission)
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


def enqueue(db: Database, dispatcher: Dispatcher, submission_id: str, *, actor: str, reason: str = "", max_attempts: int = 3) -> bool:
    """``received`` (or a terminal state, for a rejudge) -> ``queued``; commit; then dispatch."""
    with db.session() as session:
        submission = session.get(Submission, submission_id)
        if submission is None:
            return False
        expect = (State.RECEIVED,) if actor != "rejudge" else (State.SCORED, State.FAILED, State.ERROR, State.CANCELLED)
        extra: dict[str, Any] = {"attempt_limit": submission.attempt + max_attempts} if actor == "rejudge" else {}
        moved = move(
            session,
            submission,
            State.QUEUED,
            actor=actor,
            reason=reason,
            expect=expect,
            dispatched_at=utcnow(),
            failure_code=None,
            lease_worker_id=None,
            lease_expires_at=None,
            **extra,
        )
    if moved:
        dispatcher.dispatch(submission_id)  # after the commit, never before
    return moved


@dataclass(frozen=True)
class Claim:
    """A job handed to a worker: the submission, the attempt it holds, and its lease."""

    submission_id: str
    attempt: int
    lease_expires_at: datetime


def claim(db: Database, worker_id: int, lease_s: float) -> Claim | None:
    """Atomically take the queued job uploaded first (optimistic: a lost race tries the next one).

    Order is by upload time only: a re-dispatch or a re-queue after a lost worker
    never sends a job to the back of the queue.
    """
    for _ in range(5):
        with db.session() as session:
            candidates = session.scalars(
                select(Submission).where(Submission.state == State.QUEUED.value).order_by(Submission.uploaded_at, Submission.id).limit(5)
            ).all()
            if not candidates:
                return None
            for submission in candidates:
                now = utcnow()
                expires = now + timedelta(seconds=lease_s)
                attempt = submission.attempt + 1
                if move(
                    session,
                    submission,
                    State.RUNNING,
                    actor=f"worker:{worker_id}",
                    reason=f"attempt {attempt} claimed",
                    expect=(State.QUEUED,),
                    attempt=attempt,
                    lease_worker_id=worker_id,
                    lease_expires_at=expires,
                ):
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
    return None


def holds_lease(submission: Submission | None, attempt: int, worker_id: int) -> bool:
    """Whether ``worker_id`` holds the current lease of ``attempt`` on a running submission."""
    return (
        submission is not None
        and submission.state == State.RUNNING.value
        and submission.attempt == attempt
        and submission.lease_worker_id == worker_id
    )


def heartbeat(db: Database, submission_id: str, attempt: int, worker_id: int, lease_s: float) -> datetime | None:
    """Renew the lease; None when the attempt is stale, cancelled or not this worker's (stop grading)."""
    with db.session() as session:
        now = utcnow()
        expires = now + timedelta(seconds=lease_s)
        result = session.execute(
            update(Submission)
            .where(
                Submission.id == submission_id,
                Submission.state == State.RUNNING.value,
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
        return expires


def end_attempt(session: Session, submission_id: str, attempt: int, outcome: str) -> None:
    """Record how an attempt ended (audit only)."""
    session.execute(
        update(Attempt)
        .where(Attempt.submission_id == submission_id, Attempt.number == attempt, Attempt.ended_at.is_(None))
        .values(ended_at=utcnow(), outcome=outcome)
    )


def retry_or_error(session: Session, submission: Submission, *, actor: str, reason: str) -> State | None:
    """A platform failure of the current attempt: back to the queue, or ``error``/INFRA at the attempt limit."""
    end_attempt(session, submission.id, submission.attempt, "infra")
    if submission.attempt >= submission.attempt_limit:
        done = move(
            session,
            submission,
            State.ERROR,
            actor=actor,
            reason=f"{reason}; attempt limit reached",
            expect=(State.RUNNING,),
            failure_code=INFRA,
            lease_worker_id=None,
            lease_expires_at=None,
        )
        return State.ERROR if done else None
    done = move(
        session,
        submission,
        State.QUEUED,
        actor=actor,
        reason=reason,
        expect=(State.RUNNING,),
        dispatched_at=utcnow(),
        lease_worker_id=None,
        lease_expires_at=None,
    )
    return State.QUEUED if done else None


def cancel(db: Database, submission_id: str, *, actor: str = "host") -> bool:
    """Cancel a submission that has not ended (never charged); a running worker learns it at its next heartbeat."""
    with db.session() as session:
        submission = session.get(Submission, submission_id)
        if submission is None or State(submission.state).terminal:
            return False
        if submission.state == State.RUNNING.value:
            end_attempt(session, submission.id, submission.attempt, "cancelled")
        return move(
            session,
            submission,
            State.CANCELLED,
            actor=actor,
            reason="cancelled by the host",
            expect=(State.RECEIVED, State.QUEUED, State.RUNNING),
            lease_worker_id=None,
            lease_expires_at=None,
        )


@dataclass
class ReapReport:
    """What one pass of the reaper did."""

    requeued: list[str]
    errored: list[str]
    queued_received: list[str]
    redispatched: list[str]
    #: Jobs held under a live lease after the pass: some worker is alive and busy.
    running: int = 0


def reap(db: Database, dispatcher: Dispatcher, *, redispatch_s: float) -> ReapReport:
    """Return expired leases to the queue (or end them ``error``), queue stale ``received`` jobs, re-dispatch stale ``queued`` ones."""
    report = ReapReport([], [], [], [])
    now = utcnow()
    stale = now - timedelta(seconds=redispatch_s)
    with db.session() as session:
        for submission in session.scalars(select(Submission).where(Submission.state == State.RUNNING.value, Submission.lease_expires_at < now)).all():
            outcome = retry_or_error(session, submission, actor="reaper", reason=f"lease of attempt {submission.attempt} expired (worker lost)")
            if outcome is State.QUEUED:
                report.requeued.append(submission.id)
            elif outcome is State.ERROR:
                report.errored.append(submission.id)
        for submission in session.scalars(select(Submission).where(Submission.state == State.RECEIVED.value, Submission.uploaded_at < stale)).all():
            if move(
                session,
                submission,
                State.QUEUED,
                actor="reaper",
                reason="left received (a dispatch lost between commit and publish)",
                expect=(State.RECEIVED,),
                dispatched_at=now,
            ):
                report.queued_received.append(submission.id)
        for submission in session.scalars(select(Submission).where(Submission.state == State.QUEUED.value, Submission.dispatched_at < stale)).all():
            session.execute(
                update(Submission).where(Submission.id == submission.id, Submission.state == State.QUEUED.value).values(dispatched_at=now)
            )
            report.redispatched.append(submission.id)
        report.running = (
            session.scalar(
                select(func.count()).select_from(Submission).where(Submission.state == State.RUNNING.value, Submission.lease_expires_at >= now)
            )
            or 0
        )
    for submission_id in report.requeued + report.queued_received + report.redispatched:
        dispatcher.dispatch(submission_id)
    return report


def rejudge(db: Database, dispatcher: Dispatcher, submission_id: str, *, max_attempts: int) -> bool:
    """Grade a finished submission again (a new result row; earlier results stay)."""
    return enqueue(db, dispatcher, submission_id, actor="rejudge", reason="rejudge requested by the host", max_attempts=max_attempts)
