"""Resumable uploads: the tus 1.0 core protocol with its creation and termination extensions, under /api/v1/uploads.

The routes translate headers to :mod:`grader.hosting.intake.resumable`, which decides.
A participant authenticates with its bearer token (``grader submit``) or, from the
participant page, with its web session and the session's CSRF token in an
``X-CSRF-Token`` header (a header a cross-site form cannot send; the cookie is
SameSite=Strict too). Every answer carries ``Tus-Resumable: 1.0.0``.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from grader.hosting.api.auth import bearer, signed_in, verify
from grader.hosting.api.deps import Ctx
from grader.hosting.api.paths import base_path
from grader.hosting.api.routes.participants import refused
from grader.hosting.errors import RefusedSubmission
from grader.hosting.identity.principal import Principal, Role
from grader.hosting.intake import resumable, submissions, uploads
from grader.hosting.protocol.messages import SubmissionView
from grader.hosting.states import Track
from grader.hosting.transparency import log_reads

router = APIRouter(prefix="/api/v1", tags=["participants"])
TUS_VERSION = "1.0.0"
TUS = {"Tus-Resumable": TUS_VERSION}
#: The id of the submission a complete upload became, on the answer of its last PATCH and of HEAD.
SUBMISSION_HEADER = "Grader-Submission"


def _participant(request: Request) -> Principal:
    """The bearer token's participant; without one, the web session's, when the request carries its CSRF token (403 otherwise)."""
    if request.headers.get("authorization"):
        return verify(request, Role.PARTICIPANT, bearer(request))
    who = signed_in(request)
    if who is None:  # neither: the API's 401, naming the bearer scheme
        raise HTTPException(401, "a participant token (Authorization: Bearer) or a signed-in page is needed", headers={"WWW-Authenticate": "Bearer"})
    sent, expected = request.headers.get("x-csrf-token", ""), request.session.get("csrf")
    if not isinstance(expected, str) or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise HTTPException(403, "missing or wrong X-CSRF-Token; reload the page and try again")
    return who


def _tus_answer(error: RefusedSubmission) -> Response:
    answer = refused(error)
    answer.headers.update(TUS)
    return answer


def _check_version(request: Request) -> None:
    if request.headers.get("tus-resumable") != TUS_VERSION:
        raise HTTPException(412, f"Tus-Resumable {TUS_VERSION} is the version served", headers={"Tus-Version": TUS_VERSION, **TUS})


@router.options("/uploads", summary="tus 1.0: the versions, extensions and largest upload served", status_code=204)
def options(ctx: Ctx) -> Response:
    return Response(
        status_code=204,
        headers={**TUS, "Tus-Version": TUS_VERSION, "Tus-Extension": "creation,termination", "Tus-Max-Size": str(ctx.competition.upload_max_bytes)},
    )


@router.post(
    "/uploads",
    status_code=201,
    summary="tus 1.0 creation: admit a resumable upload of Upload-Length bytes (reserved before any byte; Location names it)",
)
async def create(
    request: Request,
    ctx: Ctx,
    sample: bool = Query(False, description="grade on the public sample split (logs visible, separate quota)"),
    phase: str | None = Query(
        None, max_length=32, description="the phase the upload is meant for (refused unless it is open now; absent: the open one)"
    ),
) -> Response:
    who = await run_in_threadpool(_participant, request)
    _check_version(request)
    track = Track.SAMPLE if sample else Track.HIDDEN
    try:
        if (refusal := uploads.named_phase_refusal(ctx, track, phase)) is not None:
            raise refusal
        length = resumable.read_length(request.headers.get("upload-length"), ctx.competition.upload_max_bytes)
        metadata = resumable.parse_metadata(request.headers.get("upload-metadata"))
        key = resumable.new_key(request.headers.get("idempotency-key") or metadata.get("key"))
        sha256 = resumable.declared_sha256(metadata)
        await run_in_threadpool(resumable.create, ctx, who, track, length, key, sha256)
    except RefusedSubmission as error:
        return _tus_answer(error)
    return Response(status_code=201, headers={**TUS, "Location": f"{base_path(request.scope)}/api/v1/uploads/{key}"})


def _progress_headers(progress: resumable.Progress) -> dict[str, str]:
    headers = {**TUS, "Upload-Offset": str(progress.offset), "Upload-Length": str(progress.length), "Cache-Control": "no-store"}
    if progress.submission is not None:
        headers[SUBMISSION_HEADER] = progress.submission.id
    return headers


@router.head("/uploads/{key}", summary="tus 1.0: the upload's offset (bytes the server holds) and length")
async def head(key: str, request: Request, ctx: Ctx) -> Response:
    who = await run_in_threadpool(_participant, request)
    try:
        progress = await run_in_threadpool(resumable.progress, ctx, who, key)
    except RefusedSubmission as error:
        return Response(status_code=error.status, headers={**TUS, "Cache-Control": "no-store"})  # HEAD answers carry no body
    return Response(status_code=200, headers=_progress_headers(progress))


@router.get(
    "/uploads/{key}",
    summary="The submission a complete resumable upload became, with its log receipt (404 while none)",
    response_model=SubmissionView,
    response_model_exclude_unset=True,
)
async def upload_submission(key: str, request: Request, ctx: Ctx) -> Any:
    who = await run_in_threadpool(_participant, request)
    try:
        progress = await run_in_threadpool(resumable.progress, ctx, who, key)
    except RefusedSubmission as error:
        return _tus_answer(error)
    if progress.submission is None:
        return _tus_answer(RefusedSubmission(f"the upload is not complete: {progress.offset} of {progress.length} bytes held", status=404))
    view = await run_in_threadpool(submissions.public_view, ctx, progress.submission, ended=False)  # admitted: before the end
    if ctx.log is not None:
        view.receipt = await run_in_threadpool(log_reads.receipt_of, ctx.db, ctx.log, progress.submission.id)
    return view


@router.patch(
    "/uploads/{key}",
    status_code=204,
    summary="tus 1.0: append bytes at Upload-Offset (one PATCH at a time: 409 otherwise); the last one commits the submission",
)
async def patch(key: str, request: Request, ctx: Ctx) -> Response:
    who = await run_in_threadpool(_participant, request)
    _check_version(request)
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/offset+octet-stream":
        return _tus_answer(RefusedSubmission("a PATCH must be Content-Type: application/offset+octet-stream", status=415))
    offset, length = request.headers.get("upload-offset", ""), request.headers.get("content-length")
    if not offset.isdigit() or len(offset) > 15:
        return _tus_answer(RefusedSubmission("a PATCH must carry a numeric Upload-Offset", status=400))
    declared = int(length) if length is not None and length.isdigit() else None
    try:
        progress = await resumable.append(ctx, who, key, int(offset), declared, request.stream())
    except RefusedSubmission as error:
        return _tus_answer(error)
    headers = _progress_headers(progress)
    del headers["Upload-Length"]
    return Response(status_code=204, headers=headers)


@router.delete("/uploads/{key}", status_code=204, summary="tus 1.0 termination: drop an unfinished upload, its bytes and its reservation")
async def delete(key: str, request: Request, ctx: Ctx) -> Response:
    who = await run_in_threadpool(_participant, request)
    _check_version(request)
    try:
        await run_in_threadpool(resumable.terminate, ctx, who, key)
    except RefusedSubmission as error:
        return _tus_answer(error)
    return Response(status_code=204, headers=TUS)
