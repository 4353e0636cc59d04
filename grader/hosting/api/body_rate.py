"""A minimum rate for request bodies: a pure ASGI middleware that cuts a body sent too slowly.

uvicorn has no read timeout: a client that sends a body one byte a minute holds its
connection, and the route's task, as long as it likes. Here a body must arrive at
``bytes_per_s`` on average once ``grace_s`` have passed since the application began
reading it (not since the request began: time the server spends first, checking a
token or a quota, is not the client's):
each read of the body waits only until the moment the bytes received so far fall
behind that pace, and a read that times out ends the request with 408 (the
connection closed). Once the body is complete, reads pass through untouched (the
application may wait on them for a disconnect as long as it likes).

The public deployment puts nginx in front (docs/deploy.md), which bounds the time
to send the request head and passes bodies through unbuffered, so that this pace is
the client's own.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from grader import jsonio


class BodyTooSlow(Exception):
    """A body fell behind the minimum rate."""


class MinimumBodyRate:
    """ASGI middleware: 408 for a body that falls behind ``bytes_per_s`` after ``grace_s`` (0: no minimum)."""

    def __init__(self, app: ASGIApp, bytes_per_s: float, grace_s: float) -> None:
        self.app = app
        self.bytes_per_s = bytes_per_s
        self.grace_s = grace_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.bytes_per_s <= 0:
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        began: float | None = None
        size = 0
        done = False
        started = False

        async def paced() -> Message:
            nonlocal began, size, done
            if done:
                return await receive()
            if began is None:
                began = loop.time()
            # The moment the bytes so far fall behind the pace: a read must bring more by then.
            deadline = began + self.grace_s + size / self.bytes_per_s
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0.001))
            except TimeoutError:
                raise BodyTooSlow from None
            if message["type"] == "http.request":
                size += len(message.get("body", b""))
                done = not message.get("more_body", False)
            else:
                done = True
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, paced, watched)
        except BodyTooSlow:
            if started:
                raise
            detail = jsonio.dumps({"detail": f"request body slower than {self.bytes_per_s:.0f} bytes/s after {self.grace_s:g} s"}).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(detail)).encode()), (b"connection", b"close")]
            await send({"type": "http.response.start", "status": 408, "headers": headers})
            await send({"type": "http.response.body", "body": detail})
