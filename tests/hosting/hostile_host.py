"""A hostile host for the audit tests: a real HTTP server in front of a real `grader serve` that rewrites what it serves.

Every GET is forwarded to the honest server behind it; ``rewrite(path, body)`` may change the body on its way
back (a board whose numbers are not its reports', a report swapped for another). It listens on a loopback
socket of its own, so a client (``grader log audit URL --board``) talks HTTP to it as to any host.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

Rewrite = Callable[[str, bytes], bytes]


class _Forwarder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str, rewrite: Rewrite) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream, self.rewrite = upstream, rewrite


class _Handler(BaseHTTPRequestHandler):
    server: _Forwarder

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        answer = httpx.get(self.server.upstream + self.path, timeout=30)
        body = self.server.rewrite(self.path, answer.content) if answer.status_code == 200 else answer.content
        self.send_response(answer.status_code)
        self.send_header("Content-Type", answer.headers.get("content-type", "application/octet-stream"))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def hostile_host(upstream: str, rewrite: Rewrite) -> Iterator[str]:
    """A host at the returned URL serving ``upstream``'s answers through ``rewrite``."""
    server = _Forwarder(upstream.rstrip("/"), rewrite)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
