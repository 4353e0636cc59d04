"""Security headers on every response: a pure ASGI middleware.

Each answer that does not set its own gets a Content-Security-Policy that loads
nothing and may be framed by no one (``frame-ancestors 'none'``; ``X-Frame-Options``
for older browsers), ``nosniff`` and a same-origin referrer. The HTML pages set
their own policy (the leaderboard pages: no script at all; ``/docs``: the bundled
Swagger UI's own scripts, never inline ones); every policy keeps ``frame-ancestors 'none'``.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The policy of an answer that sets none (JSON, CSV, keys, assets, errors).
DEFAULT_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
_DEFAULTS = (
    (b"content-security-policy", DEFAULT_CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)


class SecurityHeaders:
    """ASGI middleware: adds each of :data:`_DEFAULTS` a response does not already carry."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers.extend((name, value) for name, value in _DEFAULTS if name not in present)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)
