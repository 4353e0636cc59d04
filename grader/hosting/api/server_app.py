"""The application of a server of many competitions: ``/`` lists them, and each is served by its own app under its name.

Addresses (docs/hosting.md, "Many competitions on one server"):

- ``/c/<name>/…``: competition ``name``'s pages, its log (``/c/<name>/log/…``) and, for clients given
  ``--server URL/c/<name>``, its API (``/c/<name>/api/v1/…``);
- ``/api/v1/competitions/<name>/…``: its API, the same routes as ``/c/<name>/api/v1/…``;
- ``/`` and ``GET /api/v1/competitions``: the listing.

Each competition's app is exactly a one-competition server's (:func:`grader.hosting.api.app.create_app`) over that
competition's own context: its database (or schema), keys, log and limits. The router hands it the request with
``root_path`` set to ``/c/<name>``: its routes, body caps and worker-protocol check see the paths they always saw.

While the server holds exactly one competition, the addresses of a one-competition server keep working: API, log,
host key and metrics paths as aliases (clients follow no redirect, on purpose: a redirect would carry a token to
another address and turn a POST into a GET), pages with a 308 to their new address. With several, such a path
answers 404 naming the competitions.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from grader import __version__, jsonio
from grader.hosting.api.headers import SecurityHeaders
from grader.hosting.api.routes.web import STYLESHEET, TEMPLATES
from grader.hosting.context import ServerContext
from grader.hosting.services.listing import ListedEnds, competition_entry, listing

COMPETITION_PAGES = "/c/"
COMPETITION_API = "/api/v1/competitions/"
#: Paths a one-competition server's clients call: still served, as aliases, while the server holds one competition.
ALIASED = ("/api/", "/log/", "/host-key.pub", "/metrics", "/openapi.json", "/docs", "/docs-assets/", "/docs-init.js")
#: The server's own paths (not a competition's).
SERVER_PATHS = ("/", "/api/v1/competitions", "/healthz", "/assets/board.css")


class Competitions:
    """The competitions served now: name → (context, app). The server adds and removes while it runs."""

    def __init__(self) -> None:
        self.served: dict[str, tuple[ServerContext, ASGIApp]] = {}

    def contexts(self) -> list[ServerContext]:
        return [ctx for ctx, _app in self.served.values()]

    def only(self) -> str | None:
        """The one competition's name while there is exactly one."""
        return next(iter(self.served)) if len(self.served) == 1 else None


def _index_app(competitions: Competitions, on_start: Callable[[], None] | None, on_stop: Callable[[], None] | None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if on_start is not None:
            on_start()
        try:
            yield
        finally:
            if on_stop is not None:
                on_stop()

    app = FastAPI(title="grader: competitions", version=__version__, docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    # The listing's reads of each competition's end, kept for a moment (services/listing.py: END_TTL_S)
    ends = ListedEnds()

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"ok": True, "competitions": len(competitions.served)}

    @app.get("/api/v1/competitions")
    def competitions_json(request: Request) -> list[dict[str, Any]]:
        return listing(competitions.contexts(), base=str(request.scope.get("root_path", "")), ends=ends)

    @app.get("/api/v1/competitions/{name}")
    def competition_json(name: str, request: Request) -> dict[str, Any]:
        served = competitions.served.get(name)
        if served is None:
            raise HTTPException(404, f"no competition {name!r} on this server")
        return competition_entry(served[0], base=str(request.scope.get("root_path", "")), ends=ends)

    @app.get("/assets/board.css")
    def stylesheet() -> Response:
        return Response(STYLESHEET, media_type="text/css", headers={"Cache-Control": "max-age=3600"})

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request) -> HTMLResponse:
        base = str(request.scope.get("root_path", ""))
        page = TEMPLATES.get_template("index.html").render(base=base, competitions=listing(competitions.contexts(), base=base, ends=ends))
        return HTMLResponse(
            page,
            headers={"Content-Security-Policy": "default-src 'self'; script-src 'none'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"},
        )

    return app


async def _answer(send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = jsonio.dumps({"detail": detail}).encode("utf-8")
    start = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode("ascii")), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})


class CompetitionRouter:
    """ASGI: hands each request to the app of the competition its path names (see the module's docstring)."""

    def __init__(self, competitions: Competitions, index: ASGIApp) -> None:
        self.competitions = competitions
        self.index = index

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.index(scope, receive, send)
            return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        root: str = scope.get("root_path", "")
        if path.startswith(COMPETITION_PAGES):
            name, _, rest = path[len(COMPETITION_PAGES) :].partition("/")
            if not _:  # /c/<name>: the page's address ends with a slash, so that its relative links resolve under it
                await _answer(send, 308, "moved", [(b"location", _location(root + path + "/", scope))])
                return
            await self._competition(name, scope, receive, send, path, root)
            return
        if path.startswith(COMPETITION_API):
            name, slash, rest = path[len(COMPETITION_API) :].partition("/")
            if not slash or not rest:
                await self.index(scope, receive, send)
                return
            inner = f"{COMPETITION_PAGES}{name}/api/v1/{rest}"
            await self._competition(name, {**scope, "path": inner, "raw_path": inner.encode()}, receive, send, inner, root)
            return
        if path in SERVER_PATHS:
            await self.index(scope, receive, send)
            return
        only = self.competitions.only()
        if only is None:
            names = ", ".join(sorted(self.competitions.served)) or "none"
            await _answer(
                send,
                404,
                f"this server holds {len(self.competitions.served)} competitions ({names}): address one as /c/<name>/ "
                f"(pages and --server URL/c/<name>) or /api/v1/competitions/<name>/",
            )
            return
        if any(path == p.rstrip("/") or path.startswith(p) for p in ALIASED):
            _ctx, app = self.competitions.served[only]
            await app(scope, receive, send)
            return
        # A page of the one competition, at its one-competition address: moved for good (308 keeps a POST a POST).
        await _answer(send, 308, "moved", [(b"location", _location(f"{root}{COMPETITION_PAGES}{only}{path}", scope))])

    async def _competition(self, name: str, scope: Scope, receive: Receive, send: Send, path: str, root: str) -> None:
        served = self.competitions.served.get(name)
        if served is None:
            await _answer(send, 404, f"no competition {name[:80]!r} on this server")
            return
        _ctx, app = served
        await app({**scope, "root_path": f"{root}{COMPETITION_PAGES}{name}"}, receive, send)


def _location(path: str, scope: Scope) -> bytes:
    """A Location header: the path percent-encoded (it comes from the request), its query kept as sent."""
    query: bytes = scope.get("query_string", b"")
    return quote(path, safe="/:@!$&'()*+,;=-._~").encode("ascii") + (b"?" + query if query else b"")


def create_server_app(
    competitions: Competitions, *, on_start: Callable[[], None] | None = None, on_stop: Callable[[], None] | None = None
) -> ASGIApp:
    """The server's app: the listing, and each of ``competitions`` under its name (they may change while it runs)."""
    return SecurityHeaders(CompetitionRouter(competitions, _index_app(competitions, on_start, on_stop)))
