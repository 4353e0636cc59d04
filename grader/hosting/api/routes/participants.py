"""Participant routes: submit (streamed), list, status, report and logs. Each only translates HTTP to services."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from grader.hosting.api.deps import context, participant
from grader.hosting.clock import iso, utcnow
from grader.hosting.context import ServerContext
from grader.hosting.db.models import Participant
from grader.hosting.errors import RefusedSubmission
from grader.hosting.leaderboard.service import report_envelope
from grader.hosting.services import submissions as service
from grader.hosting.services.quotas import quota_status

router = APIRouter(prefix="/api/v1", tags=["participants"])
NOT_FOUND = "no such submission"


def refused(error: RefusedSubmission) -> JSONResponse:
    """A refusal as JSON: the message and, when known, when the next submission is possible."""
    headers = {}
    if error.retry_at is not None:
        headers["Retry-After"] = str(max(1, int((error.retry_at - utcnow()).total_seconds())))
    return JSONResponse({"detail": str(error), "retry_at": iso(error.retry_at)}, status_code=error.status, headers=headers)


@router.post("/submissions", status_code=201, summary="Upload a submission (.tar.gz body, streamed)")
async def submit(
    request: Request,
    sample: bool = Query(False, description="grade on the public sample split (logs visible, separate quota)"),
    ctx: ServerContext = Depends(context),
    who: Participant = Depends(participant),
) -> Any:
    track = "sample" if sample else "hidden"
    try:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > ctx.competition.upload_max_bytes:
            raise RefusedSubmission(
                f"upload of {declared} bytes is larger than the competition's cap of {ctx.competition.upload_max_bytes} bytes", status=413
            )
        await run_in_threadpool(service.refuse_early, ctx, who, track)
        upload = await ctx.state.receive(request.stream(), ctx.competition.upload_max_bytes)
        submission = await run_in_threadpool(service.create_submission, ctx, who, track, upload)
    except RefusedSubmission as error:
        return refused(error)
    return service.public_view(ctx, submission, ended=False)


@router.get("/submissions", summary="Your submissions, newest first")
def list_submissions(ctx: ServerContext = Depends(context), who: Participant = Depends(participant)) -> list[dict[str, Any]]:
    ended = utcnow() >= ctx.ends_at()
    return [service.public_view(ctx, s, ended=ended) for s in service.own_submissions(ctx, who)]


@router.get("/submissions/{submission_id}", summary="One of your submissions (404 for anyone else's)")
def get_submission(submission_id: str, ctx: ServerContext = Depends(context), who: Participant = Depends(participant)) -> dict[str, Any]:
    submission = service.own_submission(ctx, who, submission_id)
    if submission is None:
        raise HTTPException(404, NOT_FOUND)
    return service.public_view(ctx, submission, ended=utcnow() >= ctx.ends_at())


@router.get(
    "/submissions/{submission_id}/report",
    summary="The signed report (sample runs; of hidden grades the public part until the end, the full report after)",
)
def get_report(submission_id: str, ctx: ServerContext = Depends(context), who: Participant = Depends(participant)) -> Response:
    submission = service.own_submission(ctx, who, submission_id)
    if submission is None:
        raise HTTPException(404, NOT_FOUND)
    envelope = report_envelope(ctx, submission)
    if envelope is None:
        raise HTTPException(404, "no signed report for this submission (not scored yet, or it failed before a report)")
    # Until the end a hidden grade's report covers the public part alone (signed by the host on the server).
    return Response(envelope, media_type="application/json")


@router.get("/submissions/{submission_id}/logs", summary="Container logs of a sample-split run (never of a hidden grade)")
def get_logs(submission_id: str, ctx: ServerContext = Depends(context), who: Participant = Depends(participant)) -> dict[str, Any]:
    submission = service.own_submission(ctx, who, submission_id)
    if submission is None:
        raise HTTPException(404, NOT_FOUND)
    if submission.track != "sample":
        raise HTTPException(403, "logs of hidden-split grades are never shown (they could carry hidden data); submit with --sample to debug")
    return {"id": submission.id, "logs": service.sample_logs(ctx, submission)}


@router.get("/quota", summary="Your quota: used, limits, and when the next submission is possible")
def get_quota(ctx: ServerContext = Depends(context), who: Participant = Depends(participant)) -> dict[str, Any]:
    now = utcnow()
    with ctx.db.session() as session:
        return {track: quota_status(session, ctx.competition, who.id, track, now).as_dict() for track in ("hidden", "sample")}
