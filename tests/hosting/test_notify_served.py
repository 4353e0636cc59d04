"""Notifications through a real `grader serve`: a webhook receiver on loopback, a real SMTP server (aiosmtpd), the CLI.

One server without workers (an upload stays queued; the host cancels it from another process, through the database,
as any move happens); the competition allows ``127.0.0.1/32`` so that the receiver can run, and resolves
``hook.test`` to ``10.0.0.7`` without DNS (``[notify] resolve``, as a name that answers a private address at send
time). Participants:

- ada: a webhook to the receiver and an e-mail address; gets each state change, signed (checked with the recipe of
  docs/hosting.md), with no score in it, and the same by e-mail; her secret is printed once and in no log;
- bob, cy, dee: webhooks to ``169.254.169.254``, ``[::1]`` and ``hook.test`` (10.0.0.7): each try refused, given up,
  nothing connected; they see nothing of ada's submission (404, and no delivery of it);
- eve: a webhook whose receiver answers a redirect to an allowed address: a failed try, the redirect not followed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiosmtpd.controller import Controller

from grader import jsonio
from grader.hosting.notify.signing import HEADER, verify
from grader.hosting.participant.client import packed
from tests.cli_support import invoke
from tests.hosting.support import Server, admin, free_port, wait_for, write_competition
from tests.hosting.webhook_receiver import Receiver, receiving
from tests.onnx_models import onnx_submission

pytestmark = [pytest.mark.slow]


class Mailbox:
    """The aiosmtpd handler: every message's envelope."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, list[str], bytes]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
        return "250 OK"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as server:
        yield server


@pytest.fixture
def mailbox() -> Iterator[tuple[Mailbox, int]]:
    box, port = Mailbox(), free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    yield box, port
    controller.stop()


def _shown(server: Server, token: str) -> dict[str, Any]:
    result = invoke("notify", "show", "--json", "--server", server.url, "--token", token)
    return jsonio.loads(result.stdout)  # type: ignore[no-any-return]


def _ended(server: Server, token: str, count: int) -> list[dict[str, Any]]:
    """The participant's deliveries once ``count`` of them have ended."""

    def done() -> list[dict[str, Any]] | None:
        rows = [row for row in _shown(server, token)["deliveries"] if row["done_at"] is not None]
        return rows if len(rows) >= count else None

    return wait_for(done, timeout=60, what=f"{count} deliveries ended")  # type: ignore[no-any-return]


def test_notifications_through_a_real_server(tmp_path: Path, receiver: Receiver, mailbox: tuple[Mailbox, int]) -> None:
    box, smtp_port = mailbox
    competition = write_competition(
        tmp_path / "c.toml",
        tables={
            "notify": {
                "allow_networks": ["127.0.0.1/32"],
                "attempts": 2,
                "backoff_s": 0.2,
                "timeout_s": 2,
                "smtp_host": "127.0.0.1",
                "smtp_port": smtp_port,
                "smtp_from": "grader@competition.test",
            }
        },
    )
    with competition.open("a") as file:  # [notify] is the file's last table
        file.write('resolve = { "hook.test" = "10.0.0.7" }\n')
    state = tmp_path / "state"
    server = Server(competition, state, workers=0).start()
    try:
        tokens = {who: admin(state, "add-participant", who).strip() for who in ("ada", "bob", "cy", "dee", "eve")}
        ada = tokens["ada"]
        set_line = invoke("notify", "set", f"{receiver.url}/hook?key=ada-private-path", "--server", server.url, "--token", ada).stdout
        secret = set_line.split("signing secret (shown once; keep it where your receiver reads it): ")[1].strip()
        assert secret.startswith("whsec_")
        invoke("notify", "email", "ada@example.org", "--server", server.url, "--token", ada)
        for who, url in (
            ("bob", "http://169.254.169.254/latest/meta-data/"),
            ("cy", f"http://[::1]:{free_port()}/"),
            ("dee", "http://hook.test/"),
            ("eve", f"{receiver.url}/redirect"),
        ):
            invoke("notify", "set", url, "--server", server.url, "--token", tokens[who])
            assert "1 deliveries" in invoke("notify", "test", "--server", server.url, "--token", tokens[who]).stdout

        # ada's upload moves received -> queued; the host's cancel (another process, the same database) queued -> cancelled.
        with packed(onnx_submission(tmp_path / "sub")) as archive:
            answer = httpx.post(
                f"{server.url}/api/v1/submissions", content=archive.read_bytes(), headers={"Authorization": f"Bearer {ada}"}, timeout=120
            )
        assert answer.status_code == 201, answer.text
        submission = answer.json()["id"]
        admin(state, "cancel", submission)

        hooks = wait_for(
            lambda: (
                [s for s in receiver.seen if s[0].startswith("/hook")] if len([s for s in receiver.seen if s[0].startswith("/hook")]) >= 2 else None
            ),
            timeout=60,
            what="two webhooks",
        )
        states = []
        for path, headers, body in hooks:
            assert path == "/hook?key=ada-private-path"
            assert headers["Content-Type"] == "application/json" and headers["Host"] == receiver.url.removeprefix("http://")
            assert verify(secret, headers[HEADER], body, now=int(time.time()))  # the recipe of docs/hosting.md
            event = jsonio.loads(body)
            assert set(event) == {"id", "at", "type", "competition", "submission", "from", "state"}  # no score, ever
            assert (event["type"], event["competition"], event["submission"]) == ("submission.state", "test-comp", submission)
            states.append((event["from"], event["state"]))
        assert sorted(states) == [("queued", "cancelled"), ("received", "queued")]
        mails = wait_for(lambda: box.messages if len(box.messages) >= 2 else None, timeout=60, what="two e-mails")
        assert {(sender, tuple(to)) for sender, to, _ in mails} == {("grader@competition.test", ("ada@example.org",))}
        assert any(f"submission {submission} is cancelled".encode() in content for _, _, content in mails)

        # The forbidden addresses: refused at each try, given up after the two tries, nothing connected.
        for who, why in (("bob", "169.254.169.254, link-local"), ("cy", "::1, loopback"), ("dee", "hook.test is 10.0.0.7, private")):
            (row,) = _ended(server, tokens[who], 1)
            assert row["outcome"].startswith("given up after 2 tries: refused: ") and why in row["outcome"], row
        (row,) = _ended(server, tokens["eve"], 1)
        assert "answered 302: a redirect, not followed" in row["outcome"], row
        assert receiver.paths().count("/redirect") == 2 and "/followed" not in receiver.paths()
        for _ in range(9):  # a test notification is a request the server sends where the participant says: 10 an hour
            invoke("notify", "test", "--server", server.url, "--token", tokens["eve"])
        refused = invoke("notify", "test", "--server", server.url, "--token", tokens["eve"], expect=4)
        assert "at most 10 test notifications an hour" in refused.stderr

        # What is not yours: ada's submission is 404 to bob, and none of his deliveries names it.
        bob = {"Authorization": f"Bearer {tokens['bob']}"}
        assert httpx.get(f"{server.url}/api/v1/submissions/{submission}", headers=bob).status_code == 404
        assert all(row["submission"] is None for row in _shown(server, tokens["bob"])["deliveries"])
        # The secret is shown once: never by `show`, never in the server's log; nor is the URL's path.
        shown = _shown(server, ada)
        assert shown["webhook"].endswith("/hook?key=ada-private-path") and secret not in jsonio.dumps(shown)
        assert all(row["outcome"] == "delivered" for row in shown["deliveries"])
        log = server.log.read_text()
        assert secret not in log and "ada-private-path" not in log
        invoke("notify", "clear", "--server", server.url, "--token", ada)
        assert _shown(server, ada)["webhook"] is None
    finally:
        server.stop()
