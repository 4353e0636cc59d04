"""The worker API's side of shard jobs: claim with a long-poll, and the message a worker gets (routes only translate)."""

from __future__ import annotations

from grader.hosting.context import ServerContext
from grader.hosting.identity.principal import Principal
from grader.hosting.protocol.shard_messages import ShardGradeStatus, ShardJobMessage
from grader.hosting.results.grading_adapter import DEPTH, limits_to_json
from grader.hosting.services import progress, shard_grading
from grader.hosting.services.worker_copy import ranking_data


def _message(ctx: ServerContext, work: shard_grading.ShardWork) -> ShardJobMessage:
    claimed = work.claim
    judged, digests = ranking_data(ctx, work.split)
    return ShardJobMessage(
        job_id=claimed.job_id,
        tries=claimed.tries,
        submission_id=claimed.submission_id,
        attempt=claimed.attempt,
        task=claimed.task,
        number=claimed.number,
        lease_s=ctx.competition.queue.lease_s,
        heartbeat_s=ctx.competition.queue.heartbeat_s,
        upload_sha256=work.upload_sha256,
        benchmark=ctx.benchmark_target,
        split=work.split,
        judged=judged[claimed.task],
        ranking_digest=digests[claimed.task],
        shard_documents=ctx.competition.sharding.shard_documents,
        search_memory=ctx.competition.sharding.search_memory,
        depth=DEPTH,
        queries_sha256=work.queries_sha256,
        max_query_bytes=shard_grading.body_cap(len(judged[claimed.task])),
        limits=limits_to_json(ctx.competition.limits),
        max_unpack_ratio=ctx.competition.unpack.max_unpack_ratio,
        max_unpacked_bytes=ctx.competition.unpack.max_unpacked_bytes,
    )


def claim(ctx: ServerContext, worker: Principal, fingerprint: str) -> ShardJobMessage | None:
    """One look for a shard job to lease to ``worker`` (None if none is free); the route's long-poll does the waiting."""
    work = shard_grading.claim(ctx, worker.id, fingerprint)
    return None if work is None else _message(ctx, work)


def grade_status(ctx: ServerContext, worker: Principal, submission_id: str, attempt: int) -> ShardGradeStatus:
    """Where the coordinator's sharded attempt stands (:func:`grader.hosting.services.shard_grading.status`)."""
    found = shard_grading.status(ctx, worker.id, submission_id, attempt)
    # Done too: the coordinator's line of the last shard ranked (`ranked, K of K shards ranked`) comes from this answer.
    shards = progress.shard_progress(ctx.db, submission_id, attempt) if found.state != "stale" else []
    failures = {name: list(why) for name, why in found.failures.items()}
    return ShardGradeStatus(state=found.state, runs=found.runs, failures=failures, progress=shards, cost=found.cost)
