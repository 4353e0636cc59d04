"""One try of a webhook: the body signed, POSTed to the address the guard checked, the answer's head read, bounded.

Bounds of a try: the socket's timeout on each step, and a watchdog that shuts the socket at ``2 x timeout_s`` however
slowly the receiver drips its answer; at most :data:`ANSWER_BYTES` of the answer's body are read. No redirect is
followed (``http.client`` follows none): a 3xx is a failed try, so a receiver cannot point the server elsewhere.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from grader.hosting.errors import DeliveryFailed, NotifySettingRefused
from grader.hosting.notify.addresses import Address, Guard
from grader.hosting.notify.signing import HEADER, signature
from grader.text import escape_control

#: The most of an answer's body a try reads (then the connection is closed): a receiver cannot make the server read more.
ANSWER_BYTES = 4096
#: The longest URL a participant may set.
URL_CHARS = 2048
USER_AGENT = "grader-notify/1"


@dataclass(frozen=True)
class Target:
    """A webhook URL taken apart: scheme, host (as written, for ``Host`` and TLS), port, path with query."""

    scheme: str
    host: str
    port: int
    path: str

    @property
    def host_header(self) -> str:
        bracketed = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return bracketed if self.port == default else f"{bracketed}:{self.port}"


def parse_url(url: str) -> Target:
    """A participant's webhook URL, or :class:`NotifySettingRefused` naming what is wrong with it."""
    if len(url) > URL_CHARS or any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise NotifySettingRefused(f"a webhook URL is at most {URL_CHARS} characters, without spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise NotifySettingRefused(f"not a URL: {error}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NotifySettingRefused("a webhook URL is http:// or https:// with a host")
    if parts.username is not None or parts.password is not None:
        raise NotifySettingRefused("a webhook URL carries no user or password (the signature authenticates the server)")
    if parts.fragment:
        raise NotifySettingRefused("a webhook URL has no #fragment")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), path)


class _PinnedConnection(http.client.HTTPSConnection):
    """A connection to ``address`` (already checked) whatever ``host`` resolves to now; TLS (https) checks ``host``'s certificate."""

    def __init__(self, target: Target, address: Address, timeout: float, context: ssl.SSLContext | None) -> None:
        super().__init__(target.host, target.port, timeout=timeout, context=context or ssl.create_default_context())
        self.address = address
        self.tls = context is not None

    def connect(self) -> None:
        sock = socket.create_connection((str(self.address), self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host) if self.tls else sock  # type: ignore[attr-defined]


def post(url: str, secret: str, body: bytes, *, guard: Guard, timeout_s: float, tls: ssl.SSLContext | None = None) -> int:
    """POST ``body`` signed under ``secret`` to ``url``; the 2xx status, or :class:`DeliveryFailed` saying why in one line."""
    try:
        target = parse_url(url)
    except NotifySettingRefused as error:
        raise DeliveryFailed(str(error)) from None
    address = guard.address(target.host, target.port)
    context = (tls or ssl.create_default_context()) if target.scheme == "https" else None
    connection = _PinnedConnection(target, address, timeout_s, context)
    fired = threading.Event()
    watchdog = threading.Timer(2 * timeout_s, _shut, args=(connection, fired))
    watchdog.daemon = True
    watchdog.start()
    try:
        connection.request(
            "POST",
            target.path,
            body=body,
            headers={
                "Host": target.host_header,
                "Content-Type": "application/json",
                "User-Agent": USER_AGENT,
                HEADER: signature(secret, int(time.time()), body),
            },
        )
        answer = connection.getresponse()
        answer.read(ANSWER_BYTES)
        status = answer.status
    except (OSError, http.client.HTTPException) as error:
        # The receiver's words (a bad status line) are escaped: they reach the server's log and the participant's listing.
        raise DeliveryFailed(f"{target.host}: {type(error).__name__}: {escape_control(str(error)[:120])}") from None
    finally:
        watchdog.cancel()
        connection.close()
    if fired.is_set():  # cut off mid-answer: what was read may be a truncated head, not an answer
        raise DeliveryFailed(f"{target.host}: no whole answer within {2 * timeout_s:g} s")
    if 300 <= status < 400:
        raise DeliveryFailed(f"{target.host} answered {status}: a redirect, not followed")
    if not 200 <= status < 300:
        raise DeliveryFailed(f"{target.host} answered {status}")
    return status


def _shut(connection: http.client.HTTPConnection, fired: threading.Event) -> None:
    """The watchdog: end a try that outlived its bound (a receiver dripping its answer byte by byte)."""
    fired.set()
    sock = connection.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
