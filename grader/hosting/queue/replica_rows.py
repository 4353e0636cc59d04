"""Which replicas of a job count now: those recorded since the job last entered the queue from outside a grade.

A rejudge (or the first enqueue) starts a new round: replicas of earlier rounds are
history, not votes. Read by the lifecycle (a lost replica attempt goes back to
``replicating``, not to the open queue) and by :mod:`grader.hosting.services.replication`.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, ScalarSelect, and_, exists, func, or_, select
from sqlalchemy.orm import InstrumentedAttribute, Session, aliased

from grader.hosting.db.models import Replica, ShardJob, Submission, Transition
from grader.hosting.states import ShardState, State

#: A dissent whose worker is to grade the job again, alone (grader.hosting.services.replica_recheck).
RECHECK_VERDICT = "recheck"
#: The shard job states whose worker's output (or failure) is part of its attempt's outcome: a contributor's.
CONTRIBUTED = (ShardState.RUNNING.value, ShardState.DONE.value, ShardState.FAILED.value)


def round_start(submission_id: ColumnElement[str] | InstrumentedAttribute[str] | str) -> ScalarSelect[int]:
    """The attempt after which a submission's current round of replicas starts: its last enqueue from outside a grade (0: none)."""
    return (
        select(func.coalesce(func.max(Transition.attempt), 0))
        .where(
            Transition.submission_id == submission_id,
            Transition.to_state == State.QUEUED.value,
            Transition.from_state != State.RUNNING.value,
        )
        .correlate_except(Transition)
        .scalar_subquery()
    )


def open_replicas(session: Session, submission: Submission) -> list[Replica]:
    """The replicas of ``submission``'s current round on its pin, oldest first (empty when it is not replicated)."""
    start = session.scalar(select(round_start(submission.id)))
    return list(
        session.scalars(
            select(Replica)
            .where(Replica.submission_id == submission.id, Replica.attempt > (start or 0), Replica.pin_id == submission.pin_id)
            .order_by(Replica.attempt, Replica.id)
        ).all()
    )


def contributors(session: Session, replicas: list[Replica]) -> set[int]:
    """The workers that contributed to ``replicas``: each one's coordinator and the workers of its shard jobs' outputs and failures."""
    found: set[int | None] = {row.worker_id for row in replicas}
    for row in replicas:
        found |= set(
            session.scalars(
                select(ShardJob.worker_id).where(
                    ShardJob.submission_id == row.submission_id,
                    ShardJob.attempt == row.attempt,
                    ShardJob.state.in_(CONTRIBUTED),
                    ShardJob.worker_id.is_not(None),
                )
            ).all()
        )
    return {worker for worker in found if worker is not None}


def contributes_elsewhere(
    worker_id: int, submission_id: ColumnElement[str] | InstrumentedAttribute[str], attempt: ColumnElement[int] | InstrumentedAttribute[int]
) -> ColumnElement[bool]:
    """SQL: ``worker_id`` contributed to a replica of ``submission_id``'s current round other than ``attempt`` (as its
    coordinator or by a shard job's output or failure): such a worker computes nothing of another replica of it."""
    job = ShardJob.__table__.alias("contributed")
    by_a_shard = (
        exists()
        .where(
            job.c.submission_id == Replica.submission_id, job.c.attempt == Replica.attempt, job.c.worker_id == worker_id, job.c.state.in_(CONTRIBUTED)
        )
        .correlate_except(job)
    )
    submission = aliased(Submission)  # an alias: a claim's query joins Submission, and this must not correlate to it
    pin = select(submission.pin_id).where(submission.id == submission_id).correlate_except(submission).scalar_subquery()
    return (
        exists()
        .where(
            Replica.submission_id == submission_id,
            Replica.attempt != attempt,
            Replica.attempt > round_start(submission_id),
            Replica.pin_id == pin,
            or_(Replica.worker_id == worker_id, by_a_shard),
        )
        .correlate_except(Replica)
    )


def attempt_closed_to(
    worker_id: int, submission_id: ColumnElement[str] | InstrumentedAttribute[str], attempt: ColumnElement[int] | InstrumentedAttribute[int], cap: int
) -> ColumnElement[bool]:
    """SQL: the attempt already has ``cap`` contributors (its coordinator, the workers of its running, done and failed shard
    jobs) and ``worker_id`` is not one of them."""
    job = ShardJob.__table__.alias("sibling")
    submission = aliased(Submission)  # an alias: a claim's query joins Submission, and this must not correlate to it
    coordinator = select(submission.lease_worker_id).where(submission.id == submission_id).correlate_except(submission).scalar_subquery()
    of_attempt = and_(job.c.submission_id == submission_id, job.c.attempt == attempt, job.c.state.in_(CONTRIBUTED))
    helpers = (
        select(func.count(func.distinct(job.c.worker_id)))
        .where(of_attempt, job.c.worker_id.is_not(None), job.c.worker_id != func.coalesce(coordinator, -1))
        .correlate_except(job)
        .scalar_subquery()
    )
    already = or_(coordinator == worker_id, exists().where(of_attempt, job.c.worker_id == worker_id).correlate_except(job))
    return and_(~already, helpers + 1 >= cap)


def coordinates(
    worker_id: int, submission_id: ColumnElement[str] | InstrumentedAttribute[str], attempt: ColumnElement[int] | InstrumentedAttribute[int]
) -> ColumnElement[bool]:
    """SQL: ``worker_id`` holds the lease of ``attempt`` of ``submission_id`` (it coordinates that replica)."""
    submission = aliased(Submission)
    return (
        exists()
        .where(
            submission.id == submission_id,
            submission.attempt == attempt,
            submission.lease_worker_id == worker_id,
            submission.state == State.RUNNING.value,
        )
        .correlate_except(submission)
    )


def rechecking(submission_id: ColumnElement[str] | InstrumentedAttribute[str]) -> ColumnElement[bool]:
    """SQL: a dissent of ``submission_id``'s current round waits for its worker's re-run (which that worker computes alone)."""
    return (
        exists()
        .where(Replica.submission_id == submission_id, Replica.verdict == RECHECK_VERDICT, Replica.attempt > round_start(submission_id))
        .correlate_except(Replica)
    )
