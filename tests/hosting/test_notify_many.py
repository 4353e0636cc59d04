"""Notifications on a server of many competitions, and the /me page's notification forms, through a real
`grader serve --competitions` over real sockets (docs/hosting.md, "Notifications").

One server without workers (an upload stays queued; the host cancels it from another process), two competitions,
``one`` and ``two``, each allowing ``127.0.0.1/32`` so that the test's receiver (tests/hosting/webhook_receiver.py,
on loopback) can run. ada is a person of the server registered in both: her settings and deliveries of one
competition never reach the other, and each webhook body names its competition.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from grader import jsonio
from grader.hosting.notify.signing import HEADER, verify
from grader.hosting.participant.client import packed
from tests.cli_support import invoke
from tests.hosting.support import ManyServer, admin, wait_for, write_competition
from tests.hosting.webhook_receiver import Receiver, receiving
from tests.onnx_models import onnx_submission

pytestmark = [pytest.mark.slow]
NOTIFY = {"allow_networks": ["127.0.0.1/32"], "attempts": 2, "backoff_s": 0.2, "timeout_s": 2}


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with receiving() as server:
        yield server


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ManyServer, str]]:
    """The server, and ada's token (registered in both competitions)."""
    root = tmp_path_factory.mktemp("notify-many")
    files = root / "competitions"
    files.mkdir()
    for name in ("one", "two"):
        write_competition(files / f"{name}.toml", name=name, tables={"notify": NOTIFY})
    server = ManyServer(files, root / "state", workers=0).start()
    try:
        token = admin(server.state, "--in", "one", "add-participant", "ada").strip()
        admin(server.state, "--in", "two", "add-participant", "ada")
        yield server, token
    finally:
        server.stop()


def _shown(server: ManyServer, name: str, token: str) -> dict[str, Any]:
    return jsonio.loads(invoke("notify", "show", "--json", "--server", server.base(name), "--token", token).stdout)  # type: ignore[no-any-return]


def _received(receiver: Receiver, path: str, count: int) -> list[tuple[str, dict[str, str], bytes]]:
    def arrived() -> list[tuple[str, dict[str, str], bytes]] | None:
        found = [seen for seen in receiver.seen if seen[0].split("?")[0] == path]
        return found if len(found) >= count else None

    return wait_for(arrived, timeout=60, what=f"{count} deliveries at {path}")  # type: ignore[no-any-return]


def test_settings_and_deliveries_of_one_competition_never_reach_the_other(served: tuple[ManyServer, str], receiver: Receiver, tmp_path: Path) -> None:
    server, ada = served
    one, two = server.base("one"), server.base("two")
    written = invoke("notify", "set", f"{receiver.url}/one", "--secret-file", tmp_path / "one.secret", "--server", one, "--token", ada).stdout
    assert "signing secret written to" in written and "whsec_" not in written
    secret_one = (tmp_path / "one.secret").read_text(encoding="ascii").strip()
    assert secret_one.startswith("whsec_") and (tmp_path / "one.secret").stat().st_mode & 0o777 == 0o600
    printed = invoke("notify", "set", f"{receiver.url}/two", "--server", two, "--token", ada).stdout
    secret_two = printed.split("keep it where your receiver reads it): ")[1].strip()
    assert secret_two != secret_one
    assert _shown(server, "one", ada)["webhook"].endswith("/one") and _shown(server, "two", ada)["webhook"].endswith("/two")

    # ada's upload in `one` moves received -> queued; the host's cancel there, queued -> cancelled
    with packed(onnx_submission(tmp_path / "sub")) as archive:
        answer = httpx.post(f"{one}/api/v1/submissions", content=archive.read_bytes(), headers={"Authorization": f"Bearer {ada}"}, timeout=120)
    assert answer.status_code == 201, answer.text
    submission = answer.json()["id"]
    admin(server.state, "--in", "one", "cancel", submission)
    states = []
    for _, headers, body in _received(receiver, "/one", 2):
        assert verify(secret_one, headers[HEADER], body, now=int(time.time())) and not verify(secret_two, headers[HEADER], body, now=int(time.time()))
        event = jsonio.loads(body)
        assert (event["competition"], event["submission"]) == ("one", submission)
        states.append(event["state"])
    assert sorted(states) == ["cancelled", "queued"]
    # a ping in `two` goes to two's webhook only, signed with two's secret, naming `two`
    invoke("notify", "test", "--server", two, "--token", ada)
    ((_, headers, body),) = _received(receiver, "/two", 1)
    assert verify(secret_two, headers[HEADER], body, now=int(time.time())) and jsonio.loads(body)["competition"] == "two"
    assert {row["type"] for row in _shown(server, "two", ada)["deliveries"]} == {"ping"}  # none of one's submission
    wait_for(lambda: [row["outcome"] for row in _shown(server, "one", ada)["deliveries"]] == ["delivered"] * 2, timeout=60, what="one's two")
    assert len([seen for seen in receiver.seen if seen[0] == "/one"]) == 2  # and no ping of two's
    # clearing one's webhook leaves two's
    invoke("notify", "clear", "--server", one, "--token", ada)
    assert _shown(server, "one", ada)["webhook"] is None and _shown(server, "two", ada)["webhook"].endswith("/two")


def _page_csrf(web: httpx.Client) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', web.get("/me").text)
    assert found is not None
    return found.group(1)


def _flash(web: httpx.Client) -> str:
    page = web.get("/me")
    found = re.search(r'<p id="message" class="[^"]*">([^<]*)</p>', page.text)
    assert found is not None, page.text[:1000]
    return html.unescape(found.group(1))


def test_the_me_page_sets_and_clears_the_webhook_and_shows_its_secret_once(served: tuple[ManyServer, str], receiver: Receiver) -> None:
    server, ada = served
    kept = f"{receiver.url}/kept"
    invoke("notify", "set", kept, "--server", server.base("one"), "--token", ada)  # the other competition's, untouched below
    with httpx.Client(base_url=server.base("two"), timeout=30) as web:
        signin = web.get("/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', signin.text).group(1)  # type: ignore[union-attr]
        assert web.post("/signin", data={"csrf": csrf, "token": ada}).status_code == 303
        assert 'id="notify"' in web.get("/me").text
        url = f"{receiver.url}/form?x=<b>"
        assert web.post("/me/notify/webhook", data={"url": url}).status_code == 403  # no CSRF token: refused, nothing set
        assert not _shown(server, "two", ada)["webhook"].endswith("<b>")
        csrf = _page_csrf(web)
        assert web.post("/me/notify/webhook", data={"csrf": csrf, "url": "ftp://example.org/"}).status_code == 303
        assert _flash(web) == "error: a webhook URL is http:// or https:// with a host"
        assert web.post("/me/notify/email", data={"csrf": csrf, "address": "ada@example.org"}).status_code == 303
        assert _flash(web).startswith("error: this server sends no e-mail")

        answer = web.post("/me/notify/webhook", data={"csrf": csrf, "url": url})
        assert answer.status_code == 200 and answer.headers["cache-control"] == "no-store"
        assert "<b>" not in answer.text and "x=&lt;b&gt;" in answer.text  # escaped
        secret = re.search(r'<code id="secret">(whsec_[0-9a-f]{64})</code>', answer.text).group(1)  # type: ignore[union-attr]
        page = web.get("/me").text
        assert secret not in page and "x=&lt;b&gt;" in page  # the secret shown once; the URL escaped
        assert _shown(server, "two", ada)["webhook"] == url
        # the secret the page showed is the one the server signs with
        invoke("notify", "test", "--server", server.base("two"), "--token", ada)
        ((_, headers, body),) = _received(receiver, "/form", 1)
        assert verify(secret, headers[HEADER], body, now=int(time.time()))
        wait_for(lambda: "<td>delivered</td>" in web.get("/me").text, timeout=60, what="the delivery on /me")

        assert web.post("/me/notify/webhook-clear", data={"csrf": csrf}).status_code == 303
        assert _flash(web) == "webhook cleared"
        assert 'id="notify-webhook"' not in web.get("/me").text and _shown(server, "two", ada)["webhook"] is None
    assert _shown(server, "one", ada)["webhook"] == kept
