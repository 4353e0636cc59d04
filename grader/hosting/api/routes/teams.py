"""Team routes: the caller's team, creating one, an invitation code, joining with one, leaving
(docs/hosting.md, "Teams"). Each only translates HTTP to :mod:`grader.hosting.services.teams`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from grader.hosting.api.auth import CurrentParticipant
from grader.hosting.api.body import parse
from grader.hosting.api.deps import Ctx
from grader.hosting.clock import iso
from grader.hosting.errors import TeamNotFound, TeamRefused
from grader.hosting.services import teams as service

router = APIRouter(prefix="/api/v1/team", tags=["teams"])


class CreateBody(BaseModel):
    """``POST /api/v1/team``."""

    name: str = Field(max_length=100)


class JoinBody(BaseModel):
    """``POST /api/v1/team/join``."""

    code: str = Field(max_length=100)


def _http(error: TeamNotFound | TeamRefused) -> HTTPException:
    return HTTPException(404 if isinstance(error, TeamNotFound) else 409, str(error))


@router.get("", summary="Your team: its name, members, size bound and merge deadline (404 when you are in none)")
def get_team(ctx: Ctx, who: CurrentParticipant) -> dict[str, Any]:
    try:
        return service.show(ctx, who.id)
    except TeamNotFound as error:
        raise _http(error) from None


@router.post(
    "",
    status_code=201,
    summary="Create a team, of which you are the first member",
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": CreateBody.model_json_schema()}}}},
)
async def post_team(request: Request, ctx: Ctx, who: CurrentParticipant) -> dict[str, Any]:
    body = await parse(request, CreateBody)
    try:
        return await run_in_threadpool(service.create, ctx, who.id, body.name)
    except (TeamNotFound, TeamRefused) as error:
        raise _http(error) from None


@router.post("/invites", status_code=201, summary="A one-time invitation code to your team, shown this once")
def post_invite(ctx: Ctx, who: CurrentParticipant) -> dict[str, str]:
    try:
        code, expires = service.invite(ctx, who.id)
    except (TeamNotFound, TeamRefused) as error:
        raise _http(error) from None
    return {"code": code, "expires_at": iso(expires) or ""}


@router.post(
    "/join",
    summary="Join the team of an invitation code (the code is then spent)",
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": JoinBody.model_json_schema()}}}},
)
async def post_join(request: Request, ctx: Ctx, who: CurrentParticipant) -> dict[str, Any]:
    body = await parse(request, JoinBody)
    try:
        return await run_in_threadpool(service.join, ctx, who.id, body.code)
    except (TeamNotFound, TeamRefused) as error:
        raise _http(error) from None


@router.post("/leave", status_code=204, summary="Leave your team: its submissions, yours for it included, stay the team's")
def post_leave(ctx: Ctx, who: CurrentParticipant) -> Response:
    try:
        service.leave(ctx, who.id)
    except (TeamNotFound, TeamRefused) as error:
        raise _http(error) from None
    return Response(status_code=204)
