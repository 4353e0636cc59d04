"""Attacks on the HTTP layer, replayed against one real `grader serve` over real sockets.

* 300 MB bodies, declared and chunked, anonymous and with a credential, to every route that takes a body:
  each refused, the server's resident memory grows less than 50 MB.
* The failed-credential limiter: a valid credential is never refused; participants, workers and /metrics
  have separate buckets; X-Forwarded-For is believed only from a trusted proxy (this server trusts 127.0.0.2).
* Every answer may be framed by no one; /docs runs under a CSP with no inline script.
* Signing out ends the session on the server: the old cookie, replayed, is refused.

The tests use distinct loopback source addresses (127.0.0.x), so that one test's failures never meet another's.
"""

from __future__ import annotations

import re
import select
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from grader.hosting.protocol.version import HEADER, WORKER_PROTOCOL
from tests.hosting.support import Server, admin, claim_body, stated_fingerprint, worker_headers, write_competition

pytestmark = pytest.mark.slow

HUGE = 300 << 20
CHUNK = 1 << 20
#: A server that waits neither reads nor answers for this long: the attack test fails.
STALL_S = 60
TRUSTED_PROXY = "127.0.0.2"
UPLOAD_CAP = 1 << 20

#: (method, path, credential the route takes: "participant", "worker" or None for the web forms)
BODY_ROUTES = [
    ("POST", "/api/v1/submissions", "participant"),
    ("PUT", "/api/v1/finals", "participant"),
    ("POST", "/api/v1/worker/claim", "worker"),
    ("POST", "/api/v1/worker/key", "worker"),
    ("POST", "/api/v1/worker/jobs/s/heartbeat", "worker"),
    ("POST", "/api/v1/worker/jobs/s/result", "worker"),
    ("POST", "/signin", None),
    ("POST", "/signout", None),
    ("POST", "/me/finals", None),
]


class ProxiedServer(Server):
    def serve_args(self) -> list[str]:
        return [*super().serve_args(), "--trusted-proxy", TRUSTED_PROXY]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("attacks")
    competition = write_competition(root / "c.toml", tables={"upload": {"max_bytes": str(UPLOAD_CAP)}})
    running = ProxiedServer(competition, root / "state", workers=0).start()
    key = root / "remote-1.pub"  # a remote worker with its key recorded: one allowed to claim
    private = Ed25519PrivateKey.generate()
    key.write_bytes(private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    running.worker = admin(running.state, "add-worker", "remote-1", "--public-key", str(key)).strip()  # type: ignore[attr-defined]
    running.fingerprint = stated_fingerprint(running.url, running.worker, private)  # type: ignore[attr-defined]  # what its claims name
    running.participant = admin(running.state, "add-participant", "alice").strip()  # type: ignore[attr-defined]
    running.metrics = admin(running.state, "metrics-token").strip()  # type: ignore[attr-defined]
    yield running
    running.stop()


def client(server: Server, source: str, **kwargs: object) -> httpx.Client:
    """An HTTP client whose connections come from the loopback address ``source``."""
    return httpx.Client(base_url=server.url, transport=httpx.HTTPTransport(local_address=source), timeout=30, **kwargs)  # type: ignore[arg-type]


def rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` (VmRSS of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def send_huge(port: int, method: str, path: str, *, token: str | None, chunked: bool, source: str) -> tuple[int | str, int]:
    """Send up to 300 MB of body (declared, or chunked without a length) until the server answers; (status or "reset", bytes sent)."""
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    head += "Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {HUGE}\r\n"
    if token is not None:
        head += f"Authorization: Bearer {token}\r\n"
    if path.startswith("/api/v1/worker/"):  # a worker of this version (one of another is refused first: test_worker_protocol.py)
        head += f"{HEADER}: {WORKER_PROTOCOL}\r\n"
    piece = (f"{CHUNK:x}\r\n".encode() + b" " * CHUNK + b"\r\n") if chunked else b" " * CHUNK
    sent = 0
    with socket.socket() as sock:
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", port))
        sock.sendall(head.encode() + b"\r\n")
        sock.setblocking(False)
        pending = memoryview(piece)
        answer = b""
        while True:
            readable, writable, _ = select.select([sock], [sock] if sent < HUGE else [], [], STALL_S)
            if not readable and not writable:
                raise AssertionError(f"{method} {path}: the server neither read nor answered for {STALL_S} s")
            try:
                if readable:
                    chunk = sock.recv(65536)
                    answer += chunk
                    if b"\r\n" in answer or not chunk:
                        break
                    continue
                count = sock.send(pending)
            except (ConnectionResetError, BrokenPipeError):
                return "reset", sent
            sent += count
            pending = pending[count:] or memoryview(piece)
    return (int(answer.split(b" ", 2)[1]) if answer else "reset"), sent


def test_huge_bodies_are_refused_and_memory_stays_flat(server: Server) -> None:
    assert server.process is not None
    tokens = {"participant": server.participant, "worker": server.worker}  # type: ignore[attr-defined]
    before = rss_bytes(server.process.pid)
    outcomes = {}
    for method, path, role in BODY_ROUTES:
        for chunked in (False, True):
            for token in (None, tokens[role]) if role else (None,):
                status, sent = send_huge(server.port, method, path, token=token, chunked=chunked, source="127.0.0.10")
                outcomes[(path, chunked, token is not None)] = status, sent
                # Declared: 413 before a byte is read. Chunked: refused for the credential first (401: unread), else cut at the cap.
                expected = {413} if not chunked else ({401} if role and token is None else {411, 413})
                assert status in expected or status == "reset", (method, path, chunked, token is not None, status)
                assert sent < HUGE, (method, path)
    grown = rss_bytes(server.process.pid) - before
    assert grown < 50 << 20, f"server RSS grew {grown >> 20} MB: {outcomes}"
    assert httpx.get(f"{server.url}/healthz").status_code == 200


def test_a_result_within_its_job_cap_is_read(server: Server) -> None:
    # Under the cap the body is read and judged (here: no such job); a body just past it is cut at 413.
    with client(server, "127.0.0.11", headers=worker_headers(server.worker)) as http:  # type: ignore[attr-defined]
        assert http.post("/api/v1/worker/jobs/s/result", json={"attempt": 1, "message": "x" * 20_000}).status_code in (403, 404, 409)
        assert http.post("/api/v1/worker/jobs/s/result", content=b"{" + b" " * (64 << 20)).status_code == 413


def test_a_valid_credential_is_never_refused_by_the_limiter(server: Server) -> None:
    participant, worker, metrics = server.participant, server.worker, server.metrics  # type: ignore[attr-defined]
    with client(server, "127.0.0.20") as http:
        statuses = [http.get("/api/v1/quota", headers={"Authorization": f"Bearer gp_wrong{i}"}).status_code for i in range(10)]
        assert statuses == [401] * 10
        assert http.get("/api/v1/quota", headers={"Authorization": "Bearer gp_wrong"}).status_code == 429
        # the holder of a valid token, from the same address, is served
        assert http.get("/api/v1/quota", headers={"Authorization": f"Bearer {participant}"}).status_code == 200
        # the worker and the scraper have their own buckets: a bad token is 401 (counted), a good one served
        claim = claim_body(server.fingerprint)  # type: ignore[attr-defined]
        assert http.post("/api/v1/worker/claim", json=claim, headers=worker_headers("gw_wrong")).status_code == 401
        assert http.post("/api/v1/worker/claim", json=claim, headers=worker_headers(worker)).status_code == 204
        assert http.get("/metrics", headers={"Authorization": "Bearer gm_wrong"}).status_code == 401
        assert http.get("/metrics", headers={"Authorization": f"Bearer {metrics}"}).status_code == 200
        # and the web sign-in is the participant's bucket: still limited for a wrong token
        page = http.get("/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        assert http.post("/signin", data={"csrf": csrf.group(1), "token": "gp_wrong"}).status_code == 429


def test_a_worker_is_served_after_participant_failures(server: Server) -> None:
    worker = server.worker  # type: ignore[attr-defined]
    with client(server, "127.0.0.21") as http:
        for i in range(12):
            http.get("/api/v1/submissions", headers={"Authorization": f"Bearer gp_bad{i}"})
        for _ in range(3):
            assert http.post("/api/v1/worker/claim", json=claim_body(server.fingerprint), headers=worker_headers(worker)).status_code == 204  # type: ignore[attr-defined]


def test_forwarded_for_from_an_untrusted_peer_is_ignored(server: Server) -> None:
    with client(server, "127.0.0.30") as http:
        statuses = [
            http.get("/api/v1/quota", headers={"Authorization": "Bearer gp_wrong", "X-Forwarded-For": f"198.51.100.{i}"}).status_code
            for i in range(12)
        ]
    assert statuses == [401] * 10 + [429] * 2


def test_forwarded_for_from_the_trusted_proxy_names_the_client(server: Server) -> None:
    with client(server, TRUSTED_PROXY) as http:
        fresh = [
            http.get("/api/v1/quota", headers={"Authorization": "Bearer gp_wrong", "X-Forwarded-For": f"203.0.113.{i}"}).status_code
            for i in range(12)
        ]
        same = [
            http.get("/api/v1/quota", headers={"Authorization": "Bearer gp_wrong", "X-Forwarded-For": "192.0.2.7"}).status_code for _ in range(11)
        ]
    assert fresh == [401] * 12  # twelve clients, one failure each
    assert same == [401] * 10 + [429]  # one client behind the proxy is limited as itself


def test_no_answer_may_be_framed_and_docs_run_no_inline_script(server: Server) -> None:
    with client(server, "127.0.0.40") as http:
        pages = ["/", "/signin", "/docs", "/api/v1/competition", "/healthz", "/openapi.json", "/docs-init.js", "/nowhere"]
        # ... and a refusal of the body cap (413), answered before any route runs
        for method, path in [("GET", page) for page in pages] + [("POST", "/signin")]:
            response = http.request(method, path, content=b"x" * (64 << 10) if method == "POST" else None)
            assert response.status_code != 500, path
            policy = response.headers.get("content-security-policy", "")
            assert "frame-ancestors 'none'" in policy, path
            assert response.headers.get("x-frame-options") == "DENY", path
            assert response.headers.get("x-content-type-options") == "nosniff", path
        docs = http.get("/docs")
        policy = docs.headers["content-security-policy"]
        assert "script-src 'self';" in policy and "unsafe-inline" not in policy.split("script-src", 1)[1].split(";", 1)[0]
        assert "<script>" not in docs.text  # every script is a file of this server
        for src in re.findall(r'(?:src|href)="([^"]+)"', docs.text):
            assert src.startswith("/"), src  # no CDN
            assert http.get(src).status_code == 200, src


def sign_in(http: httpx.Client, token: str) -> str:
    """Sign in through the page; the session's CSRF token."""
    page = http.get("/signin")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    assert http.post("/signin", data={"csrf": csrf.group(1), "token": token}).status_code == 303
    me = http.get("/me")
    assert me.status_code == 200
    found = re.search(r'name="csrf" value="([^"]+)"', me.text)
    assert found is not None
    return found.group(1)


def test_sign_out_ends_the_session_on_the_server(server: Server) -> None:
    with client(server, "127.0.0.50") as http:
        csrf = sign_in(http, server.participant)  # type: ignore[attr-defined]
        stolen = http.cookies["grader_session"]
        assert http.post("/signout", data={"csrf": csrf}).status_code == 303
    with client(server, "127.0.0.51", cookies={"grader_session": stolen}) as replay:
        assert replay.get("/me").status_code == 303  # back to /signin: the stored session has ended
        assert replay.get("/me/submissions/x/report").status_code == 401
        assert replay.post("/me/finals", data={"csrf": csrf, "final": "x"}).status_code == 401
    # a fresh sign-in works, and a second one leaves the first session live until it signs out
    with client(server, "127.0.0.52") as first, client(server, "127.0.0.53") as second:
        sign_in(first, server.participant)  # type: ignore[attr-defined]
        sign_in(second, server.participant)  # type: ignore[attr-defined]
        assert first.get("/me").status_code == 200
