"""Leaderboard routes: the board as JSON and CSV, the partition commitment, final choices, board reports."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse, Response

from grader.hosting.api.auth import CurrentParticipant
from grader.hosting.api.body import parse
from grader.hosting.api.deps import Ctx
from grader.hosting.errors import HostingError, NotPublished
from grader.hosting.leaderboard import service
from grader.hosting.protocol.messages import Boards, Finals, FinalsView
from grader.hosting.visibility import Part

router = APIRouter(tags=["leaderboard"])
PART = Query(
    None,
    pattern=f"^({'|'.join(Part)})$",
    description="public (always; the default over hidden data), private (after the end), full (over public test data only: the default there)",
)

PHASE = Query(None, max_length=32, description="the phase whose board (default: the open phase, else the last one that opened)")


@router.get(
    "/api/v1/leaderboard",
    summary="The leaderboard: public part (private part after the end), one board per training setting",
    response_model=Boards,
)
def leaderboard(ctx: Ctx, part: str | None = PART, phase: str | None = PHASE) -> Boards:
    try:
        return service.board_json(ctx, part, phase=phase)
    except NotPublished as error:
        raise HTTPException(404, str(error)) from None


@router.get("/leaderboard.csv", response_class=PlainTextResponse, summary="The leaderboard as CSV (cells escaped against formula injection)")
def leaderboard_csv(ctx: Ctx, part: str | None = PART, phase: str | None = PHASE) -> Response:
    try:
        board = service.board_csv(ctx, part, phase)
    except NotPublished as error:
        raise HTTPException(404, str(error)) from None
    named = part or (Part.FULL if ctx.competition.public_data else Part.PUBLIC).value
    return Response(
        board,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="leaderboard-{named}.csv"'},
    )


@router.get("/api/v1/partition", summary="The partition commitment and data digests; the secret itself after the end")
def partition(ctx: Ctx) -> dict[str, Any]:
    return service.partition_info(ctx)


@router.get("/api/v1/leaderboard/reports/{submission_id}", summary="The signed report of a board entry (public part until the end)")
def board_report(submission_id: str, ctx: Ctx) -> Response:
    envelope = service.entry_report(ctx, submission_id)
    if envelope is None:
        raise HTTPException(404, "no such leaderboard entry, or no signed report to show")
    return Response(envelope, media_type="application/json")


@router.get("/api/v1/finals", summary="Your final submissions (default: your best public ones)")
def get_finals(ctx: Ctx, who: CurrentParticipant) -> FinalsView:
    finals, chosen = service.own_finals(ctx, who)
    return FinalsView(finals=sorted(finals), chosen=chosen, limit=ctx.competition.leaderboard.finals)


@router.put(
    "/api/v1/finals",
    summary="Choose your final submissions (replaces earlier choices; before the end)",
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": Finals.model_json_schema()}}}},
)
async def put_finals(request: Request, ctx: Ctx, who: CurrentParticipant) -> FinalsView:
    body = await parse(request, Finals)
    try:
        chosen = await run_in_threadpool(service.set_finals, ctx, who, body.submissions)
    except LookupError:
        raise HTTPException(404, "no such submission") from None
    except HostingError as error:
        raise HTTPException(409, str(error)) from None
    return FinalsView(finals=chosen, chosen=True, limit=ctx.competition.leaderboard.finals)
