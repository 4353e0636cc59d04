"""Notification routes: a participant's webhook (secret shown once), e-mail address, test, and latest deliveries.
Each only translates HTTP to :mod:`grader.hosting.services.notify`; everything here is the caller's own."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from grader.hosting.api.auth import CurrentParticipant
from grader.hosting.api.body import parse
from grader.hosting.api.deps import Ctx
from grader.hosting.errors import NotifySettingRefused, NotifyTestLimited
from grader.hosting.services import notify as service

router = APIRouter(prefix="/api/v1/notify", tags=["notifications"])


class WebhookBody(BaseModel):
    """``PUT /api/v1/notify/webhook``."""

    url: str = Field(max_length=2048)


class EmailBody(BaseModel):
    """``PUT /api/v1/notify/email``."""

    address: str = Field(max_length=254)


@router.get("", summary="Your webhook URL and e-mail address (never the secret) and your latest deliveries")
def get_notify(ctx: Ctx, who: CurrentParticipant) -> dict[str, Any]:
    return service.overview(ctx, who.id)


@router.put(
    "/webhook",
    summary="Set your webhook URL; the answer carries its new signing secret, shown this once",
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": WebhookBody.model_json_schema()}}}},
)
async def put_webhook(request: Request, ctx: Ctx, who: CurrentParticipant) -> dict[str, str]:
    body = await parse(request, WebhookBody)
    try:
        secret = await run_in_threadpool(service.set_webhook, ctx, who.id, body.url)
    except NotifySettingRefused as error:
        raise HTTPException(422, str(error)) from None
    return {"url": body.url, "secret": secret}


@router.delete("/webhook", status_code=204, summary="Clear your webhook (pending deliveries to it are not sent)")
def delete_webhook(ctx: Ctx, who: CurrentParticipant) -> Response:
    service.clear_webhook(ctx, who.id)
    return Response(status_code=204)


@router.put(
    "/email",
    summary="Set your e-mail address for notifications (when the server has an SMTP relay)",
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": EmailBody.model_json_schema()}}}},
)
async def put_email(request: Request, ctx: Ctx, who: CurrentParticipant) -> dict[str, str]:
    body = await parse(request, EmailBody)
    try:
        await run_in_threadpool(service.set_email, ctx, who.id, body.address)
    except NotifySettingRefused as error:
        raise HTTPException(422, str(error)) from None
    return {"email": body.address}


@router.delete("/email", status_code=204, summary="Clear your e-mail address")
def delete_email(ctx: Ctx, who: CurrentParticipant) -> Response:
    service.set_email(ctx, who.id, None)
    return Response(status_code=204)


@router.post("/test", status_code=202, summary="Send a test notification (type ping) to every address you set; 429 past 10 an hour")
def post_test(ctx: Ctx, who: CurrentParticipant) -> dict[str, int]:
    try:
        return {"deliveries": service.send_test(ctx, who.id)}
    except NotifyTestLimited as error:
        raise HTTPException(429, str(error)) from None
