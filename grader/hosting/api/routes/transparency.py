"""Transparency-log routes: the signed checkpoint, the C2SP tlog-tiles, the log's verifier key, proofs of one's own entries.

``/log/`` is a static-looking tree anyone can mirror with a plain HTTP client: full tiles are
immutable (cached for a year), partial tiles and the checkpoint change (cached briefly).
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from fastapi.responses import Response

from grader.hosting.api.auth import CurrentParticipant
from grader.hosting.api.deps import Ctx
from grader.hosting.context import ServerContext
from grader.hosting.intake import submissions as submission_service
from grader.hosting.leaderboard.service import proved_envelope
from grader.hosting.transparency import log_reads as service
from grader.hosting.transparency.host_log import HostLog

router = APIRouter(tags=["transparency log"])
_IMMUTABLE = "public, max-age=31536000, immutable"
_MUTABLE = "public, max-age=5, must-revalidate"


def _log(ctx: ServerContext) -> HostLog:
    if ctx.log is None:
        raise HTTPException(404, "this server keeps no transparency log")
    return ctx.log


@router.get("/log/checkpoint", summary="The log's latest signed checkpoint (C2SP tlog-checkpoint)")
def checkpoint(ctx: Ctx) -> Response:
    note = service.checkpoint_note(ctx.db, _log(ctx))
    return Response(note, media_type="text/plain; charset=utf-8", headers={"Cache-Control": _MUTABLE})


@router.get("/log/key", summary="The log's verifier key (<origin>+<hex id>+<base64 key>): what --log-key takes")
def log_key(ctx: Ctx) -> Response:
    return Response(_log(ctx).verifier.vkey + "\n", media_type="text/plain; charset=utf-8")


@router.get("/log/tile/{path:path}", summary="A tile or entry bundle of the log (C2SP tlog-tiles)")
def log_tile(path: str, ctx: Ctx) -> Response:
    found = service.tile(ctx.db, _log(ctx), f"tile/{path}")
    if found is None:
        raise HTTPException(404, "no such tile in the published tree")
    data, full = found
    return Response(data, media_type="application/octet-stream", headers={"Cache-Control": _IMMUTABLE if full else _MUTABLE})


@router.get(
    "/api/v1/submissions/{submission_id}/report.tlog-proof",
    summary="The inclusion proof (C2SP tlog-proof) of the report this submission's /report answers (of a hidden grade whose report"
    " is withheld until the end, a failed one's or in Ladder mode: of its full report, at once), the entry in its extra line",
)
def report_proof(submission_id: str, ctx: Ctx, who: CurrentParticipant) -> Response:
    submission = submission_service.own_submission(ctx, who, submission_id)
    if submission is None:
        raise HTTPException(404, "no such submission")
    envelope = proved_envelope(ctx, submission)
    proof = None if envelope is None else service.report_proof(ctx.db, _log(ctx), submission.id, envelope)
    if proof is None:
        raise HTTPException(404, "no logged report for this submission")
    return Response(proof, media_type="text/plain; charset=utf-8")
