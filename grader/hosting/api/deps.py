"""Route dependencies: the context, and authentication decided once (participants and workers)."""

from __future__ import annotations

from fastapi import HTTPException, Request

from grader import jsonio
from grader.hosting.context import ServerContext
from grader.hosting.db.models import Participant, Worker
from grader.hosting.services.participants import authenticate, authenticate_worker


def context(request: Request) -> ServerContext:
    """The server's context."""
    return request.app.state.context  # type: ignore[no-any-return]


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token or len(token) > 200:
        return None
    return token.strip()


def _address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _authenticated(request: Request, lookup):  # type: ignore[no-untyped-def]
    ctx = context(request)
    address = _address(request)
    wait = ctx.limiter.blocked_for(address)
    if wait > 0:
        raise HTTPException(
            429, f"too many failed sign-ins from this address; try again in {wait:.0f} s", headers={"Retry-After": str(int(wait) + 1)}
        )
    token = _bearer(request)
    found = None
    if token is not None:
        with ctx.db.session() as session:
            found = lookup(session, token)
            if found is not None:
                session.expunge(found)
    if found is None:
        ctx.limiter.failed(address)
        raise HTTPException(401, "missing, unknown or revoked token", headers={"WWW-Authenticate": "Bearer"})
    return found


def participant(request: Request) -> Participant:
    """The participant whose token the request carries (401 otherwise; 429 after repeated failures)."""
    return _authenticated(request, authenticate)  # type: ignore[no-any-return]


def worker(request: Request) -> Worker:
    """The worker whose token the request carries."""
    return _authenticated(request, authenticate_worker)  # type: ignore[no-any-return]


async def strict_json_body(request: Request) -> None:
    """422 unless the body is JSON that :func:`grader.jsonio.loads` accepts (no duplicate keys, no NaN, bounded depth).

    FastAPI's own parser keeps the last of duplicate keys and reads NaN; a worker's result becomes a signed
    report, so it is held to the same strict reading as any file the grader reads. Starlette keeps the body it
    already read, so this parses it a second time without reading the network again.
    """
    try:
        jsonio.loads(await request.body())
    except jsonio.JsonError as error:
        raise HTTPException(422, f"request body: {error.what}") from None
