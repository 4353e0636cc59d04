"""The FastAPI application. The OpenAPI page's assets come from the installed package, never a CDN."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp

from grader import __version__
from grader.hosting.api.body_caps import BodyCaps, route_caps
from grader.hosting.api.body_rate import MinimumBodyRate
from grader.hosting.api.headers import SecurityHeaders
from grader.hosting.api.long_poll import WATCH_THREADS, WATCHES_PER_PARTICIPANT, ClaimGate
from grader.hosting.api.paths import base_path
from grader.hosting.api.routes import (
    leaderboard,
    meta,
    notify,
    participants,
    resumable,
    shards,
    signup,
    teams,
    transparency,
    web,
    web_notify,
    workers,
)
from grader.hosting.api.worker_protocol import WorkerProtocol
from grader.hosting.context import ServerContext
from grader.hosting.identity.auth import SESSION_S
from grader.hosting.keyring.session_secret import ensure_session_secret

DOCS_ASSETS = "/docs-assets"
DOCS_INIT = "/docs-init.js"
#: /docs runs the bundled Swagger UI and its start-up script, both files of this server: no inline script, no CDN.
#: Swagger UI sets style attributes and draws data: images; it fetches /openapi.json; it may be framed by no one.
DOCS_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
# FastAPI's get_swagger_ui_html starts Swagger UI from an inline script, which the policy above refuses: the same
# start-up, as a file.
_DOCS_INIT_JS = """window.ui = SwaggerUIBundle({
  url: "%(base)s/openapi.json",
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
"""


def _docs_page(title: str, base: str) -> str:
    # ``base``: "" for a competition served alone, /c/<name> on a server of many.
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<link rel="stylesheet" href="{base}{DOCS_ASSETS}/swagger-ui.css">
<link rel="icon" href="{base}{DOCS_ASSETS}/favicon-32x32.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="{base}{DOCS_ASSETS}/swagger-ui-bundle.js"></script>
<script src="{base}{DOCS_INIT}"></script>
</body>
</html>
"""


def _swagger_assets() -> Path:
    from swagger_ui_bundle import swagger_ui_path  # type: ignore[import-untyped]

    return Path(swagger_ui_path)


def lifespan_of(on_start: Callable[[], None] | None, on_stop: Callable[[], None] | None) -> Callable[[FastAPI], Any]:
    """An app's lifespan that runs ``on_start`` before serving and ``on_stop`` after (the reaper, the local workers)."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if on_start is not None:
            on_start()
        try:
            yield
        finally:
            if on_stop is not None:
                on_stop()

    return lifespan


def add_sessions(app: ASGIApp | FastAPI, keys: Path) -> ASGIApp:
    """The web pages' session cookie: signed (itsdangerous) with ``keys``/session.secret, HttpOnly, SameSite=strict,
    8 hours or until sign-out ends its stored session. Added to ``app`` when it is a FastAPI app, else wrapped around it."""
    from starlette.middleware.sessions import SessionMiddleware

    options: dict[str, Any] = {
        "secret_key": ensure_session_secret(keys),
        "session_cookie": "grader_session",
        "max_age": SESSION_S,
        "same_site": "strict",
    }
    if isinstance(app, FastAPI):
        app.add_middleware(SessionMiddleware, **options)
        return app
    return SessionMiddleware(app, **options)


def create_app(
    ctx: ServerContext,
    *,
    on_start: Callable[[], None] | None = None,
    on_stop: Callable[[], None] | None = None,
    min_body_rate: float = 0,
    body_grace_s: float = 0,
    shared_session: bool = False,
) -> FastAPI:
    """The app for ``ctx``; ``on_start``/``on_stop`` run in its lifespan (the reaper and local workers).

    A request body slower than ``min_body_rate`` bytes/s after ``body_grace_s`` is cut (408; 0: no minimum).
    ``shared_session``: the session cookie is the server's (a server of many competitions: one sign-in for every
    competition; :func:`grader.hosting.api.server_app.create_server_app` adds it), not this competition's own.
    """

    app = FastAPI(
        title=f"grader: {ctx.competition.name}",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan_of(on_start, on_stop),
        description="Competition hosting API of `grader serve`. Participants authenticate with `Authorization: Bearer <token>`.",
    )
    # The bundled Swagger UI (swagger-ui-bundle's newest release, 4.15.5) renders OpenAPI 3.0 only; for 3.1,
    # FastAPI's default, /docs said "Unable to render this definition".
    app.openapi_version = "3.0.3"
    app.state.context = ctx
    app.state.claim_gate = ClaimGate()  # the claim long-polls' own threads and each worker's claims in progress
    # the /me pages' watches: threads of their own for their looks, and a few watches per participant (browser tabs)
    app.state.watch_gate = ClaimGate(look_threads=WATCH_THREADS, per_worker=WATCHES_PER_PARTICIPANT)
    if not shared_session:
        # Signed (itsdangerous), HttpOnly, SameSite=strict session cookie of the web pages; 8 hours, or until sign-out
        # ends its stored session (grader.hosting.identity.auth).
        add_sessions(app, ctx.state.keys)
    # Each added one wraps the ones before: a worker of another protocol is refused first, then a body too large
    # or too slow, all before any route or session code runs; every answer, those refusals included, carries the
    # security headers and names this server's worker protocol.
    app.add_middleware(MinimumBodyRate, bytes_per_s=min_body_rate, grace_s=body_grace_s)
    app.add_middleware(BodyCaps, caps=route_caps(ctx))
    app.add_middleware(WorkerProtocol)
    app.add_middleware(SecurityHeaders)
    app.mount(DOCS_ASSETS, StaticFiles(directory=_swagger_assets()), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs(request: Request) -> HTMLResponse:
        return HTMLResponse(_docs_page(f"{app.title} API", base_path(request.scope)), headers={"Content-Security-Policy": DOCS_CSP})

    @app.get(DOCS_INIT, include_in_schema=False)
    def docs_init(request: Request) -> Response:
        script = _DOCS_INIT_JS % {"base": base_path(request.scope)}
        return Response(script, media_type="text/javascript", headers={"Cache-Control": "max-age=3600"})

    app.include_router(meta.router)
    app.include_router(participants.router)
    app.include_router(resumable.router)
    app.include_router(notify.router)
    app.include_router(teams.router)
    app.include_router(workers.router)
    app.include_router(shards.router)
    app.include_router(leaderboard.router)
    app.include_router(transparency.router)
    app.include_router(web.router)
    app.include_router(signup.router)
    app.include_router(web_notify.router)
    return app
