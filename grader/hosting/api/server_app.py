"""The application of a server of many competitions: ``/`` lists them, and each is served by its own app under its name.

Addresses (docs/hosting.md, "Many competitions on one server"):

- ``/c/<name>/…``: competition ``name``'s pages, its log (``/c/<name>/log/…``) and, for clients given
  ``--server URL/c/<name>``, its API (``/c/<name>/api/v1/…``);
- ``/api/v1/competitions/<name>/…``: its API, the same routes as ``/c/<name>/api/v1/…``;
- ``/`` and ``GET /api/v1/competitions``: the listing;
- ``POST /api/v1/worker/claim``: the claim of a worker of many competitions (:mod:`grader.hosting.api.routes.server_claim`).

Each competition's app is exactly a one-competition server's (:func:`grader.hosting.api.app.create_app`) over that
competition's own context: its database (or schema), keys, log and limits. The router hands it the request with
``root_path`` set to ``/c/<name>``: its routes, body caps and worker-protocol check see the paths they always saw.

While the server holds exactly one competition, the addresses of a one-competition server keep working: API, log,
host key and metrics paths as aliases (clients follow no redirect, on purpose: a redirect would carry a token to
another address and turn a POST into a GET), pages with a 308 to their new address. With several, such a path
answers 404 naming the competitions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from grader import __version__, jsonio
from grader.hosting.api.app import add_sessions, lifespan_of
from grader.hosting.api.body_rate import MinimumBodyRate
from grader.hosting.api.headers import SecurityHeaders
from grader.hosting.api.long_poll import ClaimGate
from grader.hosting.api.routes import server_claim
from grader.hosting.api.routes.web import STYLESHEET, TEMPLATES
from grader.hosting.api.worker_protocol import WorkerProtocol
from grader.hosting.context import ServerContext
from grader.hosting.protocol.messages import SERVER_CLAIM_PATH
from grader.hosting.services.fair_claim import RoundRobin
from grader.hosting.services.listing import ListedEnds, competition_entry, listing

COMPETITION_PAGES = "/c/"
COMPETITION_API = "/api/v1/competitions/"
#: Paths a one-competition server's clients call: still served, as aliases, while the server holds one competition.
ALIASED = ("/api/", "/log/", "/host-key.pub", "/metrics", "/openapi.json", "/docs", "/docs-assets/", "/docs-init.js")
#: The server's own paths (not a competition's). The claim of a worker of many competitions is the server's, also
#: while it holds one competition (whose own claim is at /c/<name>/api/v1/worker/claim).
SERVER_PATHS = ("/", "/api/v1/competitions", "/healthz", "/assets/board.css", SERVER_CLAIM_PATH)


class Competitions:
    """The competitions served now: name → (context, app). The server adds and removes while it runs.

    Copy on write: each change binds a new dict, so a request (on the event loop) that reads ``served`` sees one
    whole snapshot while the server's watcher (another thread) adds or retires a competition.
    """

    def __init__(self) -> None:
        self.served: dict[str, tuple[ServerContext, ASGIApp]] = {}

    def add(self, name: str, ctx: ServerContext, app: ASGIApp) -> None:
        self.served = {**self.served, name: (ctx, app)}

    def remove(self, name: str) -> None:
        self.served = {n: v for n, v in self.served.items() if n != name}

    def contexts(self) -> list[ServerContext]:
        return [ctx for ctx, _app in self.served.values()]

    def only(self) -> str | None:
        """The one competition's name while there is exactly one."""
        served = self.served
        return next(iter(served)) if len(served) == 1 else None


def _index_app(competitions: Competitions, on_start: Callable[[], None] | None, on_stop: Callable[[], None] | None) -> FastAPI:
    app = FastAPI(
        title="grader: competitions", version=__version__, docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan_of(on_start, on_stop)
    )
    app.state.competitions = competitions
    app.state.claim_gate = ClaimGate()  # the long-polls of claims naming many competitions: looks in threads of their own
    app.state.turn = RoundRobin()
    app.include_router(server_claim.router)
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
            served = self.competitions.served.get(only)
            if served is None:  # retired between the two reads
                await _answer(send, 404, f"no competition {only!r} on this server")
                return
            await served[1](scope, receive, send)
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
    competitions: Competitions,
    *,
    session_keys: Path,
    on_start: Callable[[], None] | None = None,
    on_stop: Callable[[], None] | None = None,
    min_body_rate: float = 16 << 10,
    body_grace_s: float = 20.0,
) -> ASGIApp:
    """The server's app: the listing, and each of ``competitions`` under its name (they may change while it runs).

    One session cookie for the whole server, signed with ``session_keys``/session.secret: a person signs in once, in
    every competition they are registered in (each competition's pages find their participant from it).
    """
    # The server's own worker route (the claim of many competitions) checks the worker protocol first, and its body
    # (read bounded by the route) must arrive at the rate each competition's routes ask for.
    index = WorkerProtocol(MinimumBodyRate(_index_app(competitions, on_start, on_stop), bytes_per_s=min_body_rate, grace_s=body_grace_s))
    return SecurityHeaders(add_sessions(CompetitionRouter(competitions, index), session_keys))
