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
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from grader import jsonio
from grader.failures import FailureCode
from grader.hosting.clock import utcnow
from grader.hosting.context import ServerContext
from grader.hosting.db.models import Replica, ShardJob, Submission, Worker
from grader.hosting.protocol.messages import Verdict, VerdictStatus
from grader.hosting.queue import lifecycle
from grader.hosting.queue.replica_rows import CONTRIBUTED, contributors, open_replicas
from grader.hosting.results.recording import AuthenticResult
from grader.hosting.states import REPLICATE, REQUEUE_OR_ERROR, State
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
            # A worker that computed anything of an earlier replica (coordinated it, or ran one of its shard jobs) grades none other.
            if pairing and (not rows or rows[0].fingerprint != digest or worker_id in contributors(session, rows)):
                continue
            if (taken := lifecycle.take(session, submission, worker_id, ctx.competition.queue.lease_s)) is not None:
                return taken
    return None


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
    jobs = session.scalars(
        select(ShardJob).where(ShardJob.submission_id == submission_id, ShardJob.attempt == attempt, ShardJob.state.in_(CONTRIBUTED))
    ).all()
    for job in jobs:
        if job.worker_id is None or job.state == "running":
            continue
        output = job.sha256 if job.state == "done" else f"failed:{job.failure_code}"
        outputs.setdefault(job.task, {})[str(job.number)] = {"output": output, "worker": job.worker_id}
    return outputs


def blamed_worker(dissent: Replica, agreed: Replica) -> int:
    """The worker a dissenting replica is charged to: the worker of its first job (by task, the query job, then shards by
    number) whose output differs from the majority's while its inputs agree; its coordinator when every job agrees.

    A shard's inputs are its task's query vectors (and the upload, the same for all): once a task's query vectors differ,
    that query job is the first difference, and the shards that searched with them are not blamed. So an honest
    coordinator, or honest shard workers, of a replica that a liar poisoned are not flagged; the liar is.
    """
    mine, theirs = dissent.detail.get("jobs") or {}, agreed.detail.get("jobs") or {}
    for task in sorted(set(mine) & set(theirs)):
        for number in sorted(set(mine[task]) & set(theirs[task]), key=int):
            if mine[task][number]["output"] != theirs[task][number]["output"]:
                return int(mine[task][number]["worker"])
    return dissent.worker_id


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


def record(ctx: ServerContext, authentic: AuthenticResult) -> Verdict | None:
    """Record a verified result as a replica and decide; None when the ordinary path goes on (outside the transaction of the vote).

    None: the job is not replicated (``replicas`` = 1, a Docker submission), the result cannot be a replica
    (a platform failure, runs not stored as named: the ordinary path says so), or the replicas now agree
    (the ordinary path scores this one, which is of the majority). A Verdict otherwise:
    ``replicated`` (another worker grades it), ``requeued`` (not pairable), ``error`` (no majority), ``stale``
    (the lease passed on since the result was verified).
    """
    grading, posted = authentic.grading, authentic.posted
    if ctx.competition.replicas <= 1 or grading.kind not in REPLICATED_KINDS:
        return None
    outcome = outcome_of(posted.model_dump())
    if outcome is None or not _runs_stored(ctx, grading.submission_id, grading.attempt, outcome["runs"]):
        return None
    facts = posted.facts
    stated = fingerprint_digest(facts.get("fingerprint")) if isinstance(facts, dict) and isinstance(facts.get("fingerprint"), dict) else None
    verdict = _vote(ctx, grading.worker_id, grading.submission_id, grading.attempt, outcome, stated)
    if verdict is not None and verdict.state == State.REPLICATING.value:
        ctx.dispatcher.dispatch(grading.submission_id)  # after the commit: a waiting worker of the fingerprint may take it
    return verdict


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


def _vote(ctx: ServerContext, worker_id: int, submission_id: str, attempt: int, outcome: dict[str, Any], stated: str | None) -> Verdict | None:
    """In one transaction: record the replica, then accept (None), wait for another (``replicated``), or end ``error``."""
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
        if (why := _unpairable(rows, who, fingerprint, stated)) is not None:
            moved = lifecycle.retry_or_error(session, submission, actor=actor, reason=f"attempt {attempt}: {why}")
            if moved is State.ERROR and ctx.log is not None:  # the attempt limit: logged as the grade's outcome (every end of a grade is in the log)
                log_outcome(session, ctx.log, submission, attempt=attempt, status=moved.value, failure_code=lifecycle.INFRA)
            status = VerdictStatus.REQUEUED if moved in (State.QUEUED, State.REPLICATING) else VerdictStatus.ERROR
            return Verdict(status=status, state=moved.value if moved else None)
        assert fingerprint is not None
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
        rows.append(row)
        names = {w.id: w.name for w in session.scalars(select(Worker).where(Worker.id.in_({r.worker_id for r in rows}))).all()}
        mismatch = _mismatch(rows, names)
        # The outcome digest is of the outcome alone; the shard jobs' outputs say whom a dissent is charged to.
        row.detail = {**outcome, "mismatch": mismatch, "jobs": shard_outputs(session, submission_id, attempt)}
        session.add(row)
        best, count = Counter(r.outcome for r in rows).most_common(1)[0]
        if count >= needed:
            agreed = next(r for r in rows if r.outcome == best)
            for r in rows:
                r.verdict = "majority" if r.outcome == best else "outvoted" if _short_of_resources(r.detail, agreed.detail) else "dissent"
                r.blamed_worker_id = blamed_worker(r, agreed) if r.verdict == "dissent" else None
            return None
        lifecycle.end_attempt(session, submission_id, attempt, "replica")
        if len(rows) >= 2 * needed - 1:
            for r in rows:
                r.verdict = "undecided"
            errored = lifecycle.move(
                session,
                submission,
                State.ERROR,
                event=REQUEUE_OR_ERROR,
                actor=actor,
                reason=f"attempt {attempt}: no {needed} of {len(rows)} replicas agree; {mismatch}"[:2000],
                failure_code=lifecycle.INFRA,
                lease_worker_id=None,
                lease_expires_at=None,
            )
            if errored and ctx.log is not None:  # no report signed: logged as the grade's outcome all the same
                log_outcome(session, ctx.log, submission, attempt=attempt, status=State.ERROR.value, failure_code=lifecycle.INFRA)
            return Verdict(status=VerdictStatus.ERROR, state=State.ERROR.value)
        lifecycle.move(
            session,
            submission,
            State.REPLICATING,
            event=REPLICATE,
            actor=actor,
            reason=(f"attempt {attempt}: replica {len(rows)} recorded, {count} of {needed} agree" + (f"; {mismatch}" if mismatch else ""))[:2000],
            attempt_limit=submission.attempt_limit + 1,  # a replica is no lost attempt: the retry budget stays whole
            dispatched_at=utcnow(),
            lease_worker_id=None,
            lease_expires_at=None,
        )
        return Verdict(status=VerdictStatus.REPLICATED, state=State.REPLICATING.value)


def worker_standing(session: Session, worker_id: int) -> dict[str, int]:
    """A worker's replica record: replicas it coordinated, and the dissents charged to it (``dissents``: the host's flag)."""
    coordinated = session.scalar(select(func.count()).select_from(Replica).where(Replica.worker_id == worker_id)) or 0
    charged = session.scalar(select(func.count()).select_from(Replica).where(Replica.verdict == "dissent", Replica.blamed_worker_id == worker_id))
    return {"replicas": int(coordinated), "dissents": int(charged or 0)}
