"""kill -9 of a real `grader serve` in the middle of a webhook's delivery (docs/hosting.md, "Notifications").

The receiver, on loopback, holds the first request (no answer) until the test releases it; the server is killed while
the request is held, and started again on the same state folder. The delivery was taken for its try (its row held
for ``4 x timeout_s + 10`` s, so that no other server on the database tries it meanwhile); once that passes the
restarted server tries it again, with the same body (the same event ``id``), and it ends delivered: at least once,
none lost, one row in the outbox.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grader import jsonio
from grader.hosting.notify.signing import HEADER, verify
from tests.cli_support import invoke
from tests.hosting.support import Server, admin, wait_for, write_competition
from tests.hosting.webhook_receiver import Receiver, receiving

pytestmark = [pytest.mark.slow]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving(hold_first=True) as server:
        yield server


def _deliveries(server: Server, token: str) -> list[dict[str, Any]]:
    shown = jsonio.loads(invoke("notify", "show", "--json", "--server", server.url, "--token", token).stdout)
    return list(shown["deliveries"])


def test_a_delivery_cut_by_kill_9_is_tried_again_after_the_restart_with_the_same_body(tmp_path: Path, receiver: Receiver) -> None:
    # timeout_s 3: a held try ends on its own after 6 s, long enough to kill the server first on a loaded machine.
    notify = {"allow_networks": ["127.0.0.1/32"], "attempts": 3, "backoff_s": 0.2, "timeout_s": 3}
    competition = write_competition(tmp_path / "c.toml", tables={"notify": notify})
    state = tmp_path / "state"
    server = Server(competition, state, workers=0).start()
    try:
        token = admin(state, "add-participant", "ada").strip()
        set_line = invoke("notify", "set", f"{receiver.url}/hook", "--server", server.url, "--token", token).stdout
        secret = set_line.split("signing secret (shown once; keep it where your receiver reads it): ")[1].strip()
        assert "1 deliveries" in invoke("notify", "test", "--server", server.url, "--token", token).stdout
        wait_for(lambda: receiver.seen, timeout=60, what="the webhook's first request, held")
        server.kill9()  # mid-try: the request sent, no answer read, nothing recorded
        assert len(receiver.seen) == 1  # killed within the try (its own bound had not ended it, so no retry yet)
        receiver.release.set()
        server.start()
        (row,) = wait_for(
            lambda: [row for row in _deliveries(server, token) if row["done_at"] is not None] or None, timeout=120, what="the delivery ended"
        )
        assert (row["type"], row["outcome"], row["tries"]) == ("ping", "delivered", 2), row
        assert len(_deliveries(server, token)) == 1  # one event, one row: nothing added by the restart
        assert len(receiver.seen) == 2
        (_, _, first), (_, _, second) = receiver.seen
        assert first == second and jsonio.loads(first)["id"] == row["id"]  # the receiver tells the repeat by its id
        for _, headers, body in receiver.seen:
            assert verify(secret, headers[HEADER], body, now=int(time.time()))
    finally:
        server.stop()
