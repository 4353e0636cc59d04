"""Public routes: the competition, the host's public key, health."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import PlainTextResponse, Response
from sqlalchemy import select

from grader import __version__
from grader.hosting.api.deps import context
from grader.hosting.clock import iso
from grader.hosting.context import ServerContext
from grader.hosting.db.models import Pin

router = APIRouter(tags=["public"])

#: The fixed URL of the host's public key (verify reports with ``grader verify REPORT --key host.pub``).
HOST_KEY_PATH = "/host-key.pub"


@router.get(HOST_KEY_PATH, response_class=PlainTextResponse, summary="The host's Ed25519 public key (PEM)")
def host_key(ctx: ServerContext = Depends(context)) -> str:
    return ctx.state.host_pub.read_text(encoding="ascii")


@router.get("/api/v1/competition", summary="The competition: window, quotas, kinds, pinned data digests and grader version")
def competition(ctx: ServerContext = Depends(context)) -> dict[str, Any]:
    c = ctx.competition
    with ctx.db.session() as session:
        pin = session.get(Pin, ctx.pin_id)
        assert pin is not None
        pinned = {"grader_version": pin.grader_version, "digests": pin.digests, "pinned_at": iso(pin.pinned_at)}
    return {
        "name": c.name,
        "title": c.title,
        "benchmark": pin.digests.get("benchmark"),
        "split": ctx.split,
        "sample_split": ctx.sample_split,
        "tasks": ctx.tasks,
        "start": iso(c.start),
        "end": iso(ctx.ends_at()),
        "kinds": list(c.kinds),
        "require_training_labels": c.require_training_labels,
        "quotas": {
            "per_day": c.quotas.per_day,
            "total": c.quotas.total,
            "concurrent": c.quotas.concurrent,
            "sample_per_day": c.quotas.sample_per_day,
        },
        "limits": c.limits.as_report(),
        "upload_max_bytes": c.upload_max_bytes,
        "pin": pinned,
        "grader_version": __version__,
        # The key that blinds the ids containers see: its id from day one, the key at the end (GET /api/v1/partition).
        "blinding_key_id": None if ctx.blinding_key is None else ctx.blinding_key.key_id,
    }


@router.get("/healthz", summary="Liveness")
def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/metrics", summary="Prometheus metrics (Authorization: Bearer <token of `grader admin metrics-token`>)", response_class=PlainTextResponse
)
def metrics(request: Request, ctx: ServerContext = Depends(context)) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    from grader.hosting.db.models import Setting
    from grader.hosting.services.metrics import METRICS_TOKEN_KEY, render
    from grader.hosting.services.tokens import same_digest, token_digest

    address = request.client.host if request.client else "unknown"
    if ctx.limiter.blocked_for(address) > 0:
        raise HTTPException(429, "too many failed sign-ins from this address")
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    with ctx.db.session() as session:
        stored = session.scalar(select(Setting.value).where(Setting.key == METRICS_TOKEN_KEY))
    if stored is None or scheme.lower() != "bearer" or not token or len(token) > 200 or not same_digest(stored, token_digest(token.strip())):
        ctx.limiter.failed(address)
        raise HTTPException(401, "missing or wrong metrics token (`grader admin metrics-token` creates one)", headers={"WWW-Authenticate": "Bearer"})
    return Response(render(ctx.db, ctx.dispatcher), media_type=CONTENT_TYPE_LATEST)
