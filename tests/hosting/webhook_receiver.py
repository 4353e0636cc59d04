"""A webhook receiver on loopback for the notification tests: a real HTTP server in a thread that records every request."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver(ThreadingHTTPServer):
    """A webhook receiver on loopback: records every request; ``/redirect`` answers 302 to ``/followed``."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str], bytes]] = []
        super().__init__(("127.0.0.1", 0), _Handler)

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
def receiving() -> Iterator[Receiver]:
    """A :class:`Receiver` serving on a thread until the block ends."""
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
