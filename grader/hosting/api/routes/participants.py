"""Participant routes: submit (streamed), list, status, report and logs. Each only translates HTTP to services."""

from __future__ import annotations

import math
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from grader.hosting.api.auth import CurrentParticipant
from grader.hosting.api.deps import Ctx
from grader.hosting.clock import iso, utcnow
from grader.hosting.errors import RefusedSubmission, UploadInProgress
from grader.hosting.intake import submissions as service
from grader.hosting.intake import uploads
from grader.hosting.leaderboard.service import report_envelope
from grader.hosting.protocol.messages import Quota, SubmissionView
from grader.hosting.services import progress
from grader.hosting.states import Track
from grader.hosting.transparency import log_reads
from grader.hosting.visibility import logs_visible

router = APIRouter(prefix="/api/v1", tags=["participants"])
NOT_FOUND = "no such submission"


def refused(error: RefusedSubmission) -> JSONResponse:
    """A refusal as JSON: the message and, when known, when the next submission is possible.

    ``in_progress`` marks the one 409 worth sending again (another copy under the key is arriving);
    the client reads the field, not the words.
    """
    headers = {}
    if error.retry_at is not None:
        headers["Retry-After"] = str(max(1, math.ceil((error.retry_at - utcnow()).total_seconds())))
    answer: dict[str, Any] = {"detail": str(error), "retry_at": iso(error.retry_at)}
    if isinstance(error, UploadInProgress):
        answer["in_progress"] = True
    return JSONResponse(answer, status_code=error.status, headers=headers)


@router.post(
    "/submissions",
    status_code=201,
    summary="Upload a submission (.tar.gz body, streamed; Content-Length required; Idempotency-Key + Content-Digest make retries safe)",
    response_model=SubmissionView,
    response_model_exclude_unset=True,
    responses={
        200: {"description": "a repeated Idempotency-Key: the submission its first upload became (answered before the body is read)"},
        409: {
            "description": "the key with another body; or, with in_progress and Retry-After, another copy under the key still arriving"
            " (answered before the body is read; send it again after Retry-After)"
        },
    },
)
async def submit(
    request: Request,
    response: Response,
    ctx: Ctx,
    who: CurrentParticipant,
    sample: bool = Query(False, description="grade on the public sample split (logs visible, separate quota)"),
    phase: str | None = Query(
        None, max_length=32, description="the phase the upload is meant for (refused unless it is open now; absent: the open one)"
    ),
) -> Any:
    track = Track.SAMPLE if sample else Track.HIDDEN
    if (refusal := uploads.named_phase_refusal(ctx, track, phase)) is not None:
        return refused(refusal)
    try:
        submission, created = await uploads.receive_submission(ctx, who, track, request.headers, request.stream())
    except RefusedSubmission as error:
        return refused(error)
    except ClientDisconnect:  # the upload broke off (its reservation is released); the client retries with the same key
        return Response(status_code=400)
    if not created:
        response.status_code = 200
    view = await run_in_threadpool(service.public_view, ctx, submission, ended=False)  # admitted: before the end
    if ctx.log is not None:  # the receipt binds the logged entry to this participant, privately (its entry key)
        view.receipt = await run_in_threadpool(log_reads.receipt_of, ctx.db, ctx.log, submission.id)
    return view


@router.get("/submissions", summary="Your submissions, newest first", response_model=list[SubmissionView], response_model_exclude_unset=True)
def list_submissions(ctx: Ctx, who: CurrentParticipant) -> list[SubmissionView]:
    return service.own_views(ctx, who)


@router.get(
    "/submissions/{submission_id}",
    summary="One of your submissions, with its place in the queue, estimate and progress while it waits or runs (404 for anyone else's)",
    response_model=SubmissionView,
    response_model_exclude_unset=True,
)
def get_submission(submission_id: str, ctx: Ctx, who: CurrentParticipant) -> SubmissionView:
    view = progress.own_status(ctx, who, submission_id)
    if view is None:
        raise HTTPException(404, NOT_FOUND)
    return view


@router.get(
    "/submissions/{submission_id}/report",
    summary="The signed report (sample runs; of hidden grades the public part until the end, the full report after)",
)
def get_report(submission_id: str, ctx: Ctx, who: CurrentParticipant) -> Response:
    submission = service.own_submission(ctx, who, submission_id)
    if submission is None:
        raise HTTPException(404, NOT_FOUND)
    envelope = report_envelope(ctx, submission)
    if envelope is None:
        raise HTTPException(404, "no signed report for this submission (not scored yet, or it failed before a report)")
    return Response(envelope, media_type="application/json")


@router.get("/submissions/{submission_id}/logs", summary="Container logs of a sample-split run (never of a hidden grade)")
def get_logs(submission_id: str, ctx: Ctx, who: CurrentParticipant) -> dict[str, Any]:
    submission = service.own_submission(ctx, who, submission_id)
    if submission is None:
        raise HTTPException(404, NOT_FOUND)
    if not logs_visible(submission.track):
        raise HTTPException(403, "logs of hidden-split grades are never shown (they could carry hidden data); submit with --sample to debug")
    return {"id": submission.id, "logs": service.sample_logs(ctx, submission)}


@router.get("/quota", summary="Your quota: used, limits, and when the next submission is possible", response_model=Quota)
def get_quota(ctx: Ctx, who: CurrentParticipant) -> Quota:
    return service.quota(ctx, who)
