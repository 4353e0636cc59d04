"""The worker API of shard jobs: claim one, renew it, fetch its upload and query vectors, put its output.

Only the holder of a shard job's current try may fetch or put (409 otherwise); the coordinator
of a sharded attempt (the holder of the submission's lease) asks where its shards stand.
The services decide (:mod:`grader.hosting.services.shard_grading`); these routes translate HTTP.
"""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse
from pydantic import ValidationError

from grader.hosting.api.auth import CurrentWorker
from grader.hosting.api.body import parse, receive_to_file
from grader.hosting.api.deps import Ctx
from grader.hosting.api.long_poll import Gate, long_poll
from grader.hosting.api.params import ShardJobId, TriesQuery
from grader.hosting.api.routes.workers import bound_fingerprint
from grader.hosting.clock import iso
from grader.hosting.errors import ShardOutputRefused
from grader.hosting.protocol.messages import AttemptRef, Lease, RunStored
from grader.hosting.protocol.shard_messages import (
    QUERIES_SHA256,
    SHARD_COST,
    SHARD_COST_BYTES,
    ShardClaimRequest,
    ShardFailure,
    ShardGradeStatus,
    ShardJobCost,
    ShardJobMessage,
    ShardTry,
)
from grader.hosting.services import jobs, shard_grading, shard_worker_api

router = APIRouter(prefix="/api/v1/worker", tags=["workers"])
STALE = "stale try: the shard job's lease expired, was handed on, or its grade ended"


@router.post(
    "/shards/claim",
    summary="Take a queued shard job with a lease (204 when none within wait_s; 429 past a worker's claims in progress)",
    response_model=ShardJobMessage,
)
async def claim(request: Request, ctx: Ctx, who: CurrentWorker, gate: Gate) -> ShardJobMessage | Response:
    body = await parse(request, ShardClaimRequest)
    if (why := await run_in_threadpool(jobs.refusal, ctx, who)) is not None:
        raise HTTPException(403, why)
    digest = await bound_fingerprint(ctx, who, body.fingerprint)  # the server's bound digest, never the body's

    def look() -> ShardJobMessage | jobs.Empty:
        found = shard_worker_api.claim(ctx, who, digest)  # one look: the waiting is long_poll's
        return jobs.Empty.WAIT if found is None else found

    with gate.admit(who.id, body.wait_s):
        job = await long_poll(request, gate, ctx.dispatcher, body.wait_s, look)
    return Response(status_code=204) if job is None else job


@router.post("/shards/{job_id}/heartbeat", summary="Renew a shard job's lease; 409 when the try is stale: stop it")
async def heartbeat(job_id: ShardJobId, request: Request, ctx: Ctx, who: CurrentWorker) -> Lease:
    body = await parse(request, ShardTry)
    expires = await run_in_threadpool(shard_grading.renew, ctx, who.id, job_id, body.tries)
    if expires is None:
        raise HTTPException(409, STALE)
    return Lease(lease_expires_at=iso(expires))


@router.get("/shards/{job_id}/upload", summary="The upload of the submission of a shard job this worker holds")
def upload(job_id: ShardJobId, tries: TriesQuery, ctx: Ctx, who: CurrentWorker) -> FileResponse:
    path = shard_grading.upload_of(ctx, who.id, job_id, tries)
    if path is None:
        raise HTTPException(409, STALE)
    return FileResponse(path, media_type="application/gzip")


@router.get(
    "/shards/{job_id}/queries",
    summary="The query vectors of the task of a shard job this worker holds (their sha256 in a header); 202 while its query job runs: ask again",
)
def queries(job_id: ShardJobId, tries: TriesQuery, ctx: Ctx, who: CurrentWorker) -> Response:
    found = shard_grading.query_vectors_of(ctx, who.id, job_id, tries)
    if found == shard_grading.PENDING:
        return Response(status_code=202)
    if not isinstance(found, shard_grading.QueryVectors):
        raise HTTPException(409, STALE)
    return FileResponse(found.path, media_type="application/octet-stream", headers={QUERIES_SHA256: found.sha256})


@router.put(
    "/shards/{job_id}/output",
    summary="Put a shard job's output (query vectors, or a compact run with scores); 409 when stale; 422 when it does not hold (the try fails INFRA)",
    response_model=RunStored,
)
async def output(job_id: ShardJobId, tries: TriesQuery, request: Request, ctx: Ctx, who: CurrentWorker) -> RunStored:
    slot = await run_in_threadpool(shard_grading.output_slot, ctx, who.id, job_id, tries)
    if slot is None:
        raise HTTPException(409, STALE)
    path, cap = slot
    cost = _stated_cost(request)  # before the body: a malformed header costs no upload
    sha256, size = await receive_to_file(request, path, cap, "a shard job's output")
    try:
        done = await run_in_threadpool(shard_grading.stored, ctx, who.id, job_id, tries, path, sha256, cost)
    except ShardOutputRefused as refusal:  # the try has failed INFRA: the job runs again
        raise HTTPException(422, f"shard job output refused: {refusal}") from None
    if not done:
        raise HTTPException(409, STALE)
    return RunStored(sha256=sha256, bytes=size)


def _stated_cost(request: Request) -> ShardJobCost | None:
    """The job's figures its worker states in the :data:`SHARD_COST` header (None without it); 422 when malformed."""
    stated = request.headers.get(SHARD_COST)
    if stated is None:
        return None
    if len(stated) > SHARD_COST_BYTES:
        raise HTTPException(422, f"the {SHARD_COST} header is longer than {SHARD_COST_BYTES} bytes")
    try:
        return ShardJobCost.model_validate_json(stated)
    except ValidationError as error:
        raise HTTPException(422, f"the {SHARD_COST} header: {error.errors()[0]['msg'][:200]}") from None


@router.post("/shards/{job_id}/failure", summary="Report a shard job's failure (INFRA: re-run alone; a participant's code: the task fails)")
async def failure(job_id: ShardJobId, request: Request, ctx: Ctx, who: CurrentWorker) -> Response:
    body = await parse(request, ShardFailure)
    reported = partial(shard_grading.failed, suspect_queries=body.suspect_queries)
    if not await run_in_threadpool(reported, ctx, who.id, job_id, body.tries, body.failure_code, body.message):
        raise HTTPException(409, STALE)
    return Response(status_code=204)


@router.post(
    "/jobs/{submission_id}/shards",
    summary="Where the shard jobs of a sharded attempt this worker holds stand; once all are in, their runs are merged",
    response_model=ShardGradeStatus,
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": AttemptRef.model_json_schema()}}}},
)
async def grade_status(submission_id: str, request: Request, ctx: Ctx, who: CurrentWorker) -> ShardGradeStatus:
    body = await parse(request, AttemptRef)
    return await run_in_threadpool(shard_worker_api.grade_status, ctx, who, submission_id, body.attempt)
