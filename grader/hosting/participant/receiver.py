"""``grader notify listen``: a participant's own webhook receiver, to try notifications out on one machine.

It is the receiver docs/hosting.md ("Notifications") describes, and nothing more: an HTTP server on loopback that
checks each ``POST``'s ``Grader-Signature`` over the body's exact bytes with :func:`grader.hosting.notify.signing.verify`
(the page's recipe, its replay window included) before parsing it, prints one line per delivery, and drops a repeat
by the event's ``id``. What it is sent is untrusted: a body is read only up to :data:`MAX_BODY` bytes, announced by
``Content-Length`` (a body without one, or over it, is refused unread), and every field printed is escaped.

The secret is read from its file at each request, so the receiver may start before ``grader notify set`` writes it,
and a secret set again is used at once.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from grader import jsonio
from grader.hosting.notify.signing import HEADER, verify
from grader.jsonio import JsonError
from grader.text import bounded

#: The largest body read (an event is a few hundred bytes).
MAX_BODY = 64 * 1024
#: Event ids remembered to drop repeats (delivery is at least once).
REMEMBERED = 1024


class Receiver(ThreadingHTTPServer):
    """The receiver: ``say`` gets each line to print (a delivery, or why a request was refused)."""

    daemon_threads = True

    def __init__(self, port: int, secret_file: Path, say: Callable[[str], None]) -> None:
        self.secret_file, self.say = secret_file, say
        self.seen: OrderedDict[str, None] = OrderedDict()
        super().__init__(("127.0.0.1", port), _Handler)

    @property
    def url(self) -> str:
        """The address to give ``grader notify set``."""
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def secret(self) -> str | None:
        """The secret as its file holds it now (None: not written yet)."""
        try:
            return self.secret_file.read_text(encoding="ascii").strip() or None
        except (OSError, UnicodeDecodeError):
            return None

    def repeat(self, event_id: str) -> bool:
        """Whether ``event_id`` was delivered before (and remember it)."""
        if event_id in self.seen:
            return True
        self.seen[event_id] = None
        while len(self.seen) > REMEMBERED:
            self.seen.popitem(last=False)
        return False


def describe(event: dict[str, Any]) -> str:
    """One line for a verified event: its id, type, competition, and the submission's change."""
    words = [f"delivery {event.get('id')}: {event.get('type')}", f"competition {event.get('competition')}"]
    if event.get("submission") is not None:
        change = f"{event['from']} -> {event.get('state')}" if event.get("from") is not None else f"now {event.get('state')}"
        words.append(f"{event['submission']} {change}")
    return bounded("  ".join(words)) + "  (signature verified)"


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > MAX_BODY:
            self._answer(413, f"refused: a body without Content-Length or over {MAX_BODY} bytes (not read)")
            return
        body = self.rfile.read(int(length))
        secret = self.server.secret()
        if secret is None:
            self._answer(503, f"refused: no secret in {self.server.secret_file} yet (`grader notify set URL --secret-file FILE` writes it)")
            return
        if not verify(secret, self.headers.get(HEADER, ""), body, now=int(time.time())):
            self._answer(401, f"refused: {HEADER} missing, wrong or outside the replay window")
            return
        try:
            event = jsonio.loads(body)
        except JsonError:
            event = None
        if not isinstance(event, dict):
            self._answer(400, "refused: a signed body that is no JSON object")
            return
        if self.server.repeat(str(event.get("id"))):
            self._answer(204, bounded(f"delivery {event.get('id')}: a repeat, dropped"))
            return
        self._answer(204, describe(event))

    def _answer(self, status: int, line: str) -> None:
        self.server.say(line)
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:  # one line per delivery is said above; no access log
        pass
