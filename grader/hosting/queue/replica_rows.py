"""Which replicas of a job count now: those recorded since the job last entered the queue from outside a grade.

A rejudge (or the first enqueue) starts a new round: replicas of earlier rounds are
history, not votes. Read by the lifecycle (a lost replica attempt goes back to
``replicating``, not to the open queue) and by :mod:`grader.hosting.services.replication`.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from grader.hosting.db.models import Replica, Submission, Transition
from grader.hosting.states import State


def open_replicas(session: Session, submission: Submission) -> list[Replica]:
    """The replicas of ``submission``'s current round on its pin, oldest first (empty when it is not replicated)."""
    start = session.scalar(
        select(func.max(Transition.attempt)).where(
            Transition.submission_id == submission.id,
            Transition.to_state == State.QUEUED.value,
            Transition.from_state != State.RUNNING.value,
        )
    )
    return list(
        session.scalars(
            select(Replica)
            .where(Replica.submission_id == submission.id, Replica.attempt > (start or 0), Replica.pin_id == submission.pin_id)
            .order_by(Replica.attempt, Replica.id)
        ).all()
    )
