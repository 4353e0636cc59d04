"""Sharded grades over the worker API: planning, claiming, storing shard outputs, merging.

An ONNX submission of a competition with ``[sharding] shard_documents`` is claimed like any
other (the claiming worker holds the submission's lease and coordinates); at that claim the
attempt's shard jobs are planned (:func:`plan_claimed`): per task a query job and one job per
shard of whole encoding chunks (:func:`grader.grading.shard_input.shard_total`, from the worker copy's manifest). Any worker then
takes them (:func:`claim`; shards once their task's query job is running: a shard encodes its documents
while the query job runs), fetches the upload and, once they are in, the query vectors (:func:`upload_of`,
:func:`query_vectors_of`), and puts its output
(:func:`output_slot`, :func:`stored`). When every job of every task is done, :func:`status`
merges (in the background: :mod:`grader.hosting.services.shard_merges`) each task's shard runs into the one compact run the coordinator names in its result
(:func:`grader.retrieval.shard_stream.merge_shard_files`, a block of queries at a time), and the server scores it as it
scores any run. The submission is charged once: shards are rows of its attempt, not submissions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, partial
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader import jsonio
from grader.data.benchmark import load_benchmark_folder
from grader.data.registry import resolve_benchmark
from grader.errors import TaskFailure
from grader.failures import FailureCode
from grader.files import atomic_write_bytes
from grader.grading.cost import cost_block
from grader.grading.shard_cost import task_entry
from grader.grading.shard_input import corpus_size, shard_total
from grader.grading.worker_cost import check_figures
from grader.hosting.allocator import release_free_memory
from grader.hosting.context import ServerContext
from grader.hosting.db.models import ShardJob, Submission
from grader.hosting.errors import ShardOutputRefused
from grader.hosting.protocol.shard_messages import SHARD_COST_BYTES, ShardJobCost
from grader.hosting.queue import shard_jobs
from grader.hosting.queue.lifecycle import Claim, holds_lease
from grader.hosting.results.grading_adapter import DEPTH, limits_to_json
from grader.hosting.services import shard_merges
from grader.hosting.services.worker_copy import worker_copy
from grader.retrieval.encoder import BatchPolicy
from grader.retrieval.shard_exchange import (
    MAX_DIMENSION,
    check_vectors_file,
    search_width,
    vectors_size,
)
from grader.retrieval.shard_stream import StoredShard, check_shard_file, merge_shard_files
from grader.runs.compact import compact_size


def sharded(ctx: ServerContext, kind: str) -> bool:
    """Whether a submission of ``kind`` is graded in shard jobs here (Docker submissions stay whole: docs/scale.md)."""
    return kind == "onnx" and ctx.competition.sharding.shard_documents is not None


def _counts(ctx: ServerContext, shard_documents: int) -> dict[str, int]:
    """Shards per task: a function of the corpus size and the setting only, from the worker copy's manifest (no corpus is read)."""
    copy = load_benchmark_folder(worker_copy(ctx))
    chunk = BatchPolicy().chunk_size
    return {name: shard_total(copy.task(name), chunk_size=chunk, shard_documents=shard_documents) for name in ctx.tasks}


@cache
def _judged_count(benchmark_target: str, task: str, split: str) -> int:
    return len(resolve_benchmark(benchmark_target).task(task).qrels(split))


def plan_claimed(ctx: ServerContext, claimed: Claim) -> bool:
    """Plan the shard jobs of a just-claimed attempt when its submission is sharded; whether it is."""
    shard_documents = ctx.competition.sharding.shard_documents
    with ctx.db.session() as session:
        submission = session.get(Submission, claimed.submission_id)
        if submission is None or shard_documents is None or not sharded(ctx, submission.kind):
            return False
    # Outside any transaction: the first call may export the worker copy (seconds at CoIR size), and a held
    # write transaction would stall every other writer meanwhile (SQLite). The claim is this worker's lease.
    counts = _counts(ctx, shard_documents)
    with ctx.db.session() as session:
        shard_jobs.plan(session, claimed.submission_id, claimed.attempt, counts, ctx.competition.sharding.deadline_s)
        return True


#: The CPUs a job's CPU seconds are held to when the competition sets no CPU limit (its worker's machine is not known here).
MAX_CPUS = 1024


@dataclass(frozen=True)
class ShardWork:
    """A claimed shard job and what its worker needs besides the data it holds."""

    claim: shard_jobs.ShardClaim
    upload_sha256: str
    split: str
    queries_sha256: str | None


def claim(ctx: ServerContext, worker_id: int, fingerprint: str) -> ShardWork | None:
    """Lease a shard job to ``worker_id`` (:func:`grader.hosting.queue.shard_jobs.claim`), with its upload's and query vectors' digests."""
    cap = ctx.competition.sharding.replica_cap(ctx.competition.replicas)
    claimed = shard_jobs.claim(ctx.db, worker_id, fingerprint, ctx.competition.queue.lease_s, cap)
    if claimed is None:
        return None
    with ctx.db.session() as session:
        submission = session.get(Submission, claimed.submission_id)
        assert submission is not None
        query = _query_job(session, claimed.submission_id, claimed.attempt, claimed.task)
        done = query is not None and query.state == shard_jobs.DONE and claimed.number != shard_jobs.QUERY_JOB
        return ShardWork(claimed, submission.upload_sha256, submission.split, query.sha256 if done and query is not None else None)


def _query_job(session: Session, submission_id: str, attempt: int, task: str) -> ShardJob | None:
    """The task's query job of the attempt (any state)."""
    return session.scalar(
        select(ShardJob).where(
            ShardJob.submission_id == submission_id,
            ShardJob.attempt == attempt,
            ShardJob.task == task,
            ShardJob.number == shard_jobs.QUERY_JOB,
        )
    )


def _held(ctx: ServerContext, worker_id: int, job_id: int, tries: int) -> ShardJob | None:
    """The job, when ``worker_id`` holds its lease for try ``tries``."""
    with ctx.db.session() as session:
        job = session.get(ShardJob, job_id)
        if job is None or job.state != shard_jobs.RUNNING or job.tries != tries or job.worker_id != worker_id:
            return None
        session.expunge(job)
        return job


def _folder(ctx: ServerContext, submission_id: str, attempt: int) -> Path:
    return ctx.state.root / "shards" / submission_id / str(attempt)


def upload_of(ctx: ServerContext, worker_id: int, job_id: int, tries: int) -> Path | None:
    """The stored upload of the submission of a shard job ``worker_id`` holds; None when it does not hold it.

    Fetching it uses the lease: from now on, a lapse of it costs the job a try (an unused one does not).
    """
    job = _held(ctx, worker_id, job_id, tries)
    if job is None or not shard_jobs.mark_used(ctx.db, job_id, tries, worker_id):
        return None
    with ctx.db.session() as session:
        submission = session.get(Submission, job.submission_id)
        assert submission is not None
        return ctx.state.uploads / submission.upload_path


@dataclass(frozen=True)
class QueryVectors:
    """A task's query vectors as a shard job fetches them: the stored file and the sha256 its query job returned."""

    path: Path
    sha256: str


#: The query vectors are not in yet: their query job is running (the shard job asks again).
PENDING = "pending"


def query_vectors_of(ctx: ServerContext, worker_id: int, job_id: int, tries: int) -> QueryVectors | str | None:
    """The query vectors a held shard job searches with (its task's query job's output); :data:`PENDING` while the
    query job runs; None when the job is not held (stale), its query job failed, or went back to the queue: the shard
    job is then released, uncharged (:func:`grader.hosting.queue.shard_jobs.release_waiting`), so that it never holds
    its worker while the job it waits on has no holder."""
    job = _held(ctx, worker_id, job_id, tries)
    if job is None or job.number == shard_jobs.QUERY_JOB:
        return None
    with ctx.db.session() as session:
        query = _query_job(session, job.submission_id, job.attempt, job.task)
        state, sha256 = (None, None) if query is None else (query.state, query.sha256)
    if state == shard_jobs.RUNNING:
        return PENDING
    path = _folder(ctx, job.submission_id, job.attempt) / f"{job.task}.{shard_jobs.QUERY_JOB}"
    if state == shard_jobs.DONE and sha256 is not None and path.is_file():
        return QueryVectors(path, sha256)
    if state == shard_jobs.QUEUED:
        shard_jobs.release_waiting(ctx.db, job_id, tries, worker_id)
    return None


def body_cap(queries: int) -> int:
    """The most bytes a shard job puts for a task of ``queries`` judged queries: vectors or a compact run with scores (and boundary ties)."""
    return max(vectors_size(queries, MAX_DIMENSION), compact_size(queries, search_width(DEPTH), scores=True))


def largest_body(ctx: ServerContext) -> int:
    """The largest :func:`body_cap` over the competition's tasks (the route's cap)."""
    return max((body_cap(_judged_count(ctx.benchmark_target, task, ctx.split)) for task in ctx.tasks), default=0)


def output_slot(ctx: ServerContext, worker_id: int, job_id: int, tries: int) -> tuple[Path, int] | None:
    """Where a held shard job's output goes, and its bound; None when the job is not held."""
    job = _held(ctx, worker_id, job_id, tries)
    if job is None:
        return None
    with ctx.db.session() as session:
        submission = session.get(Submission, job.submission_id)
        assert submission is not None
        split = submission.split
    folder = _folder(ctx, job.submission_id, job.attempt)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{job.task}.{job.number}", body_cap(_judged_count(ctx.benchmark_target, job.task, split))


def stored(ctx: ServerContext, worker_id: int, job_id: int, tries: int, path: Path, sha256: str, cost: ShardJobCost | None = None) -> bool:
    """Mark a held job done with the digest of what was stored at ``path``, once it holds (:func:`_check_output`), with
    what it cost as its worker states it (``cost``: held to the job's limits, kept beside the output, :func:`_keep_cost`);
    False when the try is stale (the file is then ignored).

    Raises :class:`~grader.hosting.errors.ShardOutputRefused` when it does not hold: the file is removed and the try
    has failed ``INFRA`` (re-queued alone, or the task failed ``INFRA`` at the try limit), never a participant's code.
    """
    job = _held(ctx, worker_id, job_id, tries)
    if job is None:
        return False
    try:
        _check_output(ctx, job, path)
        _keep_cost(ctx, job, path, cost)
    except TaskFailure as refusal:
        path.unlink(missing_ok=True)
        if not failed(ctx, worker_id, job_id, tries, FailureCode.INFRA, f"its output was refused at put: {refusal.detail}"):
            return False
        raise ShardOutputRefused(refusal.detail) from None
    return shard_jobs.complete(ctx.db, job_id, tries, worker_id, sha256)


def _check_output(ctx: ServerContext, job: ShardJob, path: Path) -> None:
    """A job's stored output holds (:class:`TaskFailure` ``INFRA`` when not): query vectors of the task's judged queries
    (:func:`~grader.retrieval.shard_exchange.check_vectors_file`), or a shard's run over the copy's corpus listing them
    all (:func:`~grader.retrieval.shard_stream.check_shard_file`), so that no shard searches with bad vectors and a
    bad run re-runs its job alone instead of failing its task at the merge.

    The dimension a manifest declares (``model_card.dimension``) is not checked here: nothing holds a model to it, so an
    honest worker's vectors of a misdeclared model would be refused try after try; a shard worker tells a lie about the
    dimension from the model's fault (:func:`grader.grading.shard_sandbox.judge_mismatch`).
    """
    queries = _judged_count(ctx.benchmark_target, job.task, _split_of(ctx, job.submission_id))
    if job.number == shard_jobs.QUERY_JOB:
        check_vectors_file(path, rows=queries)
        return
    documents = corpus_size(load_benchmark_folder(worker_copy(ctx)).task(job.task))
    check_shard_file(path, documents=documents, queries=queries, depth=DEPTH)  # a block of queries at a time


def _cost_path(output: Path) -> Path:
    return output.with_name(f"{output.name}.cost.json")


def _keep_cost(ctx: ServerContext, job: ShardJob, output: Path, cost: ShardJobCost | None) -> None:
    """Keep a job's stated figures beside its output once they hold to its sandbox's limits (:class:`TaskFailure`
    ``INFRA`` when not, as a worker's unsharded cost block is refused); none stated: none kept (the merge says so)."""
    kept = _cost_path(output)
    kept.unlink(missing_ok=True)  # an earlier try's figures are not this one's
    if cost is None:
        return
    limits = limits_to_json(ctx.competition.limits)
    check_figures(f"shard job {job.number} of task {job.task}", cost.encode_s, cost.encode_s, cost.cpu_s, cost.peak_memory_bytes, limits, MAX_CPUS)
    atomic_write_bytes(kept, jsonio.dumps(cost.model_dump(), sort_keys=True).encode("utf-8"))


def _job_figures(path: Path) -> dict[str, Any] | None:
    """The figures kept beside a job's output; None when none were stated. Read back as what they are, a worker's word
    from disk: bounded and validated again (the report's cost block is checked once more when it is scored)."""
    try:
        with path.open("rb") as kept:
            data = kept.read(SHARD_COST_BYTES + 1)
        if len(data) > SHARD_COST_BYTES:
            return None
        return ShardJobCost.model_validate_json(data).model_dump()
    except (OSError, ValueError):
        return None


def _cost(
    ctx: ServerContext, submission_id: str, attempt: int, split: str, tasks: dict[str, shard_jobs.TaskShards], failed: set[str]
) -> dict[str, Any]:
    """The attempt's ``cost`` block: per task, its jobs' kept figures merged (:func:`grader.grading.shard_cost.task_entry`)
    with the task's texts and judged queries as this server counts them; the workers' word, labelled so."""
    folder = _folder(ctx, submission_id, attempt)
    copy = load_benchmark_folder(worker_copy(ctx))
    entries: dict[str, Any] = {}
    for name, entry in sorted(tasks.items()):
        queries = _judged_count(ctx.benchmark_target, name, split)
        jobs = {number: _job_figures(_cost_path(folder / f"{name}.{number}")) for number in entry.done}
        entries[name] = task_entry(jobs, texts=corpus_size(copy.task(name)) + queries, queries=queries, failed=name in failed)
    return cost_block(entries, source="worker")


def _split_of(ctx: ServerContext, submission_id: str) -> str:
    with ctx.db.session() as session:
        submission = session.get(Submission, submission_id)
        assert submission is not None
        return submission.split


def failed(
    ctx: ServerContext, worker_id: int, job_id: int, tries: int, code: FailureCode, message: str, *, suspect_queries: str | None = None
) -> bool:
    """A held job failed: INFRA re-queues it alone after a backoff, a participant's code fails its task (:func:`grader.hosting.queue.shard_jobs.fail`);
    INFRA with ``suspect_queries`` (the sha256 of the task's query vectors) re-runs the task's query job and its shards
    (:func:`grader.hosting.queue.shard_jobs.requeue_suspect`)."""
    limit, retry = ctx.competition.max_attempts, ctx.competition.queue
    if suspect_queries is not None and code is FailureCode.INFRA:
        return shard_jobs.requeue_suspect(ctx.db, job_id, tries, worker_id, suspect_queries, message, max_tries=limit, retry=retry)
    return shard_jobs.fail(ctx.db, job_id, tries, worker_id, code, message, max_tries=limit, retry=retry)


@dataclass
class GradeStatus:
    """Where a sharded attempt stands for its coordinator: ``running``, ``done`` (merged runs by task) or ``stale``; task failures."""

    state: str
    runs: dict[str, str] = field(default_factory=dict)
    failures: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: once done: the attempt's cost block (:func:`_cost`)
    cost: dict[str, Any] | None = None


def status(ctx: ServerContext, worker_id: int, submission_id: str, attempt: int) -> GradeStatus:
    """The attempt's progress; once every task is done or failed, each done task's merged run is in the attempt's runs folder."""
    key = (str(ctx.state.root), submission_id, attempt)
    with ctx.db.session() as session:
        submission = session.get(Submission, submission_id) if len(submission_id) <= 40 else None
        if not holds_lease(submission, attempt, worker_id):
            shard_merges.forget(key)
            return GradeStatus("stale")
        assert submission is not None
        split = submission.split
    # Past the deadline the open jobs fail their tasks INFRA here, not at the reaper's next pass: the coordinator stops now.
    shard_jobs.expire(ctx.db, submission_id, attempt)
    tasks = shard_jobs.progress(ctx.db, submission_id, attempt)
    if any(not entry.complete and entry.failure is None for entry in tasks.values()):
        return GradeStatus("running")
    # Minutes at CoIR's scale: merged in the background (shard_merges), "running" until done, never inside one request.
    done = shard_merges.merged(key, partial(_merge_all, ctx, submission_id, attempt, split, tasks))
    return GradeStatus("running") if done is None else done


def _merge_all(ctx: ServerContext, submission_id: str, attempt: int, split: str, tasks: dict[str, shard_jobs.TaskShards]) -> GradeStatus:
    """The done status of an attempt whose every task is done or failed: each done task's shard runs merged, and the cost block."""
    result = GradeStatus("done", failures={name: entry.failure for name, entry in tasks.items() if entry.failure is not None})
    runs = ctx.state.runs_dir(submission_id, attempt)
    runs.mkdir(parents=True, exist_ok=True)
    for name, entry in sorted(tasks.items()):
        if entry.failure is None:
            try:
                result.runs[name] = _merged(ctx, submission_id, attempt, name, split, entry, runs / f"{name}.run")
            except TaskFailure as error:  # a shard run refused by the merge: the platform's failure, the attempt is re-run
                result.failures[name] = (FailureCode.INFRA.value, error.detail)
    result.cost = _cost(ctx, submission_id, attempt, split, tasks, set(result.failures))
    release_free_memory()  # the merges' many freed blocks: their pages go back now, not at the next grade's peak
    return result


def _merged(ctx: ServerContext, submission_id: str, attempt: int, task: str, split: str, entry: shard_jobs.TaskShards, target: Path) -> str:
    """Merge a task's shard runs (each checked against the digest its job returned) into ``target``; the merge's sha256.

    Read and merged from disk a block of queries at a time (:func:`~grader.retrieval.shard_stream.merge_shard_files`):
    the server's memory does not grow with the task's query count.
    """
    folder = _folder(ctx, submission_id, attempt)
    shards = [
        StoredShard(folder / f"{task}.{number}", digest, f"shard {number} of {task}")
        for number, digest in sorted(entry.done.items())
        if number != shard_jobs.QUERY_JOB
    ]
    documents = corpus_size(load_benchmark_folder(worker_copy(ctx)).task(task))  # the copy's count: the runs index it
    return merge_shard_files(shards, target, documents=documents, queries=_judged_count(ctx.benchmark_target, task, split), depth=DEPTH)


def renew(ctx: ServerContext, worker_id: int, job_id: int, tries: int) -> datetime | None:
    """Renew the lease of a held shard job; None when the try is stale (the worker stops it)."""
    return shard_jobs.renew(ctx.db, job_id, tries, worker_id, ctx.competition.queue.lease_s)
