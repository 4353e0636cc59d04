"""After the end, as the host and anyone else see it (the host's side).

`grader admin end` asks before it reveals and keeps the first end; `/` leads with the
final standings; `grader reveal-check URL` (the real CLI in a subprocess, against a
real uvicorn server on a loopback socket) passes on an honest server and fails with a
named line when a report does not verify. One seeded competition serves every test.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from grader.cli.main import cli
from grader.hosting.api.app import create_app
from grader.reports.keys import write_keypair
from tests.hosting.browser import http_server
from tests.hosting.leaderboard_world import make_world, seed_demo
from tests.hosting.support import grader_cli
from tests.hosting.world import World

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, str]]:
    world = make_world(tmp_path_factory.mktemp("after-end"), None)
    seed_demo(world)
    with http_server(world.ctx) as url:
        yield world, url
    world.ctx.db.dispose()


def end(world: World, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["admin", "--state", str(world.state.root), "end", *args])
    return result.exit_code, result.output


def test_before_the_end_the_home_page_is_the_public_board_and_reveal_check_says_not_yet(site: tuple[World, str]) -> None:
    world, url = site
    page = TestClient(create_app(world.ctx)).get("/").text
    assert "public leaderboard" in page and 'id="ended"' not in page
    done = grader_cli("reveal-check", url, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED: the competition has not ended" in done.stdout


def test_admin_end_needs_yes_off_a_terminal_says_what_it_does_and_keeps_the_first_end(site: tuple[World, str]) -> None:
    world, _ = site
    status, output = end(world)  # CliRunner's stdin is not a terminal
    assert status == 2 and "--yes" in output and "cannot be undone" in output
    assert TestClient(create_app(world.ctx)).get("/api/v1/partition").json()["ended"] is False  # nothing happened
    status, output = end(world, "--yes")
    assert status == 0, output
    first = re.search(r"ended at (\S+):", output)
    assert first and "partition secret are now public" in output
    status, again = end(world, "--yes")
    assert status == 0 and f"ended at {first.group(1)}:" in again  # a second end never moves the first


def test_after_the_end_the_home_page_leads_with_the_final_standings(site: tuple[World, str]) -> None:
    world, _ = site
    client = TestClient(create_app(world.ctx))
    page = client.get("/").text
    assert "final standings" in page and 'id="ended"' in page and "grader reveal-check" in page
    assert re.search(r'The competition ended on <time datetime="[^"]+">', page)
    private = client.get("/?part=private").text
    # the same rows as the private board, in the same order
    rows = re.findall(r'data-submission="([^"]+)"', page)
    assert rows and rows == re.findall(r'data-submission="([^"]+)"', private)
    public = client.get("/?part=public").text
    assert "public leaderboard as it was" in public and re.findall(r'data-submission="([^"]+)"', public) != rows


def test_reveal_check_re_derives_every_private_score_and_fails_on_another_key(site: tuple[World, str], tmp_path: Path) -> None:
    world, url = site
    saved = tmp_path / "host.pub"
    saved.write_bytes(TestClient(create_app(world.ctx)).get("/host-key.pub").content)  # "the copy you saved on the first day"
    done = grader_cli("reveal-check", url, "--key", str(saved), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("ok:     secret matches the commitment sha256:")
    assert sum(bool(re.fullmatch(r"ok: +\S+ \([a-z-]+\): private score \d\.\d{4} re-derived", line)) for line in lines) == 7
    assert "ok:     7 private score(s) re-derived from signed reports" in lines and lines[-1] == "reveal verified"

    _, other = write_keypair(tmp_path / "other")
    forged = grader_cli("reveal-check", url, "--key", str(other), timeout=120)
    assert forged.returncode == 1, forged.stdout + forged.stderr
    assert forged.stdout.count("does not verify with the host key") == 7 and "reveal verified" not in forged.stdout

    unreachable = grader_cli("reveal-check", "http://127.0.0.1:9", timeout=120)
    assert unreachable.returncode == 5 and "cannot reach the server" in unreachable.stderr


def _on_a_terminal(args: list[str], answer: bytes) -> tuple[int, str]:
    """Run the real `grader` with a pseudo-terminal as its stdin/stdout/stderr, typing ``answer``."""
    import os
    import pty
    import subprocess
    import sys

    from tests.hosting.support import REPO

    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-c", "from grader.cli.main import main; main()", *args], stdin=follower, stdout=follower, stderr=follower, cwd=REPO
    )
    os.close(follower)
    os.write(leader, answer)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    return process.wait(60), seen.decode("utf-8", "replace")


def test_admin_end_on_a_terminal_says_what_it_does_and_asks(tmp_path: Path) -> None:
    world = make_world(tmp_path, None)
    try:
        args = ["admin", "--state", str(world.state.root), "end"]
        status, seen = _on_a_terminal(args, b"n\n")
        assert status == 2 and "cannot be undone" in seen and "End the competition now? [y/N]" in seen and "not ended" in seen
        assert TestClient(create_app(world.ctx)).get("/api/v1/partition").json()["ended"] is False
        status, seen = _on_a_terminal(args, b"y\n")
        assert status == 0 and "competition ended at" in seen, seen
        assert TestClient(create_app(world.ctx)).get("/api/v1/partition").json()["ended"] is True
    finally:
        world.ctx.db.dispose()


def test_reveal_check_checks_the_blinding_key_where_the_server_publishes_one() -> None:
    import hashlib

    from grader.hosting.participant.reveal_check import blinding_line, check

    key = bytes(range(32))
    key_id = hashlib.sha256(b"grader blinding key v1\x00" + key).hexdigest()
    assert blinding_line({"key_id": key_id, "key": key.hex()}).ok
    assert not blinding_line({"key_id": key_id, "key": bytes(32).hex()}).ok  # another key
    assert not blinding_line({"key_id": key_id, "key": None}).ok  # not revealed
    secret = b"s" * 32
    info = {"ended": True, "secret": secret.hex(), "commitment": hashlib.sha256(secret).hexdigest(), "public_fraction": 0.5}
    answers = {
        "/api/v1/partition": {**info, "blinding": {"key_id": key_id, "key": bytes(32).hex()}},
        "/api/v1/leaderboard?part=private": {"boards": []},
    }
    lines = list(check(lambda path: b"", answers.__getitem__, None))  # type: ignore[arg-type]
    assert [line.ok for line in lines] == [True, False, True] and "does not match its published id" in lines[1].text
