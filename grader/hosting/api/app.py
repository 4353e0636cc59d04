"""The FastAPI application. The OpenAPI page's assets come from the installed package, never a CDN."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from grader import __version__
from grader.hosting.api.routes import leaderboard, meta, participants, web, workers
from grader.hosting.context import ServerContext
from grader.hosting.leaderboard.secret_session import ensure_session_secret

DOCS_ASSETS = "/docs-assets"


def _swagger_assets() -> Path:
    from swagger_ui_bundle import swagger_ui_path  # type: ignore[import-untyped]

    return Path(swagger_ui_path)


def create_app(ctx: ServerContext, *, on_start: Callable[[], None] | None = None, on_stop: Callable[[], None] | None = None) -> FastAPI:
    """The app for ``ctx``; ``on_start``/``on_stop`` run in its lifespan (the reaper and local workers)."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if on_start is not None:
            on_start()
        try:
            yield
        finally:
            if on_stop is not None:
                on_stop()

    app = FastAPI(
        title=f"grader: {ctx.competition.name}",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
        description="Competition hosting API of `grader serve`. Participants authenticate with `Authorization: Bearer <token>`.",
    )
    app.state.context = ctx
    from starlette.middleware.sessions import SessionMiddleware

    # Signed (itsdangerous), HttpOnly, SameSite=strict session cookie of the web pages; 8 hours.
    app.add_middleware(
        SessionMiddleware, secret_key=ensure_session_secret(ctx.state.keys), session_cookie="grader_session", max_age=8 * 3600, same_site="strict"
    )
    app.mount(DOCS_ASSETS, StaticFiles(directory=_swagger_assets()), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
        )

    app.include_router(meta.router)
    app.include_router(participants.router)
    app.include_router(workers.router)
    app.include_router(leaderboard.router)
    app.include_router(web.router)
    return app
