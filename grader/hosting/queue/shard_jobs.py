"""Shard jobs in the database: each a row with its own lease and tries; the database is the queue.

A sharded ONNX grade of one submission attempt is planned as, per task, a query job (number
:data:`QUERY_JOB`) and one job per shard (:func:`plan`). Workers take them one at a time
(:func:`claim`), renew their lease (:func:`renew`) and end them (:func:`complete`, :func:`fail`).
A shard may be claimed while its task's query job is running (:func:`_claimable`): it encodes its documents meanwhile
and searches once the vectors are in; should the query job go back to the queue first, the waiting shard job is
released, uncharged (:func:`release_waiting`), so that no worker holds a job it cannot finish while the job it
waits on has no holder (a pool of one worker included).
A job whose lease expired goes back to the queue alone (:func:`reap`): the other shards of
the task keep what they returned, so a lost shard is re-run alone. Every job of a task runs on
workers of one fingerprint, since ONNX vectors may differ between CPU families and the shards'
scores must be comparable to be merged: a task's running and done jobs pin it, and the pin goes with
the last lease (no job of the task running or done: any fingerprint may claim), so a task claimed
by a worker that vanished is not left to a fingerprint no live worker has. An attempt has a
deadline (:func:`expire`): after it, its open jobs fail their tasks ``INFRA``. A lease that lapses
unused (its holder never fetched the upload nor renewed it) costs no try. A job's reported platform
failure (``INFRA``: its worker's engine went away, say) is retried after a backoff (``retry_at``), beyond
its tries for ``[queue] infra_retry_s`` from the first (:func:`fail`), so a short outage ends no grade. Each move is one guarded
UPDATE (``WHERE id = ? AND state = ? AND tries = ?``), so two workers never both win a job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache

from sqlalchemy import ColumnElement, Select, exists, false, or_, select, true, update
from sqlalchemy.orm import Session, aliased

from grader.failures import FailureCode, code_or_infra
from grader.hosting.clock import utcnow
from grader.hosting.config import QueueTiming
from grader.hosting.db.models import ShardJob, Submission
from grader.hosting.db.session import Database
from grader.hosting.queue.replica_rows import attempt_closed_to, contributes_elsewhere, coordinates, rechecking
from grader.hosting.states import ShardState, State, require_shard

#: The number of a task's query job (shards are numbered from 0).
QUERY_JOB = -1
QUEUED, RUNNING, DONE, FAILED, SKIPPED = (state.value for state in ShardState)
#: Queued jobs looked at per claim round (a lost race tries the next).
CLAIM_BATCH = 8


@dataclass(frozen=True)
class ShardClaim:
    """A shard job handed to a worker: which job, the try it holds, and its lease."""

    job_id: int
    submission_id: str
    attempt: int
    task: str
    number: int
    tries: int
    lease_expires_at: datetime


@dataclass
class TaskShards:
    """Where one task's shard jobs stand: returned digests by number, the first failure, how many are still open."""

    done: dict[int, str] = field(default_factory=dict)
    failure: tuple[str, str] | None = None
    open: int = 0

    @property
    def complete(self) -> bool:
        """Whether every job of the task returned (query vectors and every shard)."""
        return self.open == 0 and self.failure is None


def move_shard(session: Session, where: ColumnElement[bool], source: ShardState, target: ShardState, **values: object) -> int:
    """The one way a shard job changes state: a guarded UPDATE ``source -> target`` (a pair of SHARD_TRANSITIONS); rows moved."""
    require_shard(source, target)
    moved = session.execute(
        update(ShardJob)
        .where(where, ShardJob.state == source.value)
        .values(state=target.value, **values)
        .execution_options(synchronize_session=False)
    )
    return int(moved.rowcount)  # type: ignore[attr-defined]


def plan(session: Session, submission_id: str, attempt: int, shards: Mapping[str, int], deadline_s: float) -> None:
    """Queue, for each task, its query job and ``shards[task]`` shard jobs, for this attempt, due ``deadline_s`` from now (in the caller's transaction)."""
    deadline = utcnow() + timedelta(seconds=deadline_s)
    for task, count in sorted(shards.items()):
        for number in range(QUERY_JOB, count):
            session.add(
                ShardJob(
                    submission_id=submission_id,
                    attempt=attempt,
                    task=task,
                    number=number,
                    state=QUEUED,
                    tries=0,
                    worker_id=None,
                    lease_expires_at=None,
                    fingerprint=None,
                    sha256=None,
                    failure_code=None,
                    message="",
                    deadline_at=deadline,
                    used=False,
                    unused=0,
                )
            )


# The aliases of the correlated subqueries below, made once. SQLAlchemy adapts an alias's columns on first use and
# remembers them per alias object: an alias made per call cost a claim look about 2 ms of Python to build its
# statement, and an idle server with two waiting workers about 45 ms of CPU a second (bench/results/scale_corpus.md).
# Constructs are immutable, so one alias serves every statement; each subquery has its own.
_FAILED_SIBLING = aliased(ShardJob, name="failed_sibling")
_PINNING_SIBLING = aliased(ShardJob, name="pinning_sibling")
_QUERY_SIBLING = aliased(ShardJob, name="query_sibling")


@cache
def _task_failed() -> ColumnElement[bool]:
    """Another job of the same task and attempt failed: the task has failed, so this job's work would be thrown away."""
    other = _FAILED_SIBLING
    return exists().where(
        other.submission_id == ShardJob.submission_id, other.attempt == ShardJob.attempt, other.task == ShardJob.task, other.state == FAILED
    )


def _pinned_elsewhere(fingerprint: str) -> ColumnElement[bool]:
    """A job of the same task and attempt is running or done under another fingerprint (the pin lapses with the task's last lease)."""
    other = _PINNING_SIBLING
    return exists().where(
        other.submission_id == ShardJob.submission_id,
        other.attempt == ShardJob.attempt,
        other.task == ShardJob.task,
        other.state.in_((RUNNING, DONE)),
        other.fingerprint != fingerprint,
    )


def _before_deadline() -> ColumnElement[bool]:
    """The job's attempt is not past its deadline (a job planned before deadlines existed has none)."""
    return or_(ShardJob.deadline_at.is_(None), ShardJob.deadline_at > utcnow())


def _open_to(worker_id: int, replica_workers: int | None) -> ColumnElement[bool]:
    """Whether ``worker_id`` may compute the job, as far as replicas go: with replicas (``replica_workers`` set), the
    job's attempt is one replica of its submission, and its jobs are computed only by workers that contribute to no
    other replica of it, at most ``replica_workers`` of them (its coordinator included; a dissenter's re-run: its
    coordinator alone); without, always."""
    if replica_workers is None:
        return true()
    coordinator = coordinates(worker_id, ShardJob.submission_id, ShardJob.attempt)
    elsewhere = contributes_elsewhere(worker_id, ShardJob.submission_id, ShardJob.attempt)
    closed = attempt_closed_to(worker_id, ShardJob.submission_id, ShardJob.attempt, replica_workers)
    # A dissenter's re-run is its own alone (its coordinator, who computed a replica already): it is compared with its first run.
    return coordinator | (~rechecking(ShardJob.submission_id) & ~elsewhere & ~closed)


def _due() -> ColumnElement[bool]:
    """The job is not waiting out a platform failure's backoff."""
    return or_(ShardJob.retry_at.is_(None), ShardJob.retry_at <= utcnow())


@cache
def _query_job_in(*states: str) -> ColumnElement[bool]:
    """The job's task's query job (of the same attempt) is in one of ``states``."""
    query = _QUERY_SIBLING
    return exists().where(
        query.submission_id == ShardJob.submission_id,
        query.attempt == ShardJob.attempt,
        query.task == ShardJob.task,
        query.number == QUERY_JOB,
        query.state.in_(states),
    )


def _claimable(fingerprint: str, worker_id: int, replica_workers: int | None) -> Select[ShardJob]:
    """Queued jobs of running attempts, due (:func:`_due`) and before their deadline, whose task no other fingerprint
    pins, open to ``worker_id`` (:func:`_open_to`); a shard once its query job is running or done (:func:`_query_job_in`).

    Why a shard waits for its query job to be *running*: a shard job claimed early encodes its documents, then waits
    for the vectors; it must only ever wait on a job some worker is computing (a query job waits on nothing), never on
    a queued one that the waiting worker itself might be the only one left to take.
    """
    return (
        select(ShardJob)
        .join(Submission, Submission.id == ShardJob.submission_id)
        .where(
            ShardJob.state == QUEUED,
            Submission.state == State.RUNNING,
            Submission.attempt == ShardJob.attempt,
            ~_pinned_elsewhere(fingerprint),
            _due(),
            _before_deadline(),
            _open_to(worker_id, replica_workers),
            or_(ShardJob.number == QUERY_JOB, _query_job_in(RUNNING, DONE)),
            ~_task_failed(),
        )
        .order_by(ShardJob.submission_id, ShardJob.attempt, ShardJob.task, ShardJob.number)
        .limit(CLAIM_BATCH)
    )


def any_claimable(db: Database, worker_id: int, fingerprint: str, replica_workers: int | None = None) -> bool:
    """Whether ``worker_id``, of ``fingerprint`` (a digest), could claim a shard job now (a read: nothing is leased)."""
    with db.session() as session:
        return session.scalars(_claimable(fingerprint, worker_id, replica_workers).limit(1)).first() is not None


def claim(db: Database, worker_id: int, fingerprint: str, lease_s: float, replica_workers: int | None = None) -> ShardClaim | None:
    """Lease the first claimable shard job to ``worker_id`` (of ``fingerprint``, a digest); None when there is none.

    The running job's fingerprint is its task's pin from then on. Two first claims of one task by workers of
    different fingerprints must not both win, nor two workers be the one too many of a replica's attempt
    (``replica_workers``: :func:`_open_to`), and each guard reads the attempt's other rows: so each candidate is
    taken under its attempt's lock (:func:`_lock_attempt`), and the guard is read after it.
    """
    with db.session() as session:
        candidates = [
            (job.id, job.submission_id, job.attempt, job.task, job.number, job.tries)
            for job in session.scalars(_claimable(fingerprint, worker_id, replica_workers))
        ]
    for job_id, submission_id, attempt, task, number, tries in candidates:
        with db.session() as session:
            _lock_attempt(session, submission_id, attempt)
            expires = utcnow() + timedelta(seconds=lease_s)
            guard = (
                (ShardJob.id == job_id)
                & (ShardJob.tries == tries)
                & ~_pinned_elsewhere(fingerprint)
                & _before_deadline()
                & _open_to(worker_id, replica_workers)
            )
            taken = {"worker_id": worker_id, "lease_expires_at": expires, "tries": tries + 1, "fingerprint": fingerprint, "used": False}
            if move_shard(session, guard, ShardState.QUEUED, ShardState.RUNNING, **taken) == 1:
                return ShardClaim(job_id, submission_id, attempt, task, number, tries + 1, expires)
            # another worker was first, or the task got another fingerprint, the attempt its last worker, or its deadline: the next candidate
    return None


def _lock_attempt(session: Session, submission_id: str, attempt: int) -> None:
    """Serialise the claims of one attempt: SQLite's write lock (``BEGIN IMMEDIATE``, first in the transaction); on PostgreSQL
    the query job row of its first task ``FOR UPDATE`` (every task has one), so the guard that follows reads the attempt as committed."""
    if session.get_bind().dialect.name == "sqlite":
        session.connection().exec_driver_sql("BEGIN IMMEDIATE")
        return
    first = (
        select(ShardJob.id)
        .where(ShardJob.submission_id == submission_id, ShardJob.attempt == attempt, ShardJob.number == QUERY_JOB)
        .order_by(ShardJob.task)
        .limit(1)
    )
    session.execute(select(ShardJob.id).where(ShardJob.id == first.scalar_subquery()).with_for_update())


def _holding(job_id: int, tries: int, worker_id: int) -> ColumnElement[bool]:
    """The guard of every move of a held (running) job: this try, this worker, lease not expired."""
    return (ShardJob.id == job_id) & (ShardJob.tries == tries) & (ShardJob.worker_id == worker_id) & (ShardJob.lease_expires_at > utcnow())


def _grade_running() -> ColumnElement[bool]:
    """The job's attempt is still its submission's running attempt (a cancel or a lost coordinator ends its shard jobs' work)."""
    return exists().where(Submission.id == ShardJob.submission_id, Submission.state == State.RUNNING, Submission.attempt == ShardJob.attempt)


def renew(db: Database, job_id: int, tries: int, worker_id: int, lease_s: float) -> datetime | None:
    """Renew the lease of a held job; None when it is no longer this worker's, its grade ended or its task failed (stop working on it)."""
    expires = utcnow() + timedelta(seconds=lease_s)
    with db.session() as session:
        moved = session.execute(
            update(ShardJob)
            .where(_holding(job_id, tries, worker_id), ShardJob.state == RUNNING, _grade_running(), ~_task_failed())
            .values(lease_expires_at=expires, used=True)
            .execution_options(synchronize_session=False)
        )
        return expires if moved.rowcount == 1 else None  # type: ignore[attr-defined]


def mark_used(db: Database, job_id: int, tries: int, worker_id: int) -> bool:
    """The holder of a try fetched what the job needs: from now on the try is charged if its lease lapses; False when not held."""
    with db.session() as session:
        moved = session.execute(
            update(ShardJob)
            .where(_holding(job_id, tries, worker_id), ShardJob.state == RUNNING)
            .values(used=True)
            .execution_options(synchronize_session=False)
        )
        return moved.rowcount == 1  # type: ignore[attr-defined]


def release_waiting(db: Database, job_id: int, tries: int, worker_id: int) -> bool:
    """A held shard job waiting for query vectors whose query job went back to the queue (its holder lost its lease, or
    failed ``INFRA``, or its vectors were suspect): back to the queue, its try uncharged, so its worker is free to take
    the query job (with a pool of one worker, no one else would). False when not held or the query job is not queued."""
    with db.session() as session:
        waiting = _holding(job_id, tries, worker_id) & (ShardJob.number != QUERY_JOB) & _query_job_in(QUEUED)
        values = {"worker_id": None, "lease_expires_at": None, "unused": ShardJob.unused + 1}
        why = "released while waiting: its query job went back to the queue (no try charged)"
        return move_shard(session, waiting, ShardState.RUNNING, ShardState.QUEUED, **values, message=why) == 1


def _charged() -> ColumnElement[int]:
    """The tries that counted: every claim but those whose lease lapsed unused."""
    return ShardJob.tries - ShardJob.unused


def complete(db: Database, job_id: int, tries: int, worker_id: int, sha256: str) -> bool:
    """Record what a held job returned (its file is stored already); False when the job is no longer this worker's."""
    with db.session() as session:
        return move_shard(session, _holding(job_id, tries, worker_id), ShardState.RUNNING, ShardState.DONE, sha256=sha256, lease_expires_at=None) == 1


def fail(
    db: Database, job_id: int, tries: int, worker_id: int, code: FailureCode, message: str, *, max_tries: int, retry: QueueTiming | None = None
) -> bool:
    """A held job failed with ``code``: a participant's code fails the task; INFRA sends the job back to the queue alone.

    Once its retries are spent (:func:`_retried`) an INFRA failure fails the task INFRA too (as a lost lease does in
    :func:`reap`): a platform fault that repeats on every try must end the grade, not loop (the attempt is then the
    submission's INFRA failure). With ``retry`` (the competition's queue timing) the job waits out a backoff before it
    may be claimed again, and its platform failures are retried for ``infra_retry_s`` from the first beyond
    ``max_tries``: an engine that restarts within that loses the grade nothing but the try it broke.
    """
    values: dict[str, object] = {"lease_expires_at": None, "failure_code": code.value, "message": message[:2000]}
    infra = code is FailureCode.INFRA
    now = utcnow()
    with db.session() as session:
        held = session.get(ShardJob, job_id)
        requeue = infra and held is not None and _retried(held, max_tries, retry, now)
        if requeue:
            assert held is not None
            values.update(worker_id=None, **_backoff(held, retry, now))
        elif infra and held is not None and retry is not None:
            values["message"] = f"{message[:1800]} (the try limit reached and platform failures retried for {_lasted(held, now):.0f} s)"
        target = ShardState.QUEUED if requeue else ShardState.FAILED
        if move_shard(session, _holding(job_id, tries, worker_id), ShardState.RUNNING, target, **values) != 1:
            return False
        if not requeue:
            job = session.get(ShardJob, job_id)
            assert job is not None
            _skip_the_rest(session, job, code)
        return True


def _retried(job: ShardJob, max_tries: int, retry: QueueTiming | None, now: datetime) -> bool:
    """Whether a platform failure of ``job``'s current try is retried: while its charged tries are under ``max_tries``,
    and beyond them while its platform failures, from the first, have lasted less than ``retry.infra_retry_s``."""
    if job.tries - job.unused < max_tries:
        return True
    return retry is not None and job.infra_since is not None and _lasted(job, now) < retry.infra_retry_s


def _lasted(job: ShardJob, now: datetime) -> float:
    """Seconds since the job's first reported platform failure (0 for the first)."""
    return 0.0 if job.infra_since is None else (now - job.infra_since).total_seconds()


def _backoff(job: ShardJob, retry: QueueTiming | None, now: datetime) -> dict[str, object]:
    """The columns of a re-queue after a reported platform failure: not claimable before the backoff of its charged
    tries (:meth:`QueueTiming.backoff_s`), and the retry clock started at the first; none without ``retry``."""
    if retry is None:
        return {}
    wait = retry.backoff_s(job.tries - job.unused)
    return {"retry_at": now + timedelta(seconds=wait), "infra_since": job.infra_since or now}


def _same_task(job: ShardJob) -> ColumnElement[bool]:
    """The rows of ``job``'s task and attempt (``job`` among them)."""
    return (ShardJob.submission_id == job.submission_id) & (ShardJob.attempt == job.attempt) & (ShardJob.task == job.task)


def _skip_the_rest(session: Session, job: ShardJob, code: FailureCode) -> None:
    """``job`` failed its task: the task's queued jobs would only burn workers' time (running ones stop at their next renewal)."""
    move_shard(
        session, _same_task(job), ShardState.QUEUED, ShardState.SKIPPED, message=f"skipped: job {job.number} of the task failed ({code.value})"
    )


def requeue_suspect(
    db: Database, job_id: int, tries: int, worker_id: int, queries_sha256: str, message: str, *, max_tries: int, retry: QueueTiming | None = None
) -> bool:
    """A held shard job's query vectors (``queries_sha256``) do not fit its documents, and its worker's own do: the
    vectors are suspect, so the task's query job runs again and every shard job of the task, done or running with those
    vectors, is re-queued with it (their tries uncharged: their inputs were at fault, not they). False when not held.

    The query job's suspect try stays charged, so a worker that lies about query vectors (or about suspecting them)
    cannot loop the task for ever: once the query job has had ``max_tries`` tries, the report fails the task ``INFRA``
    (uncharged; the attempt is then re-run as the platform's failure). A report naming other vectors than the task's
    current ones (re-run already, or never these) is an ordinary ``INFRA`` failure of the job (:func:`fail`, with ``retry``).
    """
    with db.session() as session:
        job = session.get(ShardJob, job_id)
        # The query job made the vectors: it cannot suspect them (an ordinary INFRA failure, as is an unknown job).
        where = None if job is None or job.number == QUERY_JOB else (job.submission_id, job.attempt, job.task)
    if where is None:
        return fail(db, job_id, tries, worker_id, FailureCode.INFRA, message, max_tries=max_tries, retry=retry)
    with db.session() as session:
        _lock_attempt(session, where[0], where[1])  # one report at a time per task: two reports of one lie re-run the query job once
        query = session.scalar(
            select(ShardJob).where(
                ShardJob.submission_id == where[0], ShardJob.attempt == where[1], ShardJob.task == where[2], ShardJob.number == QUERY_JOB
            )
        )
        current = query is not None and query.state == DONE and query.sha256 == queries_sha256
        if current:
            assert query is not None
            return _rerun_queries(session, query, job_id, tries, worker_id, message, max_tries=max_tries)
    return fail(db, job_id, tries, worker_id, FailureCode.INFRA, message, max_tries=max_tries, retry=retry)


def _rerun_queries(session: Session, query: ShardJob, job_id: int, tries: int, worker_id: int, message: str, *, max_tries: int) -> bool:
    """In the task's locked transaction: re-queue the done query job and the task's done and running shards, the reporter
    among them (uncharged); or, at the query job's try limit, fail the reporter and so the task ``INFRA``."""
    reporter = _holding(job_id, tries, worker_id)
    if query.tries - query.unused >= max_tries:
        why = f"{message[:1500]} (the query job has had its {max_tries} tries)"
        values = {"lease_expires_at": None, "failure_code": FailureCode.INFRA.value, "message": why}
        if move_shard(session, reporter, ShardState.RUNNING, ShardState.FAILED, **values) != 1:
            return False
        failed = session.get(ShardJob, job_id)
        assert failed is not None
        _skip_the_rest(session, failed, FailureCode.INFRA)
        return True
    again = {"worker_id": None, "lease_expires_at": None, "sha256": None, "unused": ShardJob.unused + 1}
    if (
        move_shard(session, reporter, ShardState.RUNNING, ShardState.QUEUED, **again, failure_code=FailureCode.INFRA.value, message=message[:2000])
        != 1
    ):
        return False
    shards = _same_task(query) & (ShardJob.number != QUERY_JOB)
    for source in (ShardState.DONE, ShardState.RUNNING):  # a running one's holder is told at its next renewal (stale)
        move_shard(session, shards, source, ShardState.QUEUED, **again, message="re-queued: the query vectors it used were suspect")
    rerun = {"worker_id": None, "lease_expires_at": None, "sha256": None, "message": f"re-run: its vectors were suspect ({message[:1500]})"}
    moved = move_shard(session, (ShardJob.id == query.id) & (ShardJob.sha256 == query.sha256), ShardState.DONE, ShardState.QUEUED, **rerun)
    assert moved == 1, "the query job moved under the task's lock"
    return True


def reap(db: Database, *, max_tries: int, retry: QueueTiming | None = None) -> int:
    """Expired leases: each such job back to the queue alone (the task's other jobs keep their results), at once (its worker
    is gone, another may take it), or failed INFRA after ``max_tries`` charged tries (a lease that lapsed unused is not
    charged) once no retry of its reported platform failures is running (``retry``: :func:`fail`); then the attempts past
    their deadline (:func:`expire`)."""
    now = utcnow()
    with db.session() as session:
        expired = ShardJob.lease_expires_at <= now
        retrying: ColumnElement[bool] = false()  # NULL-safe: a job with no reported platform failure is bounded by its tries alone
        if retry is not None:
            retrying = ShardJob.infra_since.is_not(None) & (ShardJob.infra_since > now - timedelta(seconds=retry.infra_retry_s))
        # Nobody used it (a claim whose answer never reached a worker, a worker gone before its first fetch): no try charged.
        idle = move_shard(
            session,
            expired & ~ShardJob.used & ~_task_failed(),
            ShardState.RUNNING,
            ShardState.QUEUED,
            worker_id=None,
            lease_expires_at=None,
            unused=ShardJob.unused + 1,
            message="lease lapsed unused: re-queued, no try charged",
        )
        skipped = move_shard(
            session, expired & _task_failed(), ShardState.RUNNING, ShardState.SKIPPED, lease_expires_at=None, message="skipped: its task failed"
        )
        given_up = move_shard(
            session,
            expired & (_charged() >= max_tries) & ~retrying,
            ShardState.RUNNING,
            ShardState.FAILED,
            lease_expires_at=None,
            failure_code=FailureCode.INFRA.value,
            message="lease lost at the try limit",
        )
        requeued = move_shard(
            session, expired, ShardState.RUNNING, ShardState.QUEUED, worker_id=None, lease_expires_at=None, message="lease lost: re-run"
        )
        moved = idle + skipped + given_up + requeued
    return moved + expire(db)


def expire(db: Database, submission_id: str | None = None, attempt: int | None = None) -> int:
    """Attempts past their deadline (all, or this one): their queued and running jobs fail ``INFRA``, so each of their
    tasks has failed and the coordinator stops waiting; a running job's holder is told at its next renewal. Jobs moved."""
    why = {"lease_expires_at": None, "failure_code": FailureCode.INFRA.value, "message": "the sharded attempt's deadline passed"}
    with db.session() as session:
        due = ShardJob.deadline_at.is_not(None) & (ShardJob.deadline_at <= utcnow())
        if submission_id is not None:
            due = due & (ShardJob.submission_id == submission_id) & (ShardJob.attempt == attempt)
        # A read first: the coordinator asks twice a second, and on SQLite even an UPDATE that moves nothing takes the write lock.
        if session.scalar(select(ShardJob.id).where(due, ShardJob.state.in_((QUEUED, RUNNING))).limit(1)) is None:
            return 0
        return move_shard(session, due, ShardState.QUEUED, ShardState.FAILED, **why) + move_shard(
            session, due, ShardState.RUNNING, ShardState.FAILED, **why
        )


def progress(db: Database, submission_id: str, attempt: int) -> dict[str, TaskShards]:
    """Per task, where its shard jobs of this attempt stand."""
    tasks: dict[str, TaskShards] = {}
    with db.session() as session:
        rows = session.scalars(select(ShardJob).where(ShardJob.submission_id == submission_id, ShardJob.attempt == attempt).order_by(ShardJob.number))
        for job in rows:
            entry = tasks.setdefault(job.task, TaskShards())
            if job.state == DONE and job.sha256 is not None:
                entry.done[job.number] = job.sha256
            elif job.state == FAILED:
                # A row's code is read, never trusted: one no FailureCode names (an older or damaged row) is the platform's.
                entry.failure = entry.failure or (code_or_infra(job.failure_code).value, job.message)
            elif job.state == SKIPPED:
                continue  # its task failed: nothing to wait for
            else:
                entry.open += 1
    return tasks
