"""Every route's body cap, enforced before any route runs: a pure ASGI middleware.

Each request is matched by method and path to its route's cap (:func:`route_caps`;
a route that takes no body reads none, and any body sent to it is held to the
JSON cap and never read). A ``Content-Length`` over the cap is
answered 413 at once, without a byte of the body read; a body without one (chunked)
is counted as the application reads it, and the read that passes the cap ends the
request with 413. The connection is closed after a 413 (``Connection: close``), so
the rest of the body is never read either. Routes still read through
:func:`grader.hosting.api.body.read_bounded` with the same caps, and only after their
authentication passed: a route that needs a credential refuses a request without
a valid one before its body is read at all.

Pure ASGI rather than Starlette's ``BaseHTTPMiddleware``, which would wrap the
body stream in its own task and queue.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from grader import jsonio
from grader.hosting.api.body import FORM_BYTES, JSON_BYTES
from grader.hosting.api.paths import route_path
from grader.hosting.context import ServerContext
from grader.hosting.intake.refusals import too_large
from grader.hosting.services.shard_grading import largest_body

#: A route's words for a declared body over its cap, from the declared size and the cap (None: the generic line).
Wording = Callable[[int, int], str] | None


@dataclass(frozen=True)
class RouteCaps:
    """Body caps by method and path pattern; ``default`` for any other request (whose route reads no body)."""

    rules: tuple[tuple[str, re.Pattern[str], int, Wording], ...]
    default: int = JSON_BYTES

    def cap(self, method: str, path: str) -> int:
        """The most body bytes a request for ``method`` ``path`` may send."""
        return self.match(method, path)[0]

    def match(self, method: str, path: str) -> tuple[int, Wording]:
        """The cap of ``method`` ``path`` and its route's words for a declared body over it."""
        for rule_method, pattern, limit, wording in self.rules:
            if method == rule_method and pattern.fullmatch(path):
                return limit, wording
        return self.default, None


def _rule(method: str, template: str, limit: int, wording: Wording = None) -> tuple[str, re.Pattern[str], int, Wording]:
    return method, re.compile(re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", re.escape(template))), limit, wording


def _upload_too_large(size: int, cap: int) -> str:
    return str(too_large(size, cap))  # the upload route's own words, which `grader submit` also prints before uploading


def shard_output_cap(ctx: ServerContext) -> int:
    """The largest output a shard job may put: only a sharded competition takes one."""
    return largest_body(ctx) if ctx.competition.sharding.shard_documents is not None else JSON_BYTES


def route_caps(ctx: ServerContext) -> RouteCaps:
    """The caps of the routes that take a body: kilobytes for JSON and forms, the job's bound for results and (the largest task's) for compact runs, ``max_bytes`` for uploads."""
    return RouteCaps(
        (
            _rule("POST", "/api/v1/submissions", ctx.competition.upload_max_bytes, _upload_too_large),
            # A resumable upload's PATCH: no more than an upload (the route holds it to the bytes its upload has left).
            _rule("PATCH", "/api/v1/uploads/{key}", ctx.competition.upload_max_bytes, _upload_too_large),
            _rule("PUT", "/api/v1/finals", JSON_BYTES),
            _rule("PUT", "/api/v1/notify/webhook", JSON_BYTES),
            _rule("PUT", "/api/v1/notify/email", JSON_BYTES),
            _rule("POST", "/api/v1/team", JSON_BYTES),
            _rule("POST", "/api/v1/team/join", JSON_BYTES),
            _rule("POST", "/api/v1/worker/claim", JSON_BYTES),
            _rule("POST", "/api/v1/worker/key", JSON_BYTES),
            _rule("POST", "/api/v1/worker/jobs/{submission_id}/heartbeat", JSON_BYTES),
            _rule("POST", "/api/v1/worker/jobs/{submission_id}/result", ctx.result_body_bytes),
            _rule("PUT", "/api/v1/worker/jobs/{submission_id}/runs/{task}", max(ctx.run_body_bytes.values(), default=JSON_BYTES)),
            _rule("PUT", "/api/v1/worker/shards/{job_id}/output", shard_output_cap(ctx)),
            _rule("POST", "/signin", FORM_BYTES),
            _rule("POST", "/signout", FORM_BYTES),
            _rule("POST", "/me/finals", FORM_BYTES),
            _rule("POST", "/signup", FORM_BYTES),
            _rule("POST", "/signup/join", FORM_BYTES),
            _rule("POST", "/me/token", FORM_BYTES),
            _rule("POST", "/me/team/{action}", FORM_BYTES),
        )
    )


class BodyTooLarge(Exception):
    """A body passed its route's cap while the application read it."""


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = jsonio.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodyCaps:
    """ASGI middleware: 413 for a body over its route's cap, declared or counted."""

    def __init__(self, app: ASGIApp, caps: RouteCaps) -> None:
        self.app = app
        self.caps = caps

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cap, wording = self.caps.match(scope["method"], route_path(scope))
        declared = [value for name, value in scope["headers"] if name == b"content-length"]
        if declared:
            if len(declared) > 1 or not declared[0].isdigit():
                await _refuse(send, 400, "malformed Content-Length")
                return
            if int(declared[0]) > cap:
                detail = wording(int(declared[0]), cap) if wording else f"request body larger than this route's cap of {cap} bytes"
                await _refuse(send, 413, detail)
                return
        size = 0
        started = False
        # Whether a body may still be on its way: the answer then closes the connection, so that the server never
        # reads the rest of a body its route refused unread (an anonymous caller's, say) to reach the next request.
        unread = (declared and declared[0] != b"0") or any(name == b"transfer-encoding" for name, _ in scope["headers"])

        async def counted() -> Message:
            nonlocal size, unread
            message = await receive()
            if message["type"] == "http.request":
                size += len(message.get("body", b""))
                if size > cap:
                    raise BodyTooLarge
                unread = unread and message.get("more_body", False)
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if unread:
                    message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge:
            if started:
                raise
            await _refuse(send, 413, f"request body larger than this route's cap of {cap} bytes")
