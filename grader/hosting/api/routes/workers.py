"""The worker API: state the fingerprint, claim, heartbeat, fetch the upload, put the runs, post the result. Local and remote workers use the same routes.

Each body is read after the worker's token was checked, bounded, and parsed into its
model (:mod:`grader.hosting.api.body`); the services decide.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse

from grader.hosting.api.auth import CurrentWorker
from grader.hosting.api.body import parse, receive_to_file
from grader.hosting.api.deps import Ctx
from grader.hosting.api.long_poll import Gate, long_poll
from grader.hosting.api.params import AttemptQuery
from grader.hosting.clock import iso
from grader.hosting.errors import HostingError
from grader.hosting.protocol.messages import (
    ClaimRequest,
    FingerprintBinding,
    FingerprintStatement,
    HeartbeatRequest,
    Job,
    KeyStatus,
    Lease,
    RunStored,
    Verdict,
    VerdictStatus,
    WorkerKey,
    WorkerResult,
)
from grader.hosting.services import fingerprints, jobs

router = APIRouter(prefix="/api/v1/worker", tags=["workers"])
STALE = "stale attempt: the lease expired, was handed on, or the job was cancelled"


@router.post(
    "/claim",
    summary="Take the oldest queued job with a lease (204 when none within wait_s; 429 past a worker's claims in progress)",
    response_model=Job,
    responses={204: {"description": "no job within wait_s"}, 429: {"description": "this worker has its most claims in progress"}},
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": ClaimRequest.model_json_schema()}}}},
)
async def claim(request: Request, ctx: Ctx, who: CurrentWorker, gate: Gate) -> Job | Response:
    body = await parse(request, ClaimRequest)
    if (why := await run_in_threadpool(jobs.refusal, ctx, who)) is not None:
        raise HTTPException(403, why)
    digest = await bound_fingerprint(ctx, who, body.fingerprint)
    with gate.admit(who.id, body.wait_s):
        job = await long_poll(request, gate, ctx.dispatcher, body.wait_s, lambda: jobs.claim_once(ctx, who, digest))
    return Response(status_code=204) if job is None else job


async def bound_fingerprint(ctx: Ctx, who: CurrentWorker, named: str) -> str:
    """The fingerprint bound to ``who``, once the claim named it (:func:`grader.hosting.services.fingerprints.for_claim`); 409 otherwise."""
    try:
        return await run_in_threadpool(fingerprints.for_claim, ctx, who, named)
    except fingerprints.FingerprintRefused as refused:
        raise HTTPException(refused.refusal.value, str(refused)) from None


@router.get("/fingerprint", summary="What a fingerprint statement is signed over, and the fingerprint bound")
def fingerprint_binding(ctx: Ctx, who: CurrentWorker) -> FingerprintBinding:
    return fingerprints.binding(ctx, who)


@router.post(
    "/fingerprint",
    summary="State this worker's fingerprint: bound once (a remote worker signs it: 403 otherwise); 409 when another is bound",
    response_model=FingerprintBinding,
    responses={403: {"description": "a remote worker's statement not signed by its key"}, 409: {"description": "another fingerprint is bound"}},
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": FingerprintStatement.model_json_schema()}}}},
)
async def state_fingerprint(request: Request, ctx: Ctx, who: CurrentWorker) -> FingerprintBinding:
    body = await parse(request, FingerprintStatement)
    try:
        await run_in_threadpool(fingerprints.state, ctx, who, body)
    except fingerprints.FingerprintRefused as refused:
        raise HTTPException(refused.refusal.value, str(refused)) from None
    return await run_in_threadpool(fingerprints.binding, ctx, who)


@router.post(
    "/key",
    summary="Record this remote worker's public key on first use (409 if another is recorded)",
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": WorkerKey.model_json_schema()}}}},
)
async def key(request: Request, ctx: Ctx, who: CurrentWorker) -> KeyStatus:
    body = await parse(request, WorkerKey)
    try:
        status = await run_in_threadpool(jobs.register_key, ctx, who, body.public_key)
    except HostingError as error:
        raise HTTPException(422, str(error)) from None
    if status == "different":
        raise HTTPException(409, "another public key is recorded for this worker")
    return KeyStatus(status=status)


@router.post(
    "/jobs/{submission_id}/heartbeat",
    summary="Renew the lease and report each task's progress; 409 when the attempt is stale or cancelled: stop grading",
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": HeartbeatRequest.model_json_schema()}}}},
)
async def heartbeat(submission_id: str, request: Request, ctx: Ctx, who: CurrentWorker) -> Lease:
    body = await parse(request, HeartbeatRequest)
    expires = await run_in_threadpool(jobs.renew, ctx, who, submission_id, body)
    if expires is None:
        raise HTTPException(409, STALE)
    return Lease(lease_expires_at=iso(expires))


@router.get("/jobs/{submission_id}/upload", summary="The upload of a job this worker holds")
def upload(submission_id: str, attempt: AttemptQuery, ctx: Ctx, who: CurrentWorker) -> FileResponse:
    if (why := jobs.refusal(ctx, who)) is not None:
        raise HTTPException(403, why)
    path = jobs.upload_of(ctx, who, submission_id, attempt)
    if path is None:
        raise HTTPException(409, "stale attempt")
    return FileResponse(path, media_type="application/gzip")


@router.put(
    "/jobs/{submission_id}/runs/{task}",
    summary="Put the compact run of one task of an attempt (binary, streamed, held to the task's bound); 409 when stale",
    response_model=RunStored,
    openapi_extra={"requestBody": {"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}},
)
async def put_run(submission_id: str, task: str, attempt: AttemptQuery, request: Request, ctx: Ctx, who: CurrentWorker) -> RunStored:
    slot = await run_in_threadpool(jobs.run_slot, ctx, who, submission_id, attempt, task)
    if slot is None:
        raise HTTPException(409, STALE)
    path, cap = slot
    sha256, size = await receive_to_file(request, path, cap, "a compact run of this task")
    return RunStored(sha256=sha256, bytes=size)


@router.post(
    "/jobs/{submission_id}/result",
    summary="Post the result of an attempt; a stale attempt's result is discarded (409)",
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": WorkerResult.model_json_schema()}}}},
)
async def result(submission_id: str, request: Request, ctx: Ctx, who: CurrentWorker) -> Verdict:
    body = await parse(request, WorkerResult, ctx.result_body_bytes)
    verdict = await run_in_threadpool(jobs.post_result, ctx, who, submission_id, body)
    if verdict.status is VerdictStatus.STALE:
        raise HTTPException(409, "stale attempt: result discarded")
    if verdict.status is VerdictStatus.REFUSED:
        raise HTTPException(403, "result refused: not signed by this worker's registered key over this upload and attempt")
    return verdict
