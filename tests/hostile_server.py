"""A hostile HTTP server on 127.0.0.1 for the client commands' tests: it answers what each test tells it to, as badly as asked.

Each route is a path (the query string is ignored) and an :class:`Answer`: a status, headers, and a body given
whole, as an endless or huge stream of chunks, or trickled (a pause before each chunk); even the status line
and headers can be trickled. The server counts the body bytes it got onto the socket per path, so a test can
show a client stopped reading early, and records every path asked for. Bodies are sent HTTP/1.0 style (no
``Content-Length`` unless a test sets one; the end is the connection's close), as a hostile server may.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from grader import jsonio

#: Every escape a hostile server may put in a string: an OSC 52 clipboard write, an OSC 8 link, a C1 CSI, clear screen,
#: a bell, a carriage return (draws over the line), a NUL, a DEL and a bidi override.
HOSTILE = "\x1b]52;c;cHduZWQ=\x07 \x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\ \x9b31m red \x1b[2J \x07 fake\r \x00 \x7f \u202eevil"


def raw_controls(text: str) -> list[str]:
    """The characters of ``text`` a terminal would act on: C0 controls but newline and tab, DEL, C1, bidi overrides."""
    return [
        char for char in text if (ord(char) < 0x20 and char not in "\n\t") or 0x7F <= ord(char) <= 0x9F or char in "\u202a\u202b\u202c\u202d\u202e"
    ]


def json_body(value: Any) -> bytes:
    """``value`` as a JSON body (escapes written as JSON escapes, as a server's JSON encoder writes them)."""
    return jsonio.dumps(value).encode("utf-8")


@dataclass
class Answer:
    """What one route answers: ``body`` bytes or a callable giving chunks; ``pause_s`` before each chunk (a trickle)."""

    body: bytes | Callable[[], Iterable[bytes]] = b""
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})
    pause_s: float = 0.0
    #: trickle the status line and headers too, a byte at a time, ``pause_s`` apart
    trickle_head: bool = False


def endless(prefix: bytes, filler: bytes = b"a", *, total: int = 600 << 20, chunk: int = 64 << 10) -> Callable[[], Iterator[bytes]]:
    """A body of ``prefix`` then ``filler`` up to ``total`` bytes (a 600 MB answer by default), in ``chunk``-sized pieces."""

    def chunks() -> Iterator[bytes]:
        yield prefix
        block = (filler * (chunk // len(filler) + 1))[:chunk]
        for _ in range((total - len(prefix)) // chunk):
            yield block

    return chunks


def trickle(data: bytes, *, repeat: bool = True) -> Callable[[], Iterator[bytes]]:
    """``data`` a byte at a time (forever when ``repeat``): paced by the answer's ``pause_s``."""

    def chunks() -> Iterator[bytes]:
        while True:
            for byte in data:
                yield bytes([byte])
            if not repeat:
                return

    return chunks


class HostileServer:
    """The server: ``routes`` maps a path to its :class:`Answer`; ``sent`` counts body bytes per path; ``asked`` lists paths."""

    def __init__(self) -> None:
        self.routes: dict[str, Answer] = {}
        self.sent: Counter[str] = Counter()
        self.asked: list[str] = []
        self.stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                server.answer(self)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                while length > 0:  # an upload: read and dropped
                    block = self.rfile.read(min(length, 1 << 20))
                    if not block:
                        break
                    length -= len(block)
                server.answer(self)

            do_PUT = do_POST

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=lambda: self.httpd.serve_forever(poll_interval=0.05), name="hostile-server", daemon=True)

    def __enter__(self) -> HostileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()  # every trickle and stream ends at its next chunk
        self.httpd.shutdown()
        self.httpd.server_close()

    def route(self, path: str, answer: Answer | bytes | Any) -> None:
        """Answer ``path`` with ``answer`` (bytes: a 200 body; anything else but an :class:`Answer`: a 200 JSON body)."""
        if isinstance(answer, bytes):
            answer = Answer(answer)
        elif not isinstance(answer, Answer):
            answer = Answer(json_body(answer))
        self.routes[path] = answer

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        path = handler.path.split("?", 1)[0]
        self.asked.append(path)
        answer = self.routes.get(path, Answer(json_body({"detail": "not here"}), status=404))
        head = f"HTTP/1.0 {answer.status} X\r\n" + "".join(f"{k}: {v}\r\n" for k, v in answer.headers.items()) + "Connection: close\r\n\r\n"
        body = answer.body if callable(answer.body) else (lambda: [answer.body])  # type: ignore[list-item]
        try:
            if answer.trickle_head:
                for byte in head.encode("latin-1"):
                    if self.stopping.wait(answer.pause_s):
                        return
                    handler.wfile.write(bytes([byte]))
                    handler.wfile.flush()
            else:
                handler.wfile.write(head.encode("latin-1"))
            for chunk in body():
                if answer.pause_s and self.stopping.wait(answer.pause_s):
                    return
                if self.stopping.is_set():
                    return
                handler.wfile.write(chunk)
                handler.wfile.flush()
                self.sent[path] += len(chunk)
        except OSError:  # the client hung up: what a bounded client does
            return
        finally:
            handler.close_connection = True


def elapsed(since: float) -> float:
    """Seconds since ``since`` (a ``time.monotonic()`` reading)."""
    return time.monotonic() - since
