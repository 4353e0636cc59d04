"""A stub HTTP server on 127.0.0.1 for the worker-side tests: started in a thread, shut down and closed afterwards."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypeVar

from grader.hosting.protocol.version import HEADER, WORKER_PROTOCOL

S = TypeVar("S", bound=ThreadingHTTPServer)


@contextmanager
def serving(server: S) -> Iterator[S]:
    """``server`` answering in a daemon thread for the block; shut down and its socket closed after it."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def answer(handler: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str = "application/json") -> None:
    """Answer ``handler``'s request as the server's worker routes do: ``status``, the worker protocol's header, ``body``."""
    handler.send_response(status)
    for name, value in {HEADER: str(WORKER_PROTOCOL), "Content-Type": content_type, "Content-Length": str(len(body))}.items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)
