"""A second opinion on an untrusted worker: with ``replicas`` = k > 1, an ONNX grade is accepted only when k workers of one fingerprint agree.

Grades are deterministic on one machine and across threads and file orders, but
onnxruntime picks kernels by instruction set; so replicas are paired only between
workers of equal fingerprint (:mod:`grader.hosting.worker.fingerprint`, bound to the
worker's row: :mod:`grader.hosting.services.fingerprints`; a result's facts must name it). Each worker's outcome, the run digests
and the failure codes (the whole grade's, and each failed task's; never a message,
which may name the machine), is recorded as a :class:`~grader.hosting.db.models.Replica`.
Until k of them agree the job waits in ``replicating`` (event REPLICATE), where
:func:`claim` hands it only to a worker of the replicas' fingerprint that graded
none of them. A disagreement is written into the audit trail (which workers, which
tasks) and the job is graded by one more worker; at 2k - 1 replicas without k equal
ones it ends ``error`` (INFRA, not charged). Once k agree, the workers outside the
majority are flagged (``verdict = dissent``; ``grader admin workers``), unless they
only ran out of time or memory where the majority did not (``outvoted``: a submission
near its limits must not get honest workers distrusted); the last replica, always one
of the majority, is scored, once, by the ordinary path.

Docker submissions are not replicated: a container need not be deterministic, and a
participant must not be able to make honest workers look like liars.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from grader import jsonio
from grader.failures import FailureCode
from grader.hosting.clock import utcnow
from grader.hosting.context import ServerContext
from grader.hosting.db.models import Pin, Replica, ShardJob, Submission, Worker
from grader.hosting.protocol.messages import Verdict, VerdictStatus
from grader.hosting.queue import lifecycle
from grader.hosting.queue.replica_rows import contributors, open_replicas
from grader.hosting.results.recording import AuthenticResult, Grading
from grader.hosting.services import replica_recheck
from grader.hosting.services.replica_recheck import NONDETERMINISTIC, RECHECK, RERUN
from grader.hosting.states import REPLICATE, REQUEUE_OR_ERROR, ShardState, State
from grader.hosting.transparency.log_events import log_outcome

#: How many replicating jobs one claim looks at (oldest first).
CLAIM_BATCH = 20
#: The kinds replicated: ONNX only (docs/hosting.md, "Replicas").
REPLICATED_KINDS = frozenset({"onnx"})
#: Failures a slower or smaller machine may meet where another does not: a replica outvoted only by these is not flagged
#: (a submission near its limits must not get honest workers distrusted).
RESOURCE_CODES = frozenset({FailureCode.TIMEOUT.value, FailureCode.OOM.value})


def fingerprint_digest(fingerprint: Mapping[str, Any] | None) -> str | None:
    """The sha256 of a stated fingerprint's canonical JSON (what replicas are paired on); None for none."""
    if not fingerprint:
        return None
    return hashlib.sha256(jsonio.dumps(dict(fingerprint), sort_keys=True, ensure_ascii=True).encode("ascii")).hexdigest()


def claim(ctx: ServerContext, worker_id: int, digest: str | None) -> lifecycle.Claim | None:
    """The oldest ``replicating`` job this worker may grade (its fingerprint is the replicas', it graded none of them), leased to it.

    A competition whose ``replicas`` was lowered to 1 since (a restart with an edited file) hands its replicating jobs to any worker:
    they are ordinary jobs now, accepted on one result.
    """
    pairing = ctx.competition.replicas > 1
    if pairing and digest is None:
        return None
    with ctx.db.session() as session:
        waiting = session.scalars(
            select(Submission).where(Submission.state == State.REPLICATING).order_by(Submission.uploaded_at, Submission.id).limit(CLAIM_BATCH)
        ).all()
        for submission in waiting:
            rows = open_replicas(session, submission) if pairing else []
            if pairing and not _may_grade(session, rows, worker_id, digest):
                continue
            if (taken := lifecycle.take(session, submission, worker_id, ctx.competition.queue.lease_s)) is not None:
                return taken
    return None


def _may_grade(session: Session, rows: list[Replica], worker_id: int, digest: str | None) -> bool:
    """Whether ``worker_id`` (of fingerprint ``digest``) may grade the next replica of a job with replicas ``rows``.

    A pending re-run (a dissent's worker grading the job again) is its worker's alone. Otherwise a worker that computed
    anything of an earlier replica (coordinated it, or ran one of its shard jobs) grades none other.
    """
    if not rows or rows[0].fingerprint != digest:
        return False
    pending = [row for row in rows if row.verdict == RECHECK]
    if pending:
        return pending[0].blamed_worker_id == worker_id
    return worker_id not in contributors(session, rows)


def outcome_of(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """What replicas must agree on: the run digests and the failure codes; None for a result that can only end as a platform failure."""
    participant = {str(code) for code in lifecycle.PARTICIPANT_CODES}
    code, facts = payload.get("failure_code"), payload.get("facts")
    if code is not None and code not in participant:
        return None
    if not isinstance(facts, dict):
        return None if code is None else {"failure_code": code, "runs": {}, "task_failures": {}}
    task_failures: dict[str, str] = {}
    for name, entry in sorted((facts.get("tasks") or {}).items()):
        failure = entry.get("failure") if isinstance(entry, dict) else None
        if isinstance(failure, dict):
            if failure.get("code") not in participant:
                return None  # a platform failure of a task: the job is retried, it is no replica
            task_failures[str(name)] = str(failure["code"])
    runs = {str(task): str(digest) for task, digest in sorted((payload.get("runs") or {}).items())}
    return {"failure_code": code, "runs": runs, "task_failures": task_failures}


def _digest(outcome: Mapping[str, Any]) -> str:
    return hashlib.sha256(jsonio.dumps(dict(outcome), sort_keys=True, ensure_ascii=True).encode("ascii")).hexdigest()


def _runs_stored(ctx: ServerContext, submission_id: str, attempt: int, runs: Mapping[str, str]) -> bool:
    """Whether every run the result names was put for this attempt with the digest it names (else the ordinary path refuses it)."""
    folder = ctx.state.runs_dir(submission_id, attempt)
    for task, digest in runs.items():
        path = folder / f"{task}.run"
        if task not in ctx.tasks or not path.is_file() or _sha256(path) != digest:
            return False
    return True


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Where two outcomes differ: the whole grade's failure code, or the tasks whose run or failure code differ."""
    if a["failure_code"] != b["failure_code"]:
        return [f"failure code {a['failure_code'] or 'none'} / {b['failure_code'] or 'none'}"]
    tasks = sorted(set(a["runs"]) | set(b["runs"]) | set(a["task_failures"]) | set(b["task_failures"]))
    return [
        f"task {task}" for task in tasks if a["runs"].get(task) != b["runs"].get(task) or a["task_failures"].get(task) != b["task_failures"].get(task)
    ]


def _short_of_resources(dissent: Mapping[str, Any], agreed: Mapping[str, Any]) -> bool:
    """Whether ``dissent`` differs from ``agreed`` only by failing with a resource code (TIMEOUT, OOM) where the majority did not."""
    if dissent["failure_code"] != agreed["failure_code"]:
        return dissent["failure_code"] in RESOURCE_CODES
    for task in set(dissent["runs"]) | set(agreed["runs"]) | set(dissent["task_failures"]) | set(agreed["task_failures"]):
        same = dissent["runs"].get(task) == agreed["runs"].get(task) and dissent["task_failures"].get(task) == agreed["task_failures"].get(task)
        if not same and dissent["task_failures"].get(task) not in RESOURCE_CODES:
            return False
    return True


def shard_outputs(session: Session, submission_id: str, attempt: int) -> dict[str, dict[str, dict[str, Any]]]:
    """What each shard job of a sharded attempt returned and who computed it: ``{task: {number: {"output", "worker"}}}``.

    ``output`` is the sha256 the job returned, or ``failed:CODE``; jobs that ended otherwise (skipped, still open) are left
    out. Empty for an unsharded attempt. Every replica of a sharded grade has the same plan, so the jobs pair up.
    """
    outputs: dict[str, dict[str, dict[str, Any]]] = {}
    ended = (ShardState.DONE.value, ShardState.FAILED.value)
    jobs = session.scalars(
        select(ShardJob).where(
            ShardJob.submission_id == submission_id, ShardJob.attempt == attempt, ShardJob.state.in_(ended), ShardJob.worker_id.is_not(None)
        )
    ).all()
    for job in jobs:
        output = job.sha256 if job.state == ShardState.DONE.value else f"failed:{job.failure_code}"
        outputs.setdefault(job.task, {})[str(job.number)] = {"output": output, "worker": job.worker_id}
    return outputs


def blamed_worker(dissent: Replica, agreed: Replica) -> int:
    """The worker a dissenting replica is charged to: the worker of its first job whose output differs from the majority's
    while its inputs agree (:func:`grader.hosting.services.replica_recheck.first_difference`); its coordinator when every
    job agrees (or the grade is not sharded).

    So an honest coordinator, or honest shard workers, of a replica that a liar poisoned are not flagged; the liar is.
    """
    where = replica_recheck.first_difference(dissent.detail, agreed.detail)
    if where is None:
        return dissent.worker_id
    task, number = where
    return int(dissent.detail["jobs"][task][number]["worker"])


def _mismatch(rows: list[Replica], names: Mapping[int, str]) -> str:
    """The audit line of the newest replica's disagreements with the earlier ones: which workers, which tasks."""
    new = rows[-1]
    parts = [
        f"worker {names.get(new.worker_id, new.worker_id)} (attempt {new.attempt}) and worker {names.get(old.worker_id, old.worker_id)} "
        f"(attempt {old.attempt}) disagree on {', '.join(_differences(new.detail, old.detail))}"
        for old in rows[:-1]
        if old.outcome != new.outcome
    ]
    return "; ".join(parts)


@dataclass(frozen=True)
class ParkedAcceptance:
    """The majority's parked result, confirmed by a dissenter's re-run: to be scored and accepted under the re-run's lease."""

    authentic: AuthenticResult
    #: (attempt, worker id) of the re-run, which holds the lease the acceptance is guarded by
    lease: tuple[int, int]


@dataclass(frozen=True)
class _Unpark:
    """What the vote decided: accept the result parked for ``attempt`` of ``worker_id`` (its sha256 proves it ours)."""

    attempt: int
    worker_id: int
    sha256: str


def record(ctx: ServerContext, authentic: AuthenticResult) -> Verdict | ParkedAcceptance | None:
    """Record a verified result as a replica and decide; None when the ordinary path goes on (outside the transaction of the vote).

    None: the job is not replicated (``replicas`` = 1, a Docker submission), the result cannot be a replica
    (a platform failure, runs not stored as named: the ordinary path says so), or the replicas now agree with
    no dissent (the ordinary path scores this one, which is of the majority). A :class:`ParkedAcceptance`: a
    dissenter's re-run confirmed its dissent, so the majority's parked result is accepted. A Verdict otherwise:
    ``replicated`` (another worker grades it, or the dissenter re-runs it), ``requeued`` (not pairable),
    ``error`` (no majority, or two outputs for one input), ``stale`` (the lease passed on since the result was verified).
    """
    grading, posted = authentic.grading, authentic.posted
    if ctx.competition.replicas <= 1 or grading.kind not in REPLICATED_KINDS:
        return None
    outcome = outcome_of(posted.model_dump())
    if outcome is None or not _runs_stored(ctx, grading.submission_id, grading.attempt, outcome["runs"]):
        return None
    facts = posted.facts
    stated = fingerprint_digest(facts.get("fingerprint")) if isinstance(facts, dict) and isinstance(facts.get("fingerprint"), dict) else None
    decided = _vote(ctx, authentic, outcome, stated)
    if isinstance(decided, Verdict) and decided.state == State.REPLICATING.value:
        ctx.dispatcher.dispatch(grading.submission_id)  # after the commit: a waiting worker of the fingerprint may take it
    if isinstance(decided, _Unpark):
        return _parked(ctx, grading, decided)
    return decided


def _parked(ctx: ServerContext, lease: Grading, parked: _Unpark) -> ParkedAcceptance:
    """The parked result as it was verified when posted, graded by its own worker and attempt, guarded by ``lease``."""
    posted = replica_recheck.unpark(ctx.state, lease.submission_id, parked.attempt, parked.sha256)
    with ctx.db.session() as session:
        submission = session.get(Submission, lease.submission_id)
        worker = session.get(Worker, parked.worker_id)
        assert submission is not None and worker is not None
        pin = session.get(Pin, submission.pin_id)
        assert pin is not None
        grading = Grading.of(submission, parked.attempt, worker, pin)
    return ParkedAcceptance(AuthenticResult(grading, posted), (lease.attempt, lease.worker_id))


def _unpairable(rows: list[Replica], worker: Worker, fingerprint: str | None, stated: str | None) -> str | None:
    """Why this result cannot be counted with ``rows`` (the attempt is then retried), or None."""
    if fingerprint is None:
        return "no fingerprint is bound to the worker: a replica cannot be paired"
    if stated is not None and stated != fingerprint:
        return "the result's fingerprint is not the one bound to the worker"
    if rows and rows[0].fingerprint != fingerprint:
        return "the worker's fingerprint is not that of the job's replicas"
    if any(row.worker_id == worker.id for row in rows):
        return "this worker graded a replica of this job already"
    return None


def _vote(ctx: ServerContext, authentic: AuthenticResult, outcome: dict[str, Any], stated: str | None) -> Verdict | _Unpark | None:
    """In one transaction: record the replica, then accept (None), wait for another or a dissenter's re-run
    (``replicated``), or end ``error``; a re-run's result settles its dissent (:func:`_settle`)."""
    grading = authentic.grading
    worker_id, submission_id, attempt = grading.worker_id, grading.submission_id, grading.attempt
    needed = ctx.competition.replicas
    actor = f"worker:{worker_id}"
    with ctx.db.session() as session:
        submission = session.get(Submission, submission_id)
        if not lifecycle.holds_lease(submission, attempt, worker_id):
            return Verdict(status=VerdictStatus.STALE)
        assert submission is not None
        who = session.get(Worker, worker_id)
        assert who is not None
        fingerprint = who.fingerprint  # the one bound to the worker (services.fingerprints), never the result's word
        rows = open_replicas(session, submission)
        pending = [r for r in rows if r.verdict == RECHECK]
        votes = [r for r in rows if r.verdict != RERUN]
        why = _unpairable(votes, who, fingerprint, stated) if not pending else _not_the_rerun(pending[0], who, fingerprint, stated)
        if why is not None:
            moved = lifecycle.retry_or_error(session, submission, actor=actor, reason=f"attempt {attempt}: {why}")
            if moved is State.ERROR and ctx.log is not None:  # the attempt limit: logged as the grade's outcome (every end of a grade is in the log)
                log_outcome(session, ctx.log, submission, attempt=attempt, status=moved.value, failure_code=lifecycle.INFRA)
            status = VerdictStatus.REQUEUED if moved in (State.QUEUED, State.REPLICATING) else VerdictStatus.ERROR
            return Verdict(status=status, state=moved.value if moved else None)
        assert fingerprint is not None
        jobs = shard_outputs(session, submission_id, attempt)
        if pending:
            return _settle(ctx, session, submission, votes, pending[0], attempt, outcome, jobs, actor)
        row = Replica(
            submission_id=submission_id,
            attempt=attempt,
            pin_id=submission.pin_id,
            worker_id=worker_id,
            fingerprint=fingerprint,
            outcome=_digest(outcome),
            detail=outcome,
            created_at=utcnow(),
        )
        votes.append(row)
        names = {w.id: w.name for w in session.scalars(select(Worker).where(Worker.id.in_({r.worker_id for r in votes}))).all()}
        mismatch = _mismatch(votes, names)
        # The outcome digest is of the outcome alone; the shard jobs' outputs say whom a dissent is charged to.
        row.detail = {**outcome, "mismatch": mismatch, "jobs": jobs}
        session.add(row)
        best, count = Counter(r.outcome for r in votes).most_common(1)[0]
        if count >= needed:
            agreed = next(r for r in votes if r.outcome == best)
            for r in votes:
                r.verdict = "majority" if r.outcome == best else "outvoted" if _short_of_resources(r.detail, agreed.detail) else RECHECK
                r.blamed_worker_id = blamed_worker(r, agreed) if r.verdict == RECHECK else None
            rechecks = [r for r in votes if r.verdict == RECHECK]
            if not rechecks:
                return None
            # Before anything is accepted, the dissenter grades the job again: a liar, or a model that is not deterministic?
            row.detail = {**row.detail, "parked": replica_recheck.park(ctx.state, authentic.posted, submission_id, attempt)}
            lifecycle.end_attempt(session, submission_id, attempt, "replica")
            reason = f"attempt {attempt}: {count} of {needed} replicas agree; {_rerun_of(rechecks[0], names)}"
            return _replicating(session, submission, actor, reason)
        lifecycle.end_attempt(session, submission_id, attempt, "replica")
        if len(votes) >= 2 * needed - 1:
            for r in votes:
                r.verdict = "undecided"
            reason = f"attempt {attempt}: no {needed} of {len(votes)} replicas agree; {mismatch}"
            return _errored(ctx, session, submission, actor, reason, lifecycle.INFRA)
        reason = f"attempt {attempt}: replica {len(votes)} recorded, {count} of {needed} agree" + (f"; {mismatch}" if mismatch else "")
        return _replicating(session, submission, actor, reason)


def _not_the_rerun(pending: Replica, worker: Worker, fingerprint: str | None, stated: str | None) -> str | None:
    """Why this result is not the re-run a pending dissent waits for (the attempt is then retried), or None."""
    if fingerprint is None or (stated is not None and stated != fingerprint) or fingerprint != pending.fingerprint:
        return "the re-run's fingerprint is not that of the job's replicas"
    if worker.id != pending.blamed_worker_id:
        return "the job waits for a re-run by the worker its dissent is charged to"
    return None


def _rerun_of(pending: Replica, names: Mapping[int, str]) -> str:
    """The audit line of a dissent sent back to its worker."""
    blamed = pending.blamed_worker_id
    who = names.get(blamed, blamed) if blamed is not None else "?"
    return f"worker {who} grades it again (the replica of attempt {pending.attempt} differs from the majority's)"


def _settle(
    ctx: ServerContext,
    session: Session,
    submission: Submission,
    votes: list[Replica],
    pending: Replica,
    attempt: int,
    outcome: dict[str, Any],
    jobs: dict[str, Any],
    actor: str,
) -> Verdict | _Unpark:
    """A dissenter's re-run came in: its dissent stands or is ``nondeterministic``; then the next re-run, the end
    ``error`` ``NONDETERMINISTIC`` (no one flagged, nothing charged), or the majority's parked result accepted."""
    agreed = next(r for r in votes if r.verdict == "majority")
    verdict, why = replica_recheck.settle(pending, agreed, _digest(outcome), jobs)
    session.add(
        Replica(
            submission_id=submission.id,
            attempt=attempt,
            pin_id=submission.pin_id,
            worker_id=pending.blamed_worker_id,
            fingerprint=pending.fingerprint,
            outcome=_digest(outcome),
            detail={**outcome, "jobs": jobs, "mismatch": why, "rerun_of": pending.attempt},
            verdict=RERUN,
            created_at=utcnow(),
        )
    )
    pending.verdict = verdict  # its worker stays named: not flagged, but a host sees whose re-runs gave two outputs
    reason = f"attempt {attempt}: re-run of the replica of attempt {pending.attempt}: {why}"
    if rest := [r for r in votes if r.verdict == RECHECK]:
        lifecycle.end_attempt(session, submission.id, attempt, "rerun")
        return _replicating(session, submission, actor, f"{reason}; {_rerun_of(rest[0], {})}")
    if any(r.verdict == NONDETERMINISTIC for r in votes):
        lifecycle.end_attempt(session, submission.id, attempt, "rerun")
        return _errored(ctx, session, submission, actor, reason, FailureCode.NONDETERMINISTIC.value)
    parked = next(r for r in votes if r.detail.get("parked"))
    return _Unpark(parked.attempt, parked.worker_id, str(parked.detail["parked"]))


def _replicating(session: Session, submission: Submission, actor: str, reason: str) -> Verdict:
    """Back to ``replicating``: another worker grades the job, or a dissenter grades it again."""
    lifecycle.move(
        session,
        submission,
        State.REPLICATING,
        event=REPLICATE,
        actor=actor,
        reason=reason[:2000],
        attempt_limit=submission.attempt_limit + 1,  # a replica is no lost attempt: the retry budget stays whole
        dispatched_at=utcnow(),
        lease_worker_id=None,
        lease_expires_at=None,
    )
    return Verdict(status=VerdictStatus.REPLICATED, state=State.REPLICATING.value)


def _errored(ctx: ServerContext, session: Session, submission: Submission, actor: str, reason: str, code: str) -> Verdict:
    """End the job ``error`` with ``code`` (never charged), logged as the grade's outcome (no report is signed)."""
    errored = lifecycle.move(
        session,
        submission,
        State.ERROR,
        event=REQUEUE_OR_ERROR,
        actor=actor,
        reason=reason[:2000],
        failure_code=code,
        lease_worker_id=None,
        lease_expires_at=None,
    )
    if errored and ctx.log is not None:
        log_outcome(session, ctx.log, submission, attempt=submission.attempt, status=State.ERROR.value, failure_code=code)
    return Verdict(status=VerdictStatus.ERROR, state=State.ERROR.value)


def worker_standing(session: Session, worker_id: int) -> dict[str, int]:
    """A worker's replica record: replicas it coordinated, the dissents charged to it (``dissents``: the host's flag), and
    its re-runs that gave two outputs for one input (``nondeterministic``: no flag)."""
    coordinated = session.scalar(select(func.count()).select_from(Replica).where(Replica.worker_id == worker_id)) or 0
    charged = session.scalar(select(func.count()).select_from(Replica).where(Replica.verdict == "dissent", Replica.blamed_worker_id == worker_id))
    # Not a flag: a model that is not deterministic does it to honest workers too; but a worker that lies once and
    # tells the truth on its re-run does it as well, so the host sees how often each worker's re-runs did.
    twice = session.scalar(
        select(func.count()).select_from(Replica).where(Replica.verdict == NONDETERMINISTIC, Replica.blamed_worker_id == worker_id)
    )
    return {"replicas": int(coordinated), "dissents": int(charged or 0), "nondeterministic": int(twice or 0)}
