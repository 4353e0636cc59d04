"""Uploads over a flaky network, and admission before the body, against one real `grader serve` over real sockets.

A connection cut midway through an upload, or after the server committed but
before its answer reached the client, is retried by the client with the same
idempotency key: exactly one submission, charged once. One key, one body: ten
concurrent copies of one upload have one body received and unpacked (the server
counts inside its process, tests/hosting/upload_meter.py), the others answered
409 "in progress" (or the submission) before their bodies are read; a copy whose
client stops sending is taken over by a retry after ``upload.stall_s`` and ends;
a retry after the commit is answered before it sends a byte of its body. Window,
quotas and concurrency are decided, and a reservation written, before a body is
read: three concurrent gzip bombs get at most the allowed number of reservations,
each admitted one is refused 422 at the unpack ratio, an upload without
``Content-Length`` gets 411, and a server killed mid-upload leaks its reservation
only until it expires. No worker runs (``--workers 0``): nothing
is graded, admitted uploads stay queued and count in flight.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from grader.hosting.participant import client as client_module
from grader.hosting.participant.client import HostingClient, packed
from tests.hosting.faulty_proxy import CUT_REQUEST, DROP_RESPONSE, Fault, FaultyProxy
from tests.hosting.support import REPO, Server, admin, grader_cli, gzip_bomb, wait_for, write_competition
from tests.hosting.upload_meter import MeteredServer

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
CONCURRENT = 2
#: Short, so that the killed server's reservation expires within the test (production: 120 s); longer than a restart and a takeover.
RESERVATION_S = 15
#: Short, so that a stalled copy is taken over within the test (production: 10 s); three refreshes of a copy that sends.
STALL_S = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeteredServer]:
    root = tmp_path_factory.mktemp("uploads")
    competition = write_competition(
        root / "c.toml",
        tables={
            "quotas": {"per_day": 10, "total": 50, "concurrent": CONCURRENT, "sample_per_day": 5},
            "upload": {"max_bytes": "8m", "max_unpack_ratio": 20, "reservation_s": RESERVATION_S, "stall_s": STALL_S},
        },
    )
    running = MeteredServer(competition, root / "state", workers=0).start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def proxy(server: Server) -> Iterator[FaultyProxy]:
    faulty = FaultyProxy(server.port)
    yield faulty
    faulty.close()


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    with packed(EXAMPLE) as path:
        return path.read_bytes()


def participant(server: Server, name: str) -> str:
    return admin(server.state, "add-participant", name).strip()


def api(server: Server, token: str, path: str) -> Any:
    return httpx.get(f"{server.url}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=30).json()


def in_flight(server: Server, token: str) -> int:
    return int(api(server, token, "/api/v1/quota")["hidden"]["in_flight"])


def identity(body: bytes, key: str) -> dict[str, str]:
    return {"Idempotency-Key": key, "Content-Digest": f"sha-256=:{base64.b64encode(hashlib.sha256(body).digest()).decode()}:"}


def upload_file(tmp_path: Path, body: bytes) -> Path:
    path = tmp_path / "submission.tar.gz"
    path.write_bytes(body)
    return path


def test_upload_cut_midway_is_sent_again_and_charged_once(server: Server, proxy: FaultyProxy, archive: bytes, tmp_path: Path) -> None:
    token = participant(server, "ada")
    proxy.plan(Fault(CUT_REQUEST, after=256 << 10))  # a quarter of a megabyte into the 1.7 MB body
    view = HostingClient(proxy.url, token).upload(upload_file(tmp_path, archive))
    assert proxy.connections == 2  # cut once, sent again once
    assert [s["id"] for s in api(server, token, "/api/v1/submissions")] == [view["id"]]
    quota = api(server, token, "/api/v1/quota")["hidden"]
    assert quota["used_24h"] == 1 and quota["in_flight"] == 1  # charged once; the cut copy's reservation is gone


def test_answer_lost_after_commit_gets_the_first_submission(server: Server, proxy: FaultyProxy, archive: bytes, tmp_path: Path) -> None:
    token = participant(server, "bob")
    proxy.plan(Fault(DROP_RESPONSE))  # the server commits and answers 201; the client never sees it
    view = HostingClient(proxy.url, token).upload(upload_file(tmp_path, archive))
    assert [answer.split(" ")[1] for answer in proxy.answers] == ["201", "200"]  # the retry is answered with the first submission
    assert [s["id"] for s in api(server, token, "/api/v1/submissions")] == [view["id"]]
    assert api(server, token, "/api/v1/quota")["hidden"]["used_24h"] == 1


def test_key_names_one_body_and_length_is_required(server: Server, archive: bytes) -> None:
    token = participant(server, "cy")
    bearer = {"Authorization": f"Bearer {token}", "Content-Type": "application/gzip"}
    url = f"{server.url}/api/v1/submissions"
    first = httpx.post(url, content=archive, headers={**bearer, **identity(archive, "k" * 32)}, timeout=60)
    assert first.status_code == 201, first.text
    again = httpx.post(url, content=archive, headers={**bearer, **identity(archive, "k" * 32)}, timeout=60)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    other = archive + b"\0" * 512  # another body under the same key
    reused = httpx.post(url, content=other, headers={**bearer, **identity(other, "k" * 32)}, timeout=60)
    assert reused.status_code == 409, reused.text
    assert httpx.post(url, content=archive, headers={**bearer, "Idempotency-Key": "k" * 32}, timeout=60).status_code == 400  # no digest
    chunked = httpx.post(url, content=iter([archive]), headers=bearer, timeout=60)  # a generator: chunked, no Content-Length
    assert chunked.status_code == 411 and "Content-Length" in chunked.json()["detail"]
    assert [s["id"] for s in api(server, token, "/api/v1/submissions")] == [first.json()["id"]]


def upload_head(token: str, body: bytes, key: str, *extra: str) -> bytes:
    """An upload's request line and headers, with its key and digest (and ``extra`` header lines)."""
    head = [
        "POST /api/v1/submissions HTTP/1.1",
        "Host: 127.0.0.1",
        f"Authorization: Bearer {token}",
        "Content-Type: application/gzip",
        f"Content-Length: {len(body)}",
        *(f"{name}: {value}" for name, value in identity(body, key).items()),
        *extra,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode()


def open_upload(server: Server, token: str, body: bytes, key: str) -> socket.socket:
    """Send an upload's head and its first kilobyte, and hold the rest back."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=120)
    sock.sendall(upload_head(token, body, key) + body[:1024])
    return sock


def open_head(server: Server, token: str, body: bytes, key: str) -> socket.socket:
    """Send an upload's head alone, asking to be told before sending the body (``Expect: 100-continue``): not a byte of its body."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=120)
    sock.sendall(upload_head(token, body, key, "Expect: 100-continue"))
    return sock


def answer(sock: socket.socket) -> tuple[int, str]:
    """The status and body of the server's answer on ``sock`` (read until the server closes or the body is complete)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
        if length and len(rest) >= int(length[0].split(b":")[1]):
            break
    sock.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), rest.decode("utf-8", "replace")


def test_concurrent_gzip_bombs_are_reserved_before_their_bodies_and_refused(server: Server) -> None:
    token = participant(server, "dee")
    bombs = [gzip_bomb((64 + n) << 20) for n in range(3)]  # three uploads, each its own body and key
    held = []
    for n in range(CONCURRENT):
        held.append(open_upload(server, token, bombs[n], f"bomb-{n}".ljust(16, "0")))
        wait_for(lambda n=n: in_flight(server, token) == n + 1, what=f"reservation {n + 1}")  # type: ignore[misc]
    third = open_upload(server, token, bombs[2], "bomb-2".ljust(16, "0"))
    status, detail = answer(third)  # refused on its headers: its body is never read, let alone unpacked
    assert status == 429 and "uploaded or graded" in detail, detail
    for sock, body in zip(held, bombs, strict=False):
        sock.sendall(body[1024:])
        status, detail = answer(sock)
        assert status == 422 and "unpacks to more than" in detail, detail  # 20 x ~64 KB, not 64 MB, written before the refusal
    assert in_flight(server, token) == 0  # refused uploads release their reservations
    assert api(server, token, "/api/v1/submissions") == []
    assert not list((server.state / "uploads" / "tmp").iterdir())


def test_unreachable_server_ends_the_command_with_5(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = grader_cli("submit", str(EXAMPLE), "--server", f"http://127.0.0.1:{port}", "--token", "gp_x", timeout=60)
    assert result.returncode == 5, result.stderr
    assert "cannot reach" in result.stderr


def test_retry_takes_its_reservation_over(server: MeteredServer, archive: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy whose client stops sending holds its key for ``stall_s``; then the client's retry takes it over and the stalled copy ends."""
    token = participant(server, "fay")
    keys = ["first".ljust(32, "0"), "second".ljust(32, "0")]
    held = [open_upload(server, token, archive + b"\0" * (512 * n), key) for n, key in enumerate(keys)]
    wait_for(lambda: in_flight(server, token) == CONCURRENT, what="both reservations")
    bearer = {"Authorization": f"Bearer {token}", "Content-Type": "application/gzip"}
    url = f"{server.url}/api/v1/submissions"
    # the first upload again while its first copy still counts as arriving: 409 "in progress", the body unread
    early = httpx.post(url, content=archive, headers={**bearer, **identity(archive, keys[0])}, timeout=60)
    assert early.status_code == 409 and early.json()["in_progress"] is True, early.text
    assert 1 <= int(early.headers["Retry-After"]) <= STALL_S
    # the client's own retry loop: it waits what Retry-After says, sends again, and takes the stalled copy over
    monkeypatch.setattr(client_module, "upload_identity", lambda _archive: identity(archive, keys[0]))
    waits: list[float] = []
    view = HostingClient(server.url, token).upload(upload_file(tmp_path, archive), on_wait=lambda wait, *_: waits.append(wait))
    assert waits and sum(waits) <= 2 * STALL_S, waits  # the stall is counted from the first copy's last refresh
    fresh = httpx.post(url, content=archive, headers={**bearer, **identity(archive, "third".ljust(32, "0"))}, timeout=60)
    assert fresh.status_code == 429, fresh.text  # the second upload still holds its slot
    status, detail = answer(held[0])  # the stalled copy noticed on its own (its client sent nothing more)
    assert status == 409 and "took its reservation over" in detail, detail
    held[1].close()
    wait_for(lambda: in_flight(server, token) == 1, what="the second reservation released")
    assert [s["id"] for s in api(server, token, "/api/v1/submissions")] == [view["id"]]
    assert not list((server.state / "uploads" / "tmp").iterdir())  # the stalled copy's temporary file is gone


COPIES = 10


def test_ten_copies_under_one_key_have_one_body_received_and_unpacked(server: MeteredServer, archive: bytes) -> None:
    token = participant(server, "gus")
    key = "ten-copies".ljust(32, "0")
    before = server.meter()
    start = threading.Barrier(COPIES)

    def copy(_n: int) -> tuple[int, str]:
        start.wait()
        sock = open_upload(server, token, archive, key)
        sock.sendall(archive[1024:])
        return answer(sock)

    with ThreadPoolExecutor(COPIES) as pool:
        answers = list(pool.map(copy, range(COPIES)))
    after = server.meter()
    counted = {name: after[name] - before[name] for name in ("received", "received_bytes", "unpacked", "unpacked_bytes")}
    print(
        f"\n{COPIES} copies under one key: answers {sorted(status for status, _ in answers)}; {counted}; peak unpacked {after['peak_unpacked_bytes']}"
    )
    codes = sorted(status for status, _ in answers)
    assert codes.count(201) == 1 and set(codes) <= {200, 201, 409}, answers
    assert all(json.loads(text)["in_progress"] is True for status, text in answers if status == 409)
    created = json.loads(next(text for status, text in answers if status == 201))["id"]
    assert all(json.loads(text)["id"] == created for status, text in answers if status == 200)
    assert counted["received"] == 1 and counted["received_bytes"] == len(archive), counted  # one body read
    assert counted["unpacked"] == 1, counted  # and unpacked
    assert after["peak_unpacked_bytes"] == counted["unpacked_bytes"]
    assert [s["id"] for s in api(server, token, "/api/v1/submissions")] == [created]
    assert api(server, token, "/api/v1/quota")["hidden"]["used_24h"] == 1


def test_a_retry_after_the_commit_is_answered_before_its_body(server: MeteredServer, archive: bytes) -> None:
    token = participant(server, "hal")
    key = "after-commit".ljust(32, "0")
    bearer = {"Authorization": f"Bearer {token}", "Content-Type": "application/gzip"}
    first = httpx.post(f"{server.url}/api/v1/submissions", content=archive, headers={**bearer, **identity(archive, key)}, timeout=60)
    assert first.status_code == 201, first.text
    before = server.meter()
    status, text = answer(open_head(server, token, archive, key))  # the head alone: the final answer, no "100 Continue", no body byte
    assert status == 200 and json.loads(text)["id"] == first.json()["id"], text
    assert server.meter() == before  # nothing received, nothing unpacked


def reservations(server: Server, keys: list[str]) -> int:
    """How many reservation rows hold ``keys`` (read from the server's database)."""
    from sqlalchemy import func, select

    from grader.hosting.db.models import UploadReservation
    from grader.hosting.db.session import open_database

    db = open_database(server.state, upgrade=False)
    try:
        with db.session() as session:
            return int(session.scalar(select(func.count()).select_from(UploadReservation).where(UploadReservation.idempotency_key.in_(keys))) or 0)
    finally:
        db.dispose()


def test_killed_server_leaks_reservations_only_until_they_expire(server: Server, archive: bytes, tmp_path: Path) -> None:
    """Last of the module: it kills and restarts the shared server."""
    token = participant(server, "eve")
    keys = [f"killed-{n}".ljust(32, "0") for n in range(CONCURRENT)]
    held = [open_upload(server, token, archive + b"\0" * (512 * n), key) for n, key in enumerate(keys)]
    wait_for(lambda: in_flight(server, token) == CONCURRENT, what="both reservations")
    server.kill9()  # mid-upload: nothing released the reservations
    for sock in held:
        sock.close()
    server.start()
    assert reservations(server, keys) == CONCURRENT  # they outlived the server (no admission has swept them yet)
    wait_for(lambda: in_flight(server, token) == 0, timeout=120, what="the reservations to expire")
    view = HostingClient(server.url, token).upload(upload_file(tmp_path, archive))
    assert view["state"] in ("received", "queued")
    assert reservations(server, keys) == 0  # a participant's expired ones are swept at its next admission
    assert api(server, token, "/api/v1/quota")["hidden"]["used_24h"] == 1  # the killed uploads were never charged
