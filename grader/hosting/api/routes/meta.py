"""Public routes: the competition, the host's public key, health; and /metrics for the host's scraper."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse, Response

from grader.hosting.api.auth import MetricsReader
from grader.hosting.api.deps import Ctx
from grader.hosting.services.competition import competition_info

router = APIRouter(tags=["public"])

#: The fixed URL of the host's public key (verify reports with ``grader verify REPORT --key host.pub``).
HOST_KEY_PATH = "/host-key.pub"


@router.get(HOST_KEY_PATH, response_class=PlainTextResponse, summary="The host's Ed25519 public key (PEM)")
def host_key(ctx: Ctx) -> str:
    return ctx.state.host_pub.read_text(encoding="ascii")


@router.get("/api/v1/competition", summary="The competition: window, quotas, kinds, pinned data digests and grader version")
def competition(ctx: Ctx) -> dict[str, Any]:
    return competition_info(ctx)


@router.get("/healthz", summary="Liveness")
def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/metrics", summary="Prometheus metrics (Authorization: Bearer <token of `grader admin metrics-token`>)", response_class=PlainTextResponse
)
async def metrics(ctx: Ctx, _reader: MetricsReader) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    from grader.hosting.services.metrics import render

    return Response(await run_in_threadpool(render, ctx.db, ctx.dispatcher), media_type=CONTENT_TYPE_LATEST)
