"""The worker API: claim, heartbeat, fetch the upload, post the result. Local and remote workers use the same routes."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Depends, HTTPException
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field

from grader.hosting.api.deps import context, strict_json_body, worker
from grader.hosting.clock import iso
from grader.hosting.context import ServerContext
from grader.hosting.db.models import Pin, Submission, Worker
from grader.hosting.grading_adapter import limits_to_json
from grader.hosting.leaderboard.parts import acceptance_scorer
from grader.hosting.services import lifecycle
from grader.hosting.services.results import accept_result

router = APIRouter(prefix="/api/v1/worker", tags=["workers"])


class ClaimRequest(BaseModel):
    wait_s: float = Field(10.0, ge=0, le=30, description="long-poll: wait up to this long for a job")


class AttemptBody(BaseModel):
    attempt: int = Field(ge=1)


class KeyBody(BaseModel):
    public_key: str = Field(max_length=1000, description="the worker's Ed25519 public key (PEM)")


class ResultBody(BaseModel):
    attempt: int = Field(ge=1)
    report: dict[str, Any] | None = None
    failure_code: str | None = Field(None, max_length=32)
    message: str = Field("", max_length=20_000)
    logs: dict[str, str] = Field(default_factory=dict)
    signature: str | None = Field(
        None, max_length=200, description="a remote worker's Ed25519 signature (base64) of the result, bound to the upload's sha256 and the attempt"
    )


def _job(ctx: ServerContext, claim: lifecycle.Claim) -> dict[str, Any]:
    with ctx.db.session() as session:
        submission = session.get(Submission, claim.submission_id)
        assert submission is not None
        pin = session.get(Pin, submission.pin_id)
        assert pin is not None
        return {
            "submission_id": submission.id,
            "attempt": claim.attempt,
            "lease_expires_at": iso(claim.lease_expires_at),
            "lease_s": ctx.competition.queue.lease_s,
            "heartbeat_s": ctx.competition.queue.heartbeat_s,
            "upload_sha256": submission.upload_sha256,
            "benchmark": ctx.benchmark_target,
            "tasks": ctx.tasks,
            "split": submission.split,
            "track": submission.track,
            "limits": limits_to_json(ctx.competition.limits),
            "data_digests": {name: digests.get(submission.split) for name, digests in pin.digests.get("tasks", {}).items()},
            # The competition's blinding key (docs/protocol.md): workers hold the benchmark's judgements already,
            # so the key tells them nothing new; it never reaches a container or a log.
            "blinding_key": None if ctx.blinding_key is None else ctx.blinding_key.secret.hex(),
        }


def _claim_blocking(ctx: ServerContext, who: Worker, wait_s: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + wait_s
    while True:
        seen = ctx.dispatcher.generation()
        claim = lifecycle.claim(ctx.db, who.id, ctx.competition.queue.lease_s)
        if claim is not None:
            return _job(ctx, claim)
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        # Woken by a dispatch; the short cap also picks up jobs queued by another process (admin rejudge).
        ctx.dispatcher.wait(seen, min(left, 0.5))


@router.post("/claim", summary="Take the oldest queued job with a lease (204 when none within wait_s)")
async def claim(body: ClaimRequest, ctx: ServerContext = Depends(context), who: Worker = Depends(worker)) -> Any:
    job = await run_in_threadpool(_claim_blocking, ctx, who, body.wait_s)
    if job is None:
        from fastapi import Response

        return Response(status_code=204)
    return job


@router.post("/key", summary="Record this remote worker's public key on first use (409 if another is recorded)")
def key(body: KeyBody, ctx: ServerContext = Depends(context), who: Worker = Depends(worker)) -> dict[str, str]:
    from grader.hosting.errors import HostingError
    from grader.hosting.services.workers import record_key

    try:
        with ctx.db.session() as session:
            status = record_key(session, who.id, body.public_key)
    except HostingError as error:
        raise HTTPException(422, str(error)) from None
    if status == "different":
        raise HTTPException(409, "another public key is recorded for this worker")
    return {"status": status}


@router.post("/jobs/{submission_id}/heartbeat", summary="Renew the lease; 409 when the attempt is stale or cancelled: stop grading")
def heartbeat(submission_id: str, body: AttemptBody, ctx: ServerContext = Depends(context), who: Worker = Depends(worker)) -> dict[str, Any]:
    expires = lifecycle.heartbeat(ctx.db, submission_id, body.attempt, who.id, ctx.competition.queue.lease_s)
    if expires is None:
        raise HTTPException(409, "stale attempt: the lease expired, was handed on, or the job was cancelled")
    return {"lease_expires_at": iso(expires)}


@router.get("/jobs/{submission_id}/upload", summary="The upload of a job this worker holds")
def upload(submission_id: str, attempt: int, ctx: ServerContext = Depends(context), who: Worker = Depends(worker)) -> FileResponse:
    with ctx.db.session() as session:
        submission = session.get(Submission, submission_id)
        if not lifecycle.holds_lease(submission, attempt, who.id):
            raise HTTPException(409, "stale attempt")
        assert submission is not None
        path = ctx.state.uploads / submission.upload_path
    return FileResponse(path, media_type="application/gzip")


@router.post("/jobs/{submission_id}/result", summary="Post the result of an attempt; a stale attempt's result is discarded (409)")
async def result(
    submission_id: str,
    body: ResultBody,
    ctx: ServerContext = Depends(context),
    who: Worker = Depends(worker),
    _strict: None = Depends(strict_json_body),  # after the token check: an unknown caller gets 401, not a parse
) -> dict[str, Any]:
    verdict = await run_in_threadpool(
        accept_result,
        ctx.db,
        ctx.state,
        ctx.signing_key,
        submission_id=submission_id,
        attempt=body.attempt,
        worker_id=who.id,
        payload=body.model_dump(),
        parts=acceptance_scorer(ctx),
        blinding_key_id=None if ctx.blinding_key is None else ctx.blinding_key.key_id,
    )
    if verdict.status == "stale":
        raise HTTPException(409, "stale attempt: result discarded")
    if verdict.status == "refused":
        raise HTTPException(403, "result refused: not signed by this worker's registered key over this upload and attempt")
    return {"status": verdict.status, "state": verdict.state}
