"""Slow clients against the public deployment docs/deploy.md prescribes: nginx (docs/nginx.conf) in front of `grader serve`.

One `grader serve` (descriptor limit 256, as a small host's might be; minimum body rate 4 KiB/s after 1 s)
behind one nginx (head and body timeouts 3 s instead of production's 10 s), all on loopback:

* 3,000 connections that send half a request head and wait: /healthz still answers 200 within 1 s, the
  grader holds none of them, and nginx closes them at its head timeout;
* an upload trickling at 1 KB/s is cut (408); a fast one is read;
* straight at the grader, a flood past its descriptor limit logs a few lines, not one traceback per accept.
"""

from __future__ import annotations

import os
import resource
import selectors
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.hosting.nginx import Nginx
from tests.hosting.support import Server, admin, wait_for, write_competition

pytestmark = pytest.mark.slow

SLOW_CONNECTIONS = 3000
SERVER_FILES = 256
HEADER_TIMEOUT_S = 3


class PacedServer(Server):
    def serve_args(self) -> list[str]:
        return [*super().serve_args(), "--trusted-proxy", "127.0.0.1", "--min-body-rate", "4096", "--body-grace", "1"]

    def in_child(self) -> None:
        # The server's own descriptor limit, set in its process only: lowering the test process's limit instead
        # failed at once when the long suite had left that process holding more than SERVER_FILES descriptors.
        resource.setrlimit(resource.RLIMIT_NOFILE, (SERVER_FILES, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def raise_own_file_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, max(hard, wanted)))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Nginx]]:
    root = tmp_path_factory.mktemp("slow")
    competition = write_competition(root / "c.toml", tables={"upload": {"max_bytes": str(1 << 20)}})
    server = PacedServer(competition, root / "state", workers=0)
    server.start()
    server.participant = admin(server.state, "add-participant", "alice").strip()  # type: ignore[attr-defined]
    proxy = Nginx(root / "nginx", f"127.0.0.1:{server.port}", header_timeout=f"{HEADER_TIMEOUT_S}s", body_timeout=f"{HEADER_TIMEOUT_S}s")
    proxy.start()
    yield server, proxy
    proxy.stop()
    server.stop()


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_healthz_answers_within_a_second_while_3000_slow_connections_are_held(world: tuple[Server, Nginx]) -> None:
    server, proxy = world
    assert server.process is not None
    raise_own_file_limit(SLOW_CONNECTIONS + 1000)
    held: list[socket.socket] = []
    try:
        for _ in range(SLOW_CONNECTIONS):
            sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=30)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: grader\r\nX-Slow: ")  # half a head, never finished
            held.append(sock)
        for _ in range(3):
            assert httpx.get(f"{proxy.url}/healthz", timeout=1.0).status_code == 200  # a ReadTimeout here: over 1 s
        assert open_files(server.process.pid) < SERVER_FILES // 2  # the grader holds none of the slow ones
        # nginx closes each at its head timeout
        selector = selectors.DefaultSelector()
        for sock in held:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        remaining = len(held)
        deadline = time.monotonic() + HEADER_TIMEOUT_S + 60
        while remaining and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(4096)
                except ConnectionResetError:
                    data = b""
                if not data:
                    selector.unregister(sock)
                    remaining -= 1
        selector.close()
        assert remaining == 0, f"{remaining} slow connections still open after the head timeout"
    finally:
        for sock in held:
            sock.close()


def test_an_upload_slower_than_the_minimum_rate_is_cut(world: tuple[Server, Nginx]) -> None:
    server, proxy = world
    token = server.participant  # type: ignore[attr-defined]
    head = (
        f"POST /api/v1/submissions HTTP/1.1\r\nHost: grader\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/gzip\r\nContent-Length: {1 << 20}\r\n\r\n"
    ).encode()
    answer = b""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        sock.sendall(head)
        sock.settimeout(0.5)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and b"\r\n" not in answer:
            try:
                sock.sendall(b"\0" * 512)  # 1 KB/s: a quarter of the minimum
            except (BrokenPipeError, ConnectionResetError):
                break
            try:
                data = sock.recv(4096)
            except TimeoutError:
                continue
            except ConnectionResetError:
                break
            if not data:
                break
            answer += data
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    # the cut upload's reservation (taken on its headers) is released: nothing is left in progress
    quota = httpx.get(f"{proxy.url}/api/v1/quota", headers={"Authorization": f"Bearer {token}"}, timeout=10).json()
    assert quota["hidden"]["in_flight"] == 0, quota
    # a body at a normal pace is read through (and refused for what it is: not a tar archive)
    fast = httpx.post(f"{proxy.url}/api/v1/submissions", content=os.urandom(256 << 10), headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert fast.status_code == 422, fast.text


def test_accept_errors_at_the_descriptor_limit_are_logged_a_few_times(world: tuple[Server, Nginx]) -> None:
    server, _proxy = world
    log: Path = server.log
    start = log.stat().st_size
    flood: list[socket.socket] = []
    try:
        for _ in range(SERVER_FILES + 150):  # straight at the grader, past its descriptor limit
            sock = socket.socket()
            sock.setblocking(False)
            try:
                sock.connect(("127.0.0.1", server.port))
            except BlockingIOError:
                pass
            flood.append(sock)
        wait_for(lambda: b"out of system resource" in log.read_bytes()[start:], timeout=30, what="the accept error")
        time.sleep(3)  # the accept loop fails on every turn meanwhile (35 MB of tracebacks in 10 s before the limit)
        written = log.read_bytes()[start:]
    finally:
        for sock in flood:
            sock.close()
    assert written.count(b"out of system resource") <= 6, written.count(b"out of system resource")
    assert len(written) < 200_000, len(written)
    wait_for(lambda: httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200, timeout=60, what="the server to recover")
