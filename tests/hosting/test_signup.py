"""Sign-up (docs/hosting.md, "Sign-up") against a real `grader serve --competitions` over real sockets.

One server, no workers, four competitions: ``open`` (sign-up registers at once), ``approval`` (the host decides with
`grader admin registrations`), ``closed`` (today's default: no sign-up page) and ``ended`` (an open one past its end).
Each test speaks from loopback addresses of its own (127.0.0.x), so that the per-address sign-up limit of one test
never meets another's. The browser test signs up in Chromium.
"""

from __future__ import annotations

import hashlib
import html
import itertools
import re
from collections.abc import Iterator

import httpx
import pytest
from click.testing import CliRunner

from grader.cli.main import cli
from grader.transparency.checkpoint import open_checkpoint
from grader.transparency.entries import decode_entry
from grader.transparency.note import NoteVerifier
from grader.transparency.tiles import Tile, bundles_for_size, split_entry_bundle
from tests.hosting.browser import new_driver, page_wait, require_chromium
from tests.hosting.support import ManyServer, admin, write_competition

pytestmark = pytest.mark.slow
RULES = "1. One account per person.\n2. No hand labelling of the hidden split.\n<script>alert(1)</script>"
RULES_SHA256 = hashlib.sha256(RULES.encode()).hexdigest()
#: Source addresses of the tests' clients: each use takes the next, so each client is a stranger to the limiter.
_ADDRESSES = (f"127.0.0.{n}" for n in itertools.count(10))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManyServer]:
    root = tmp_path_factory.mktemp("signup")
    files = root / "competitions"
    files.mkdir()
    write_competition(files / "open.toml", name="open", registration="open", rules=RULES)
    write_competition(files / "approval.toml", name="approval", registration="approval", rules=RULES)
    write_competition(files / "closed.toml", name="closed")
    write_competition(files / "ended.toml", name="ended", registration="open", rules=RULES, end="2021-01-01T00:00:00Z")
    running = ManyServer(files, root / "state", workers=0).start()
    try:
        yield running
    finally:
        running.stop()


def client(server: ManyServer, name: str, address: str | None = None) -> httpx.Client:
    """A visitor of competition ``name`` from a loopback address of its own (cookies kept, as a browser keeps them)."""
    transport = httpx.HTTPTransport(local_address=address or next(_ADDRESSES))
    return httpx.Client(base_url=server.base(name), transport=transport, timeout=30, follow_redirects=False)


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, page[:500]
    return found.group(1)


def sign_up(web: httpx.Client, name: str, *, email: str = "", accept: bool = True, rules: str = RULES_SHA256) -> httpx.Response:
    """The sign-up form, filled in and sent as a browser sends it."""
    page = web.get("/signup")
    assert page.status_code == 200, page.text[:300]
    form = {"csrf": _csrf(page.text), "rules_sha256": rules, "name": name, "email": email}
    if accept:
        form["accept"] = "yes"
    return web.post("/signup", data=form)


def token_of(answer: httpx.Response) -> str:
    assert answer.status_code == 200, answer.text[-600:]
    assert answer.headers["cache-control"] == "no-store"
    found = re.search(r'<code id="token">(gp_[A-Za-z0-9_-]+)</code>', answer.text)
    assert found is not None, answer.text[-600:]
    return found.group(1)


def error_of(answer: httpx.Response) -> str:
    found = re.search(r'<p class="error" id="error">([^<]*)</p>', answer.text)
    assert found is not None, (answer.status_code, answer.text[-600:])
    return html.unescape(found.group(1))


def api(server: ManyServer, name: str, token: str) -> int:
    """The status of a participant's own read in competition ``name`` with ``token``."""
    return httpx.get(f"{server.base(name)}/api/v1/submissions", headers={"Authorization": f"Bearer {token}"}, timeout=30).status_code


def log_entries(server: ManyServer, name: str) -> list[bytes]:
    """Competition ``name``'s served log, read through its signed checkpoint as `grader log audit` reads it."""
    base = server.base(name)
    verifier = NoteVerifier.from_vkey(httpx.get(f"{base}/log/key", timeout=30).text.strip())
    checkpoint = open_checkpoint(httpx.get(f"{base}/log/checkpoint", timeout=30).content, [verifier])
    found: list[bytes] = []
    for bundle in bundles_for_size(checkpoint.size):
        found += split_entry_bundle(httpx.get(f"{base}/log/{bundle.path}", timeout=30).content, Tile(bundle.level, bundle.index, bundle.width))
    return found


def test_open_sign_up_registers_at_once_logs_no_name_and_refuses_reserved_confusable_and_bidi_names(server: ManyServer) -> None:
    with client(server, "open") as web:
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in web.get("/signup").text  # the rules shown as text
        token = token_of(sign_up(web, "Zoë Quill", email="zoe@example.org"))
    assert api(server, "open", token) == 200
    assert api(server, "approval", token) == 404  # a person of the server, registered in one competition only
    refusals = {
        "zoë quill": "taken or too like one taken",
        "Zo\u0435 Quill": "taken or too like one taken",  # a Cyrillic e
        "ZoeQuiII": "taken or too like one taken",  # no space, no diaeresis, capital i for l
        "Admin": "reserved",
        "local-1": "reserved",
        "mallory\u202egnp.exe": "no control, bidi or zero-width character",
        "x" * 101: "1-100 characters",
    }
    for name, words in refusals.items():
        with client(server, "open") as web:
            answer = sign_up(web, name)
            assert answer.status_code == 422 and words in error_of(answer), (name, answer.status_code)
    with client(server, "open") as web:
        assert "accept the rules" in error_of(sign_up(web, "Ned", accept=False))
        assert "rules changed" in error_of(sign_up(web, "Ned", rules="0" * 64))
        assert "e-mail" in error_of(sign_up(web, "Ned", email="not an address"))
    # The log: one registration, naming nobody before the end, with the digest of the rules accepted.
    registrations = [decode_entry(entry) for entry in log_entries(server, "open") if decode_entry(entry)["kind"] == "registration"]
    assert len(registrations) == 1 and registrations[0]["rules_sha256"] == RULES_SHA256
    raw = b"".join(log_entries(server, "open"))
    assert b"Zo" not in raw and b"zoe@" not in raw
    listed = admin(server.state, "--in", "open", "registrations", "--all")
    assert "Zoë Quill" in listed and "approved" in listed and "zoe@example.org" in listed


def test_approval_waits_for_the_host_and_closed_or_ended_competitions_have_no_sign_up(server: ManyServer) -> None:
    with client(server, "approval") as web:
        assert "approves each sign-up" in web.get("/signup").text
        carol = token_of(sign_up(web, "carol"))
    with client(server, "approval") as web:
        dave = token_of(sign_up(web, "dave"))
    assert api(server, "approval", carol) == 404 and api(server, "approval", dave) == 404  # nothing is theirs yet
    with client(server, "approval") as web:
        waiting = web.post("/signin", data={"token": carol, "csrf": _csrf(web.get("/signin").text)})
        assert waiting.status_code == 404 and "waits for the host's approval" in error_of(waiting)
    pending = admin(server.state, "--in", "approval", "registrations")
    assert "carol" in pending and "dave" in pending and "pending" in pending
    assert "approved" in admin(server.state, "--in", "approval", "registrations", "--approve", "carol")
    assert "refused" in admin(server.state, "--in", "approval", "registrations", "--refuse", "dave")
    assert api(server, "approval", carol) == 200 and api(server, "approval", dave) == 404
    assert admin(server.state, "--in", "approval", "registrations").strip() == ""  # none pending
    kinds = [decode_entry(entry)["kind"] for entry in log_entries(server, "approval")]
    assert kinds.count("registration") == 1  # the approval, not the sign-ups
    for name in ("closed", "ended"):
        with client(server, name) as web:
            assert web.get("/signup").status_code == 404
            assert 'id="signup-link"' not in web.get("/signin").text
            assert web.post("/signup", data={"csrf": _csrf(web.get("/signin").text), "name": "erin", "accept": "yes"}).status_code == 404


def test_sign_ups_are_limited_per_address_and_a_valid_token_still_signs_in_from_it(server: ManyServer) -> None:
    address = next(_ADDRESSES)
    with client(server, "open", address) as web:
        first = token_of(sign_up(web, "frank"))
        for n in range(4):  # refusals count too: each probes a name
            assert sign_up(web, "Admin").status_code == 422, n
        limited = sign_up(web, "grace")
        assert limited.status_code == 429 and "too many sign-ups" in error_of(limited)
        # The same address signs in with a valid token at once: sign-ups are not failed sign-ins.
        signed = web.post("/signin", data={"token": first, "csrf": _csrf(web.get("/signin").text)})
        assert signed.status_code == 303 and signed.headers["location"].endswith("/me")
    with client(server, "open") as web:  # another address is not limited
        token_of(sign_up(web, "grace"))


def test_a_participant_rotates_their_own_token_which_ends_their_web_sessions(server: ManyServer) -> None:
    with client(server, "open") as web:
        old = token_of(sign_up(web, "heidi"))
    with client(server, "approval") as web:  # the same person signs up in a second competition with their token
        page = web.get("/signup").text
        form = {"csrf": _csrf(page), "rules_sha256": RULES_SHA256, "accept": "yes"}
        assert "unknown or revoked token" in error_of(web.post("/signup/join", data={**form, "token": "gp_nobody"}))
        assert "waits for the host" in web.post("/signup/join", data={**form, "token": old}).text
        assert "signed up here already" in error_of(web.post("/signup/join", data={**form, "token": old}))
    assert api(server, "approval", old) == 404
    admin(server.state, "--in", "approval", "registrations", "--approve", "heidi")
    assert api(server, "approval", old) == 200
    phone, laptop = client(server, "open"), client(server, "approval")
    with phone, laptop:
        for web in (phone, laptop):
            assert web.post("/signin", data={"token": old, "csrf": _csrf(web.get("/signin").text)}).status_code == 303
            assert web.get("/me").status_code == 200
        me = laptop.get("/me").text
        assert 'id="rotate"' in me
        rotated = laptop.post("/me/token", data={"csrf": _csrf(me)})
        new = token_of(rotated)
        assert new != old
        for web in (phone, laptop):  # both sessions ended: the cookie names the old token
            assert web.get("/me").status_code == 303
    for name in ("open", "approval"):
        assert api(server, name, old) == 401 and api(server, name, new) == 200
    with client(server, "open") as web:  # a replayed form without the session's CSRF token rotates nothing
        assert web.post("/me/token", data={"csrf": "forged"}).status_code == 403
    assert api(server, "open", new) == 200


def test_the_host_reissues_a_lost_token_which_ends_the_old_one_and_its_web_sessions(server: ManyServer) -> None:
    with client(server, "open") as web:
        old = token_of(sign_up(web, "Olaf Lost"))
    with client(server, "open") as web:
        assert web.post("/signin", data={"token": old, "csrf": _csrf(web.get("/signin").text)}).status_code == 303
        assert web.get("/me").status_code == 200
        printed = admin(server.state, "person", "reissue", "Olaf Lost")
        new = printed.strip()
        assert printed == f"{new}\n" and new.startswith("gp_") and new != old  # stdout holds the token alone
        assert web.get("/me").status_code == 303  # the session signed in with the lost token ended
    assert api(server, "open", old) == 401 and api(server, "open", new) == 200
    with client(server, "open") as web:  # the new token signs in on the web
        assert web.post("/signin", data={"token": new, "csrf": _csrf(web.get("/signin").text)}).status_code == 303
    with client(server, "open") as web:
        token_of(sign_up(web, "Rita Revoked"))
    admin(server.state, "person", "revoke", "Rita Revoked")
    refusals = {
        "nobody-here": "no person named 'nobody-here' on this server",
        "Rita Revoked": "person 'Rita Revoked' is revoked on this server: a revoked token is never reissued",
    }
    for name, words in refusals.items():
        result = CliRunner().invoke(cli, ["admin", "--state", str(server.state), "person", "reissue", name])
        assert result.exit_code == 2 and result.stdout == "" and words in result.stderr, (result.exit_code, result.output)


def test_sign_up_in_chromium_shows_the_token_once_and_it_signs_in(server: ManyServer) -> None:
    require_chromium()
    from selenium.webdriver.common.by import By

    driver = new_driver()
    wait = page_wait(driver, 30)
    try:
        driver.get(f"{server.base('open')}/")
        driver.find_element(By.ID, "signup-link").click()
        wait.until(lambda d: d.find_elements(By.ID, "rules-digest"))
        assert driver.find_element(By.ID, "rules-digest").text == RULES_SHA256
        assert "<script>" in driver.find_element(By.ID, "rules").text  # shown as text, never run
        driver.find_element(By.ID, "name").send_keys("Ivan Browser")
        driver.find_element(By.ID, "accept").click()
        driver.find_element(By.ID, "signup").click()
        token = wait.until(lambda d: d.find_elements(By.ID, "token"))[0].text
        assert token.startswith("gp_") and "registered" in driver.find_element(By.ID, "state").text
        driver.get(f"{server.base('open')}/signin")
        driver.find_element(By.ID, "token").send_keys(token)
        driver.find_element(By.ID, "signin").click()
        wait.until(lambda d: "Ivan Browser" in d.find_element(By.TAG_NAME, "h1").text)
        severe = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE" and "favicon.ico" not in entry["message"]]
        assert not severe, severe  # no script error, no CSP violation
    finally:
        driver.quit()
    assert api(server, "open", token) == 200
