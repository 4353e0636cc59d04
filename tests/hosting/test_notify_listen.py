"""``grader notify listen``: the participant's own receiver, a real process on a real loopback socket.

Requests are signed here with :func:`grader.hosting.notify.signing.signature` (what the server's sender signs
with); the server's deliveries to it are walked in docs/hosting.md (tests/hosting/test_docs_walk.py).
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from grader import jsonio
from grader.hosting.notify.signing import HEADER, new_secret, signature
from grader.hosting.participant.receiver import MAX_BODY
from tests.cli_support import invoke
from tests.hosting.support import REPO, wait_for

pytestmark = [pytest.mark.slow]


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """A running ``grader notify listen --port 0``: its URL, its secret file (not written yet) and its output."""
    secret_file, output = tmp_path / "hook.secret", tmp_path / "listen.out"
    with open(output, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", "from grader.cli.main import main; main()", "notify", "listen", "--port", "0", "--secret-file", str(secret_file)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    try:
        found = wait_for(lambda: re.search(r"listening on (http://127\.0\.0\.1:\d+/) ", output.read_text()), timeout=60, what="the listener")
        yield found.group(1), secret_file, output
    finally:
        process.terminate()
        process.wait(15)


def _post(url: str, body: bytes, header: str | None) -> int:
    headers = {"Content-Type": "application/json"} | ({HEADER: header} if header else {})
    return httpx.post(url + "hook", content=body, headers=headers, timeout=30).status_code


def test_the_listener_prints_verified_deliveries_and_refuses_the_rest(listener: tuple[str, Path, Path]) -> None:
    url, secret_file, output = listener
    event = {
        "at": "2027-01-05T10:00:02Z",
        "competition": "demo",
        "from": "running",
        "id": "e1f0",
        "state": "scored",
        "submission": "s0a1",
        "type": "submission.state",
    }
    body = jsonio.dumps(event, sort_keys=True).encode()
    secret, now = new_secret(), int(time.time())
    assert _post(url, body, signature(secret, now, body)) == 503  # no secret yet: nothing is taken unchecked
    secret_file.write_text(secret + "\n", encoding="ascii")
    assert _post(url, body, signature(secret, now, body)) == 204
    assert _post(url, body, signature(secret, now, body)) == 204  # at least once: the repeat is dropped, by its id
    assert _post(url, body, signature(new_secret(), now, body)) == 401  # another secret
    assert _post(url, body + b" ", signature(secret, now, body)) == 401  # the body changed after signing
    assert _post(url, body, signature(secret, now - 3600, body)) == 401  # a replay from an hour ago
    assert _post(url, body, None) == 401
    assert _post(url, b"x" * (MAX_BODY + 1), signature(secret, now, b"x" * (MAX_BODY + 1))) == 413  # read no further
    control = jsonio.dumps(event | {"id": "e2", "competition": "x\x1b[2Jy"}, sort_keys=True).encode()
    assert _post(url, control, signature(secret, now, control)) == 204
    wait_for(lambda: len(output.read_text().splitlines()) >= 10, timeout=30, what="ten lines")
    lines = output.read_text().splitlines()
    assert lines[1].startswith("refused: no secret in ")
    assert lines[2] == "delivery e1f0: submission.state  competition demo  s0a1 running -> scored  (signature verified)"
    assert lines[3] == "delivery e1f0: a repeat, dropped"
    assert all(line.startswith(f"refused: {HEADER} missing, wrong") for line in lines[4:8])
    assert lines[8].startswith("refused: a body without Content-Length or over 65536 bytes")
    assert lines[9] == "delivery e2: submission.state  competition x\\x1b[2Jy  s0a1 running -> scored  (signature verified)"


def test_a_port_taken_or_a_missing_folder_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = invoke("notify", "listen", "--port", port, "--secret-file", tmp_path / "s", expect=2)
    assert f"cannot listen on 127.0.0.1:{port}" in refused.stderr and "Traceback" not in refused.output
    # checked before the server is asked: a secret the server made and nobody could keep would be lost
    missing = invoke(
        "notify", "set", "http://hook.example/", "--secret-file", tmp_path / "no" / "s", "--server", "http://127.0.0.1:9", "--token", "gp_x", expect=2
    )
    assert "--secret-file: no folder" in missing.stderr and not (tmp_path / "no").exists()
