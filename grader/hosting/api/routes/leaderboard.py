"""Leaderboard routes: the board as JSON and CSV, the partition commitment, final choices, board reports."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, HTTPException, Query
from fastapi.responses import PlainTextResponse, Response

from grader.hosting.api.deps import context, participant
from grader.hosting.context import ServerContext
from grader.hosting.db.models import Participant, Submission
from grader.hosting.errors import HostingError
from grader.hosting.leaderboard import service

router = APIRouter(tags=["leaderboard"])
PART = Query("public", pattern="^(public|private)$", description="public (always) or private (after the end)")


def _boards_or_404(ctx: ServerContext, part: str) -> None:
    if part == "private" and not ctx.ended():
        raise HTTPException(404, "the private leaderboard is published at the end of the competition")


@router.get("/api/v1/leaderboard", summary="The leaderboard: public part (private part after the end), one board per training setting")
def leaderboard(part: str = PART, ctx: ServerContext = Depends(context)) -> dict[str, Any]:
    _boards_or_404(ctx, part)
    return service.board_json(ctx, part)


@router.get("/leaderboard.csv", response_class=PlainTextResponse, summary="The leaderboard as CSV (cells escaped against formula injection)")
def leaderboard_csv(part: str = PART, ctx: ServerContext = Depends(context)) -> Response:
    _boards_or_404(ctx, part)
    return Response(
        service.board_csv(ctx, part),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="leaderboard-{part}.csv"'},
    )


@router.get("/api/v1/partition", summary="The partition commitment and data digests; the secret itself after the end")
def partition(ctx: ServerContext = Depends(context)) -> dict[str, Any]:
    return service.partition_info(ctx)


@router.get("/api/v1/leaderboard/reports/{submission_id}", summary="The signed report of a board entry (public part until the end)")
def board_report(submission_id: str, ctx: ServerContext = Depends(context)) -> Response:
    entries = {e.submission_id for b in service.boards(ctx, "public") for e in b.entries}
    if ctx.ended():
        entries |= {e.submission_id for b in service.boards(ctx, "private") for e in b.entries}
    if submission_id not in entries:
        raise HTTPException(404, "no such leaderboard entry")
    with ctx.db.session() as session:
        submission = session.get(Submission, submission_id)
    assert submission is not None
    envelope = service.report_envelope(ctx, submission)
    if envelope is None:
        raise HTTPException(404, "no signed report")
    return Response(envelope, media_type="application/json")


@router.get("/api/v1/finals", summary="Your final submissions (default: your best public ones)")
def get_finals(ctx: ServerContext = Depends(context), who: Participant = Depends(participant)) -> dict[str, Any]:
    finals, chosen = service.own_finals(ctx, who)
    return {"finals": sorted(finals), "chosen": chosen, "limit": ctx.competition.leaderboard.finals}


@router.put("/api/v1/finals", summary="Choose your final submissions (replaces earlier choices; before the end)")
def put_finals(
    submissions: list[str] = Body(..., embed=True, max_length=50), ctx: ServerContext = Depends(context), who: Participant = Depends(participant)
) -> dict[str, Any]:
    try:
        chosen = service.set_finals(ctx, who, submissions)
    except LookupError:
        raise HTTPException(404, "no such submission") from None
    except HostingError as error:
        raise HTTPException(409, str(error)) from None
    return {"finals": chosen, "chosen": True, "limit": ctx.competition.leaderboard.finals}
