"""Where a participant's waiting or running submission is: its place in the queue, an estimate, why it waits, its progress.

Everything is of one competition (each has its own context, database and workers): its queue, its
recent grades, the workers it heard from (:class:`grader.hosting.presence.Presence`). The estimate is a
simulation a person can redo by hand: every grade takes the median of this competition's recent grades
of the same track (:data:`RECENT_GRADES`); a free worker takes the oldest queued grade at once; a busy
worker is free again when its grade reaches that median (now, if it ran past it). The words of a
waiting reason are fixed here: none of them quotes a worker's message (it may name host-only data).
"""

from __future__ import annotations

import hashlib
import heapq
import statistics
from datetime import datetime, timedelta

from pydantic import BaseModel, Field
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from grader import jsonio
from grader.hosting.clock import iso, utcnow
from grader.hosting.context import ServerContext
from grader.hosting.db.models import Attempt, ShardJob, Submission, Transition
from grader.hosting.db.session import Database
from grader.hosting.identity.principal import Principal
from grader.hosting.intake import submissions as intake
from grader.hosting.protocol.messages import Phase, QueueView, SubmissionView, TaskProgress
from grader.hosting.protocol.progress import queue_words, task_words
from grader.hosting.queue import shard_jobs
from grader.hosting.states import State

#: How many of the competition's last finished grades (of the submission's track) the estimate is the median of.
RECENT_GRADES = 20
#: The states a queue view is shown in: waiting for a worker, or graded now.
FOLLOWED = (State.RECEIVED, State.QUEUED, State.RUNNING, State.REPLICATING)

NO_WORKER = "no worker of this competition is connected"
WORKER_LOST = "a worker was lost and the grade was re-queued"
PLATFORM_FAILURE = "a platform failure ended its last attempt and the grade was re-queued"
REPLICA = "its result waits for a second worker of the same machine kind to grade it again (replicas)"


def _typical(session: Session, submission: Submission) -> tuple[float | None, int]:
    """The median seconds of the competition's last :data:`RECENT_GRADES` grades of ``submission``'s track, and how many."""
    rows = session.execute(
        select(Attempt.claimed_at, Attempt.ended_at)
        .join(Submission, Submission.id == Attempt.submission_id)
        .where(Attempt.outcome == "result", Attempt.ended_at.is_not(None), Submission.track == submission.track)
        .order_by(Attempt.ended_at.desc(), Attempt.id.desc())
        .limit(RECENT_GRADES)
    ).all()
    spans = [max(0.0, (ended - claimed).total_seconds()) for claimed, ended in rows if ended is not None]
    return (statistics.median(spans), len(spans)) if spans else (None, 0)


def _running(session: Session, now: datetime) -> list[tuple[int | None, datetime]]:
    """Each grade running under a live lease: its worker and when its attempt was claimed."""
    rows = session.execute(
        select(Submission.lease_worker_id, Attempt.claimed_at)
        .join(Attempt, (Attempt.submission_id == Submission.id) & (Attempt.number == Submission.attempt))
        .where(Submission.state == State.RUNNING, Submission.lease_expires_at >= now)
    ).all()
    return [(worker, claimed) for worker, claimed in rows]


def _ahead(session: Session, submission: Submission) -> int:
    """Queued submissions a worker takes before this one (the claim's order: upload time, then id)."""
    earlier = (Submission.uploaded_at < submission.uploaded_at) | (
        (Submission.uploaded_at == submission.uploaded_at) & (Submission.id < submission.id)
    )
    return session.scalar(select(func.count()).select_from(Submission).where(Submission.state == State.QUEUED, earlier)) or 0


def _requeued(session: Session, submission: Submission) -> str | None:
    """Why a queued grade that ran before is queued again, in this module's words; None if it never ran."""
    last = session.scalars(select(Transition).where(Transition.submission_id == submission.id).order_by(Transition.id.desc()).limit(1)).first()
    if last is None or last.from_state is not State.RUNNING or last.to_state is not State.QUEUED:
        return None
    return WORKER_LOST if "(worker lost)" in last.reason else PLATFORM_FAILURE


def shard_progress(db: Database, submission_id: str, attempt: int) -> list[TaskProgress]:
    """A sharded attempt's progress per task (what its coordinator logs); empty for an attempt with no shard jobs."""
    with db.session() as session:
        return _shard_progress(session, submission_id, attempt)


def _shard_progress(session: Session, submission_id: str, attempt: int) -> list[TaskProgress]:
    """A sharded grade's progress, from its shard jobs (the server's own rows): per task, shards ranked of shards planned."""
    rows = session.execute(
        select(ShardJob.task, ShardJob.number, ShardJob.state)
        .where(ShardJob.submission_id == submission_id, ShardJob.attempt == attempt)
        .order_by(ShardJob.task, ShardJob.number)
    ).all()
    tasks: dict[str, list[str]] = {}
    for task, number, state in rows:
        if number >= 0:  # the query job (-1) encodes the queries: it comes before every shard, no shard of its own
            tasks.setdefault(task, []).append(state)
    progress = []
    for task, states in tasks.items():
        done = sum(state == shard_jobs.DONE for state in states)
        phase = Phase.FAILED if shard_jobs.FAILED in states else Phase.RANKED if done == len(states) else Phase.ENCODING
        progress.append(TaskProgress(task=task, phase=phase, shards_done=done, shards=len(states)))
    return progress


def about(moment: datetime) -> datetime:
    """An estimated moment as it is shown: the next whole minute. An estimate is no more precise, and one that moved
    with every second would change the page's rows every second (its watch would answer at every look)."""
    whole = moment.replace(second=0, microsecond=0)
    return whole if whole == moment else whole + timedelta(minutes=1)


def start_after(ahead: int, free: int, busy_left: list[float], typical: float) -> float:
    """Seconds until a grade with ``ahead`` grades before it starts: ``free`` workers free now, busy ones free after ``busy_left``."""
    free_at = [0.0] * free + [max(0.0, left) for left in busy_left]
    heapq.heapify(free_at)
    for _ in range(ahead):
        heapq.heappush(free_at, heapq.heappop(free_at) + typical)
    return free_at[0]


def queue_view(ctx: ServerContext, submission_id: str) -> QueueView | None:
    """Where ``submission_id`` is while it waits or runs (:class:`QueueView`); None once it is graded (or unknown)."""
    now = utcnow()
    present = ctx.presence.present()
    with ctx.db.session() as session:
        submission = session.get(Submission, submission_id)
        if submission is None or submission.state not in FOLLOWED:
            return None
        typical, typical_of = _typical(session, submission)
        running = _running(session, now)
        busy = {worker for worker, _ in running if worker is not None}
        view = QueueView(
            running=len(running), workers=len(present | busy), free_workers=len(present - busy), typical_s=typical, typical_of=typical_of
        )
        if submission.state is State.RUNNING:
            attempt = session.scalars(select(Attempt).where(Attempt.submission_id == submission.id, Attempt.number == submission.attempt)).first()
            if attempt is not None:
                view.starts_at = iso(attempt.claimed_at)
                if typical is not None and (end := attempt.claimed_at + timedelta(seconds=typical)) > now:
                    view.ends_at = iso(about(end))  # none once it runs past the median: it takes longer than usual
                if attempt.progress is not None:
                    view.progress = [TaskProgress.model_validate(entry) for entry in attempt.progress.get("tasks", [])]
                    view.progress_at = iso(attempt.progress_at)
                sharded = _shard_progress(session, submission.id, submission.attempt)
                if sharded and not any(entry.phase is Phase.SCORING for entry in view.progress):
                    view.progress, view.progress_at = sharded, iso(now)
            return view
        if submission.state is State.REPLICATING:
            view.waiting = REPLICA
            return view
        view.ahead = _ahead(session, submission) if submission.state is State.QUEUED else 0
        view.position = view.ahead + 1
        if submission.retry_at is not None and submission.retry_at > now:
            view.waiting = f"{PLATFORM_FAILURE}; it may be taken again from {iso(submission.retry_at)}"
        else:
            view.waiting = _requeued(session, submission)
        if not present and not busy:
            view.waiting = NO_WORKER
            return view
        if typical is not None:
            busy_left = [typical - (now - claimed).total_seconds() for worker, claimed in running if worker is not None]
            start = now + timedelta(seconds=start_after(view.ahead, len(present - busy), busy_left, typical))
            if submission.retry_at is not None and submission.retry_at > start:
                start = submission.retry_at
            view.starts_at, view.ends_at = iso(about(start)), iso(about(start + timedelta(seconds=typical)))
        return view


def own_status(ctx: ServerContext, participant: Principal, submission_id: str) -> SubmissionView | None:
    """What ``participant`` may see of their submission, with where it is while it waits or runs; None if it is not theirs."""
    view = intake.own_view(ctx, participant, submission_id)
    if view is None:
        return None
    followed = queue_view(ctx, view.id)
    if followed is not None:
        view.queue = QueueView.model_validate(followed.model_dump())  # every field set: the route leaves out only unset ones
    return view


class RowProgress(BaseModel):
    """One of a participant's submissions as ``/me`` redraws it: its state, failure code, score and progress lines."""

    id: str
    state: str
    failure_code: str | None = None
    #: the score the page shows (4 decimals), or "" when it has none
    score: str = ""
    #: the queue line (place, estimate, why it waits) and one line per task, while it waits or runs
    lines: list[str] = Field(default_factory=list)


class PageProgress(BaseModel):
    """What ``/me`` polls: each submission's row, whether any still waits or runs, and a tag of the whole (what changed)."""

    tag: str
    live: bool
    rows: list[RowProgress]


def progress_lines(view: QueueView | None) -> list[str]:
    """The lines a person reads of a waiting or running grade: the queue line, then each task's (plain text: escape to show)."""
    if view is None:
        return []
    return [queue_words(view), *(task_words(entry) for entry in view.progress)]


def own_progress(ctx: ServerContext, participant: Principal) -> PageProgress:
    """Each of ``participant``'s submissions as ``/me`` shows it, with the progress of those that wait or run."""
    rows = []
    for view in intake.own_views(ctx, participant):
        followed = queue_view(ctx, view.id) if view.state in FOLLOWED else None
        score = f"{view.score:.4f}" if view.score is not None else ""
        rows.append(RowProgress(id=view.id, state=view.state.value, failure_code=view.failure_code, score=score, lines=progress_lines(followed)))
    body = jsonio.dumps([row.model_dump(mode="json") for row in rows], sort_keys=True)
    tag = hashlib.sha256(body.encode("utf-8")).hexdigest()[:32]
    return PageProgress(tag=tag, live=any(row.state in FOLLOWED for row in rows), rows=rows)
