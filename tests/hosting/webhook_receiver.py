"""A webhook receiver on loopback for the notification tests: a real HTTP server in a thread that records every request."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver(ThreadingHTTPServer):
    """A webhook receiver on loopback: records every request; ``/redirect`` answers 302 to ``/followed``. With
    ``hold_first``, the first request gets no answer until :attr:`release` is set (a try cut in the middle)."""

    daemon_threads = True

    def __init__(self, *, hold_first: bool = False) -> None:
        self.seen: list[tuple[str, dict[str, str], bytes]] = []
        self.hold_first = hold_first
        self.release = threading.Event()
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not self.hold_first:
            super().handle_error(request, client_address)
        # else: the held request's client may be gone (killed): writing its answer fails, as it should

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def paths(self) -> list[str]:
        return [path for path, _, _ in self.seen]


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(min(int(self.headers.get("Content-Length", "0")), 1 << 16))
        self.server.seen.append((self.path, dict(self.headers.items()), body))
        if self.server.hold_first and len(self.server.seen) == 1:
            self.server.release.wait(120)
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", f"{self.server.url}/followed")
        else:
            self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def receiving(*, hold_first: bool = False) -> Iterator[Receiver]:
    """A :class:`Receiver` serving on a thread until the block ends."""
    server = Receiver(hold_first=hold_first)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
