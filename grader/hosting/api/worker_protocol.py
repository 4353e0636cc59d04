"""The worker protocol's version, checked before anything else of a worker request: a pure ASGI middleware.

A request to a worker route (``/api/v1/worker/...``) whose :data:`~grader.hosting.protocol.version.HEADER`
names another version, or none, is answered 426 with the one line of
:func:`grader.hosting.protocol.version.server_refusal`, before authentication, before its body is
read and before any route runs: no lease is taken, no key recorded, nothing stored. Every answer
of the server, refusals of the other middlewares included, names the server's version in the
same header, so a worker tells a server of another version (or a grader before 0.3.0, which
names none) from a proxy's answer.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from grader import jsonio
from grader.hosting.api.paths import route_path
from grader.hosting.protocol.version import HEADER, WORKER_PROTOCOL, server_refusal

#: The prefix of the worker routes (grader.hosting.api.routes.workers and .shards).
WORKER_ROUTES = "/api/v1/worker/"
_NAME = HEADER.lower().encode("ascii")
_OURS = (_NAME, str(WORKER_PROTOCOL).encode("ascii"))
#: A 426 names the protocol to upgrade to (RFC 9110, 15.5.22).
_UPGRADE = (b"upgrade", f"grader-worker-protocol/{WORKER_PROTOCOL}".encode("ascii"))


def _sent(scope: Scope) -> str | None:
    """The version the request's header names (None without one; several headers are joined, and refused as no number)."""
    values = [value.decode("latin-1") for name, value in scope["headers"] if name == _NAME]
    return ",".join(values) if values else None


class WorkerProtocol:
    """ASGI middleware: refuses a worker request of another protocol (426) and names this server's on every answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if route_path(scope).startswith(WORKER_ROUTES):
            why = server_refusal(_sent(scope))
            if why is not None:
                body = jsonio.dumps({"detail": why}).encode("utf-8")
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode("ascii")), _OURS, _UPGRADE]
                # 426 Upgrade Required: refused for the protocol it speaks, and only for that. The body is never read.
                await send({"type": "http.response.start", "status": 426, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return

        async def naming_ours(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), _OURS]}
            await send(message)

        await self.app(scope, receive, naming_ours)
