"""The worker protocol's version: a worker and a server of different versions part before any lease is taken, with one line naming both.

Over real sockets: a real ``grader serve`` refuses a worker request of another protocol, or of
none (what a worker before 0.3.0 sends), with 426 and the line, before it reads the body, and the
queued job stays queued until a worker of its version claims it. A real ``grader worker`` facing a
server of another protocol stops with the line (exit 2, no traceback) and takes nothing. That
server is this grader with ``WORKER_PROTOCOL`` set to 4 before anything imports it: the server a
release with the next protocol would run.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from grader.hosting.api.app import create_app
from grader.hosting.errors import WorkerProtocolMismatch
from grader.hosting.keyring.worker_signing import ensure_worker_key, worker_public_key_path
from grader.hosting.participant.client import HostingClient
from grader.hosting.protocol.version import HEADER, WORKER_PROTOCOL, answer_refusal, checked_job, server_refusal
from tests.hosting.leaderboard_world import make_world
from tests.hosting.support import REPO, Server, admin, claim_body, grader_cli, stated_fingerprint, worker_headers, write_competition
from tests.hosting.world import World

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
URL = "http://grader.example:8000"
REMEDY = "upgrade the worker or the server"


def test_each_side_names_both_versions_in_one_line() -> None:
    assert server_refusal(str(WORKER_PROTOCOL)) is None
    assert WORKER_PROTOCOL == 5  # issue 38: shard jobs claimed while their query job runs; a worker of 4 is refused
    assert server_refusal("4") == f"worker protocol 4 is not this server's {WORKER_PROTOCOL}: {REMEDY}"
    assert server_refusal(None) == f"worker protocol none (a grader before 0.3.0) is not this server's {WORKER_PROTOCOL}: {REMEDY}"
    assert server_refusal("1, 1") == f"worker protocol '1, 1' is not this server's {WORKER_PROTOCOL}: {REMEDY}"  # two headers: no number
    assert server_refusal("x" * 100) == f"worker protocol '{'x' * 20}' is not this server's {WORKER_PROTOCOL}: {REMEDY}"  # bounded
    # the worker: another version stops it, whatever the status; none stops it on a success or a 404 (a server before 0.3.0)
    assert answer_refusal(426, "3", URL) == f"worker protocol {WORKER_PROTOCOL} is not the server's 3 ({URL}): {REMEDY}"
    assert answer_refusal(200, "6", URL) == f"worker protocol {WORKER_PROTOCOL} is not the server's 6 ({URL}): {REMEDY}"
    for status in (200, 204, 404):
        assert (
            answer_refusal(status, None, URL)
            == f"worker protocol {WORKER_PROTOCOL} is not the server's none (a grader before 0.3.0) ({URL}): {REMEDY}"
        )
    # a proxy's answer while the server restarts, or its own limits, name no version and are not a reason to stop
    for status in (408, 413, 429, 502, 503, 504):
        assert answer_refusal(status, None, URL) is None
    assert answer_refusal(409, str(WORKER_PROTOCOL), URL) is None


def test_a_job_of_another_protocol_is_refused_before_it_is_read() -> None:
    assert checked_job(b'{"protocol": %d, "submission_id": "s"}' % WORKER_PROTOCOL, URL) == {"protocol": WORKER_PROTOCOL, "submission_id": "s"}
    for raw, named in ((b'{"protocol": 1}', "1"), (b'{"submission_id": "s"}', "none (a grader before 0.3.0)"), (b'{"protocol": true}', "'True'")):
        with pytest.raises(WorkerProtocolMismatch) as refused:
            checked_job(raw, URL)
        assert str(refused.value) == f"a job of worker protocol {named} is not this worker's {WORKER_PROTOCOL} ({URL}): {REMEDY}"


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path, None)


def test_every_answer_names_the_servers_protocol_and_a_worker_route_hears_it_first(world: World) -> None:
    try:
        client = TestClient(create_app(world.ctx))
        for path in ("/healthz", "/api/v1/competition", "/api/v1/quota"):  # 200, 200, 401: every answer
            assert client.get(path).headers[HEADER] == str(WORKER_PROTOCOL)
        # before authentication: no token, another protocol -> 426 (with this protocol, the same request is a 401)
        refused = client.post("/api/v1/worker/claim", json={"wait_s": 0}, headers={HEADER: "3"})
        assert refused.status_code == 426 and refused.headers[HEADER] == str(WORKER_PROTOCOL)
        assert refused.headers["upgrade"] == f"grader-worker-protocol/{WORKER_PROTOCOL}"
        assert refused.json() == {"detail": f"worker protocol 3 is not this server's {WORKER_PROTOCOL}: {REMEDY}"}
        assert refused.headers["x-content-type-options"] == "nosniff"  # the security headers wrap the refusal too
        assert client.post("/api/v1/worker/claim", json={"wait_s": 0}, headers={HEADER: str(WORKER_PROTOCOL)}).status_code == 401
        # every worker route, the shard ones and the bodyless and binary ones included
        for method, path in (
            ("POST", "/api/v1/worker/key"),
            ("GET", "/api/v1/worker/fingerprint"),
            ("POST", "/api/v1/worker/fingerprint"),
            ("POST", "/api/v1/worker/jobs/s/heartbeat"),
            ("GET", "/api/v1/worker/jobs/s/upload?attempt=1"),
            ("PUT", "/api/v1/worker/jobs/s/runs/t?attempt=1"),
            ("POST", "/api/v1/worker/jobs/s/result"),
            ("POST", "/api/v1/worker/shards/claim"),
            ("PUT", "/api/v1/worker/shards/1/output?tries=1"),
        ):
            answer = client.request(method, path, headers=worker_headers(world.worker_token) | {HEADER: "0"})
            assert answer.status_code == 426, (method, path, answer.status_code)
    finally:
        world.ctx.db.dispose()


def _answer_before_body(server: Server, token: str, version: str) -> int:
    """Send only the head of a claim declaring a 300 MB body (and 1 KB of it); the status the server answers without the rest."""
    head = (
        f"POST /api/v1/worker/claim HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {300 << 20}\r\n"
        f"Authorization: Bearer {token}\r\n{HEADER}: {version}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:  # socket.timeout: the server waits for the body
        sock.sendall(head.encode() + b"{" + b" " * 1023)
        answer = b""
        while b"\r\n" not in answer and (chunk := sock.recv(4096)):
            answer += chunk
    return int(answer.split(b" ", 2)[1])


def _remote_worker(server: Server, folder: Path, name: str) -> str:
    ensure_worker_key(folder)  # a remote worker without a recorded key may not claim (403): this one may
    return admin(server.state, "add-worker", name, "--public-key", str(worker_public_key_path(folder))).strip()


@pytest.mark.slow
def test_a_claim_of_another_protocol_is_refused_with_the_line_and_takes_no_lease(tmp_path: Path) -> None:
    server = Server(write_competition(tmp_path / "c.toml"), tmp_path / "state", workers=0).start()
    try:
        participant = admin(server.state, "add-participant", "kim").strip()
        token = _remote_worker(server, tmp_path / "key", "w1")
        sid = HostingClient(server.url, participant).submit(EXAMPLE)["id"]
        bearer = {"Authorization": f"Bearer {token}"}
        for sent, named in ((None, "none (a grader before 0.3.0)"), ("1", "1"), ("4", "4"), ("6", "6"), ("0", "0")):
            answer = httpx.post(f"{server.url}/api/v1/worker/claim", json={"wait_s": 0}, headers=bearer | ({} if sent is None else {HEADER: sent}))
            assert answer.status_code == 426, answer.text
            assert answer.json() == {"detail": f"worker protocol {named} is not this server's {WORKER_PROTOCOL}: {REMEDY}"}
            assert answer.headers[HEADER] == str(WORKER_PROTOCOL)
        assert _answer_before_body(server, token, "3") == 426  # refused from its head: the body is never read
        assert HostingClient(server.url, participant).status(sid)["state"] == "queued"
        assert "-> running" not in admin(server.state, "history", sid)
        # the same worker at this protocol takes the job: it was there to take all along
        fingerprint = stated_fingerprint(server.url, token, ensure_worker_key(tmp_path / "key"))
        job = httpx.post(f"{server.url}/api/v1/worker/claim", json=claim_body(fingerprint, 5), headers=worker_headers(token)).json()
        assert (job["submission_id"], job["attempt"], job["protocol"]) == (sid, 1, WORKER_PROTOCOL)
    finally:
        server.stop()


class NextProtocolServer(Server):
    """`grader serve` of the next worker protocol: this grader, its WORKER_PROTOCOL set to 6 before anything reads it."""

    PROGRAM = "import grader.hosting.protocol.version as v; v.WORKER_PROTOCOL = 6; from grader.cli.main import main; main()"


@pytest.mark.slow
def test_a_worker_facing_a_server_of_another_protocol_stops_with_the_line(tmp_path: Path) -> None:
    server = NextProtocolServer(write_competition(tmp_path / "c.toml"), tmp_path / "state", workers=0).start()
    try:
        assert httpx.get(f"{server.url}/healthz").headers[HEADER] == "6"
        participant = admin(server.state, "add-participant", "kim").strip()
        sid = HostingClient(server.url, participant).submit(EXAMPLE)["id"]
        line = f"error: worker protocol {WORKER_PROTOCOL} is not the server's 6 ({server.url}): {REMEDY}\n"
        # a remote worker (its first request records its key) and the long-poll loop (a worker of the grader's own
        # kind, whose first request asks what to sign its fingerprint over): each stops at its first answer
        remote = grader_cli(
            "worker",
            "--server",
            server.url,
            "--worker-token",
            _remote_worker(server, tmp_path / "key", "w1"),
            "--key-dir",
            str(tmp_path / "key"),
            "--once",
            timeout=120,
        )
        looping = grader_cli(
            "worker",
            "--server",
            server.url,
            "--worker-token",
            _remote_worker(server, tmp_path / "key2", "w2"),
            "--local-of",
            str(os.getpid()),
            "--once",
            timeout=120,
        )
        for ran in (remote, looping):
            # the line, after the worker's own start-up log (its allocator setting: a log line, not an error)
            said = ran.stderr.splitlines(keepends=True)
            assert (ran.returncode, ran.stdout, said[-1]) == (2, "", line)
            assert all(" INFO allocator" in earlier for earlier in said[:-1]), said
        assert HostingClient(server.url, participant).status(sid)["state"] == "queued"
        assert "-> running" not in admin(server.state, "history", sid)
    finally:
        server.stop()
