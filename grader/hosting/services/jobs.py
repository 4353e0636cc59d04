"""The worker's side of the queue, as the worker API asks for it: claim a job, renew its lease, fetch its upload, post its result.

Each function opens its own transactions (through :mod:`grader.hosting.queue.lifecycle`
and :mod:`grader.hosting.results.recording`); the routes only translate HTTP.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from pathlib import Path

from grader.grading import score_process
from grader.hosting.clock import iso, utcnow
from grader.hosting.context import ServerContext
from grader.hosting.db.models import Submission, Worker
from grader.hosting.identity.principal import Principal
from grader.hosting.identity.workers import job_refusal, record_key
from grader.hosting.leaderboard.parts import acceptance_scorer
from grader.hosting.protocol.messages import HeartbeatRequest, Job, Phase, TaskProgress, Verdict, WorkerResult
from grader.hosting.queue import lifecycle, shard_jobs
from grader.hosting.results import recording, run_scoring
from grader.hosting.results.grading_adapter import limits_to_json
from grader.hosting.results.recording import AuthenticResult
from grader.hosting.services import replication, shard_grading
from grader.hosting.services.worker_copy import ranking_data

#: How long a long-poll waits at most between looks at the database: a dispatch wakes it sooner, but jobs queued
#: by another process (another server on the same database, ``grader admin rejudge``) are seen only by a look.
POLL_S = 0.5


def _job(ctx: ServerContext, claim: lifecycle.Claim, *, sharded: bool = False) -> Job:
    with ctx.db.session() as session:
        submission = session.get(Submission, claim.submission_id)
        assert submission is not None
        split = submission.split
    # Workers get the judged queries' pseudonyms and the digest of their pseudonymous copy; never the judgements,
    # the real ids or the blinding key. Read outside the session: the first job exports the copy.
    judged, ranking_digests = ranking_data(ctx, split)
    with ctx.db.session() as session:
        submission = session.get(Submission, claim.submission_id)
        assert submission is not None
        return Job(
            competition=ctx.competition.name,
            submission_id=submission.id,
            attempt=claim.attempt,
            lease_expires_at=iso(claim.lease_expires_at),
            lease_s=ctx.competition.queue.lease_s,
            heartbeat_s=ctx.competition.queue.heartbeat_s,
            upload_sha256=submission.upload_sha256,
            benchmark=ctx.benchmark_target,
            tasks=ctx.tasks,
            split=submission.split,
            track=submission.track,
            limits=limits_to_json(ctx.competition.limits),
            judged=judged,
            ranking_digests=ranking_digests,
            max_unpack_ratio=ctx.competition.unpack.max_unpack_ratio,
            max_unpacked_bytes=ctx.competition.unpack.max_unpacked_bytes,
            sharded=sharded,
        )


def refusal(ctx: ServerContext, worker: Principal) -> str | None:
    """Why ``worker`` may not claim jobs or fetch uploads now (:func:`grader.hosting.identity.workers.job_refusal`), or None."""
    with ctx.db.session() as session:
        row = session.get(Worker, worker.id)
        assert row is not None  # authenticated a moment ago; workers are revoked, never deleted
        return job_refusal(row)


class Empty(Enum):
    """What a look at the queue that leased nothing tells its long-poll."""

    #: Nothing for this worker yet: wait for a dispatch (or the next poll) and look again.
    WAIT = "wait"
    #: Answer "none" now: a shard job is free for this worker, which it takes first.
    END = "end"


def claim_once(ctx: ServerContext, worker: Principal, digest: str | None) -> Job | Empty:
    """One look at the queue: the oldest job ``worker`` may take, leased to it, or why there is none.

    ``digest`` is the fingerprint bound to the worker (:func:`grader.hosting.services.fingerprints.for_claim`).
    A replicating job the worker may grade (its fingerprint, of digest ``digest``, is the replicas', it graded
    none) comes first: a replicated job waits on it. A few short transactions; the long-poll around the looks is
    the claim route's (:mod:`grader.hosting.api.long_poll`), which waits between them holding no thread.
    """
    ctx.presence.seen(worker.id)  # a worker that looks is connected and free: a waiting grade's estimate counts it
    claimed = replication.claim(ctx, worker.id, digest) or lifecycle.claim(ctx.db, worker.id, ctx.competition.queue.lease_s)
    if claimed is not None:
        score_process.warm()  # its scoring will need a scoring process: started now, not on the grade's last step
        # A sharded ONNX grade: its shard jobs are queued now; the claiming worker coordinates.
        return _job(ctx, claimed, sharded=shard_grading.plan_claimed(ctx, claimed))
    sharding = ctx.competition.sharding.shard_documents is not None
    cap = ctx.competition.sharding.replica_cap(ctx.competition.replicas)
    if digest is not None and sharding and shard_jobs.any_claimable(ctx.db, worker.id, digest, cap):
        return Empty.END  # a shard job became free (its task's query vectors came in): the worker takes it first
    return Empty.WAIT


def renew(ctx: ServerContext, worker: Principal, submission_id: str, beat: HeartbeatRequest) -> datetime | None:
    """Renew ``worker``'s lease of the attempt and keep its progress; None when it is stale or cancelled (the worker stops grading).

    A report naming a task this competition does not grade is dropped whole (a worker's words are shown to a
    participant: only the competition's own task names ever are), and so is one claiming ``scoring``: the server's
    own step, which would hide a sharded grade's shards; the lease is renewed all the same.
    """
    ctx.presence.seen(worker.id)
    named = {entry.task for entry in beat.progress}
    own = all(entry.phase is not Phase.SCORING for entry in beat.progress)
    progress = None
    if beat.progress and own and named <= set(ctx.tasks) and len(named) == len(beat.progress):
        progress = {"tasks": [entry.model_dump(mode="json", exclude_none=True) for entry in beat.progress]}
    return lifecycle.heartbeat(ctx.db, submission_id, beat.attempt, worker.id, ctx.competition.queue.lease_s, progress)


def _scoring(ctx: ServerContext, result: AuthenticResult) -> None:
    """The posted runs are being scored: every ranked task says so (the server's own report, kept at once)."""
    runs = sorted(result.posted.runs)
    tasks = [TaskProgress(task=task, phase=Phase.SCORING).model_dump(mode="json", exclude_none=True) for task in runs]
    if tasks:
        with ctx.db.session() as session:
            lifecycle.record_progress(session, result.grading.submission_id, result.grading.attempt, {"tasks": tasks}, utcnow(), always=True)


def upload_of(ctx: ServerContext, worker: Principal, submission_id: str, attempt: int) -> Path | None:
    """The stored upload of a job ``worker`` holds the lease of; None when it does not (a stale attempt)."""
    with ctx.db.session() as session:
        submission = session.get(Submission, submission_id) if len(submission_id) <= 40 else None
        if submission is None or not lifecycle.holds_lease(submission, attempt, worker.id):
            return None
        return ctx.state.uploads / submission.upload_path


def run_slot(ctx: ServerContext, worker: Principal, submission_id: str, attempt: int, task: str) -> tuple[Path, int] | None:
    """Where ``worker`` may put a task's compact run for this attempt, and its bound (:func:`grader.hosting.results.run_scoring.run_slot`)."""
    return run_scoring.run_slot(ctx, worker.id, submission_id, attempt, task)


def register_key(ctx: ServerContext, worker: Principal, public_key: str) -> str:
    """Record a remote worker's key on first use: ``same``, ``recorded``, ``different`` (refused) or ``local``."""
    with ctx.db.session() as session:
        return record_key(session, worker.id, public_key)


def post_result(ctx: ServerContext, worker: Principal, submission_id: str, result: WorkerResult) -> Verdict:
    """Verify the worker's result once, score its runs, then judge and record it (:mod:`grader.hosting.results.recording`).

    ``stale`` or ``refused`` when it does not verify. A replicated job's result is first recorded as a replica
    (:func:`grader.hosting.services.replication.record`): only the result that makes a majority goes on to be scored.
    Scoring runs outside any transaction; the lease is checked again where the result is recorded.
    """
    authentic = recording.verify(ctx.db, worker.id, submission_id, result)
    if isinstance(authentic, Verdict):
        return authentic
    decided = replication.record(ctx, authentic)
    if isinstance(decided, Verdict):
        return decided
    # A dissenter's re-run that confirmed its dissent: the majority's parked result is scored, under the re-run's lease.
    accepted, lease = (authentic, None) if decided is None else (decided.authentic, decided.lease)
    _scoring(ctx, accepted)
    return recording.accept_result(
        ctx.db,
        ctx.state,
        ctx.signing_key,
        run_scoring.score(ctx, accepted),
        parts=acceptance_scorer(ctx),
        blinding_key_id=None if ctx.blinding_key is None else ctx.blinding_key.key_id,
        host_log=ctx.log,
        lease=lease,
        retry=ctx.competition.queue,
    )
