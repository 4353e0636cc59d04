"""Resumable uploads (tus 1.0) against one real `grader serve` over real sockets.

The protocol's bounds at the server (raw HTTP): creation is the admission (a
reservation, counted in flight, before any byte; ``Upload-Length`` past
``upload.max_bytes`` is 413), one PATCH at a time (409), offsets checked (409),
termination frees the slot, and a complete upload is one submission however often
its last PATCH is sent. Then `grader submit`'s client: a 100 MB upload whose server
is killed mid-PATCH and restarted resumes from the bytes the server held and ends
with one submission of the same SHA-256; the `grader submit` command through a
proxy that cuts its connection midway sends the rest, not the whole again.
No worker runs (``--workers 0``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from grader.hosting.participant.client import HostingClient
from tests.hosting.faulty_proxy import CUT_REQUEST, Fault, FaultyProxy
from tests.hosting.support import REPO, Server, admin, grader_cli, wait_for, write_competition

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
TUS = {"Tus-Resumable": "1.0.0"}
BIG = 100 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("resumable")
    competition = write_competition(
        root / "c.toml",
        tables={
            "quotas": {"per_day": 20, "total": 50, "concurrent": 2, "sample_per_day": 5, "stored_bytes": "150m"},
            "upload": {"max_bytes": "160m", "max_unpack_ratio": 20, "reservation_s": 30, "stall_s": 3},
        },
    )
    running = Server(competition, root / "state", workers=0).start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def big_submission(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example with 100 MB of random bytes beside it: an archive of about 100 MB that gzip cannot shrink."""
    folder = tmp_path_factory.mktemp("big") / "submission"
    shutil.copytree(EXAMPLE, folder)
    with open(folder / "padding.bin", "wb") as out:
        for _ in range(BIG >> 20):
            out.write(os.urandom(1 << 20))
    return folder


def participant(server: Server, name: str) -> str:
    return admin(server.state, "add-participant", name).strip()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **TUS}


def api(server: Server, token: str, path: str) -> Any:
    return httpx.get(f"{server.url}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=30).json()


def create(server: Server, token: str, length: int, key: str | None = None, sha256: str | None = None) -> httpx.Response:
    headers = {**bearer(token), "Upload-Length": str(length)}
    if key is not None:
        headers["Idempotency-Key"] = key
    if sha256 is not None:
        headers["Upload-Metadata"] = f"sha256 {base64.b64encode(sha256.encode()).decode()}"
    return httpx.post(f"{server.url}/api/v1/uploads", headers=headers, timeout=30)


def patch(server: Server, token: str, location: str, offset: int, body: bytes) -> httpx.Response:
    headers = {**bearer(token), "Upload-Offset": str(offset), "Content-Type": "application/offset+octet-stream"}
    return httpx.patch(f"{server.url}{location}", content=body, headers=headers, timeout=120)


def offset_of(server: Server, token: str, location: str) -> int:
    answer = httpx.head(f"{server.url}{location}", headers=bearer(token), timeout=30)
    assert answer.status_code == 200, answer.status_code
    return int(answer.headers["Upload-Offset"])


def example_archive(tmp_path: Path) -> bytes:
    from grader.hosting.participant.client import packed

    with packed(EXAMPLE) as path:
        return path.read_bytes()


def test_creation_reserves_before_any_byte_and_one_patch_at_a_time(server: Server, tmp_path: Path) -> None:
    token = participant(server, "ada")
    archive = example_archive(tmp_path)
    options = httpx.options(f"{server.url}/api/v1/uploads", timeout=30)
    assert options.status_code == 204 and options.headers["Tus-Version"] == "1.0.0" and int(options.headers["Tus-Max-Size"]) == 160 << 20
    assert create(server, token, 161 << 20).status_code == 413  # past upload.max_bytes: refused on its declared length
    no_version = httpx.post(f"{server.url}/api/v1/uploads", headers={"Authorization": f"Bearer {token}", "Upload-Length": "10"}, timeout=30)
    assert no_version.status_code == 412
    assert api(server, token, "/api/v1/quota")["hidden"]["in_flight"] == 0

    made = create(server, token, len(archive), sha256=hashlib.sha256(archive).hexdigest())
    assert made.status_code == 201, made.text
    location = made.headers["Location"]
    assert api(server, token, "/api/v1/quota")["hidden"]["in_flight"] == 1  # reserved before a byte was sent
    assert offset_of(server, token, location) == 0

    # A PATCH held open (its head and a first kilobyte sent, the rest held back) holds the upload: another is 409.
    held = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    head = [
        f"PATCH {location} HTTP/1.1",
        "Host: 127.0.0.1",
        f"Authorization: Bearer {token}",
        "Tus-Resumable: 1.0.0",
        "Upload-Offset: 0",
        "Content-Type: application/offset+octet-stream",
        f"Content-Length: {len(archive)}",
    ]
    held.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + archive[:1024])
    try:
        wait_for(lambda: offset_of(server, token, location) == 1024, timeout=30, what="the first kilobyte")
        assert patch(server, token, location, 1024, archive[1024:]).status_code == 409  # the held PATCH still holds it
    finally:
        held.close()  # the client goes away: what arrived is kept
    answers: list[httpx.Response] = []
    # The held PATCH ends once the server sees its client gone (409 until then); the rest is then sent from 1024.
    wait_for(
        lambda: answers.append(patch(server, token, location, 1024, archive[1024:])) or answers[-1].status_code != 409, timeout=30, what="the rest"
    )
    rest = answers[-1]
    assert rest.status_code == 204, rest.text
    submission = rest.headers["Grader-Submission"]
    again = patch(server, token, location, len(archive), b"")  # the last PATCH's answer lost: sent again
    assert again.status_code == 204 and again.headers["Grader-Submission"] == submission
    assert create(server, token, len(archive), key=location.rsplit("/", 1)[1]).status_code == 201  # the same upload, created again
    view = httpx.get(f"{server.url}{location}", headers=bearer(token), timeout=30).json()
    assert view["id"] == submission
    assert [s["id"] for s in api(server, token, "/api/v1/submissions")] == [submission]
    quota = api(server, token, "/api/v1/quota")["hidden"]
    assert quota["used_24h"] == 1 and quota["in_flight"] == 1  # charged once; the reservation became the submission


def test_termination_frees_the_slot_and_the_bytes(server: Server) -> None:
    token = participant(server, "bob")
    location = create(server, token, 4096).headers["Location"]
    assert patch(server, token, location, 0, b"\0" * 1000).status_code == 204
    assert patch(server, token, location, 0, b"\0").status_code == 409  # not its offset (1000)
    assert offset_of(server, token, location) == 1000
    assert api(server, token, "/api/v1/quota")["hidden"]["in_flight"] == 1
    assert httpx.delete(f"{server.url}{location}", headers=bearer(token), timeout=30).status_code == 204
    assert httpx.head(f"{server.url}{location}", headers=bearer(token), timeout=30).status_code == 404
    assert api(server, token, "/api/v1/quota")["hidden"]["in_flight"] == 0
    assert not list((server.state / "uploads" / "partial").glob("*.tar.gz"))


def test_a_patch_past_the_declared_length_and_another_participants_upload_are_refused(server: Server) -> None:
    token, other = participant(server, "cy"), participant(server, "dee")
    location = create(server, token, 100).headers["Location"]
    assert patch(server, token, location, 0, b"\0" * 101).status_code == 413
    assert httpx.head(f"{server.url}{location}", headers=bearer(other), timeout=30).status_code == 404  # not theirs
    assert patch(server, other, location, 0, b"\0").status_code == 404
    assert httpx.delete(f"{server.url}{location}", headers=bearer(token), timeout=30).status_code == 204


def test_quotas_and_stored_bytes_count_held_uploads_at_their_declared_length(server: Server) -> None:
    token = participant(server, "hal")
    big = create(server, token, 100 << 20)  # held, not a byte sent: it counts at 100 MB
    assert big.status_code == 201
    over = create(server, token, 60 << 20)  # 160 MB would be stored: past the 150 MB bound, refused on its declared length
    assert over.status_code == 429 and "stored uploads" in over.json()["detail"], over.text
    small = create(server, token, 1024)
    assert small.status_code == 201
    third = create(server, token, 1024)  # concurrent = 2: refused on its headers
    assert third.status_code == 429, third.text
    for made in (big, small):
        assert httpx.delete(f"{server.url}{made.headers['Location']}", headers=bearer(token), timeout=30).status_code == 204
    assert api(server, token, "/api/v1/quota")["hidden"]["in_flight"] == 0


def test_a_gzip_bomb_is_refused_at_the_unpack_ratio_and_its_slot_freed(server: Server) -> None:
    from tests.hosting.support import gzip_bomb

    token = participant(server, "ivy")
    bomb = gzip_bomb()
    location = create(server, token, len(bomb)).headers["Location"]
    refused = patch(server, token, location, 0, bomb)
    assert refused.status_code == 422 and "unpacks to more than" in refused.json()["detail"], refused.text
    assert httpx.head(f"{server.url}{location}", headers=bearer(token), timeout=30).status_code == 404
    assert api(server, token, "/api/v1/quota")["hidden"]["in_flight"] == 0
    assert api(server, token, "/api/v1/submissions") == []


def test_a_partial_upload_expires_and_its_bytes_go(server: Server) -> None:
    token = participant(server, "jo")
    location = create(server, token, 4096).headers["Location"]
    assert patch(server, token, location, 0, b"\0" * 1000).status_code == 204
    assert api(server, token, "/api/v1/quota")["hidden"]["in_flight"] == 1  # counted while held
    wait_for(lambda: api(server, token, "/api/v1/quota")["hidden"]["in_flight"] == 0, timeout=120, what="the upload to expire")
    assert httpx.head(f"{server.url}{location}", headers=bearer(token), timeout=30).status_code == 404
    assert patch(server, token, location, 1000, b"\0").status_code == 404  # nothing to resume: a client creates it anew
    key = location.rsplit("/", 1)[1]
    assert not list((server.state / "uploads" / "partial").glob(f"*-{key}.tar.gz"))


def test_a_100_mb_upload_resumes_after_its_server_is_killed_and_restarted(
    server: Server, big_submission: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = participant(server, "eve")
    monkeypatch.setenv("GRADER_UPLOADS", str(tmp_path / "pending"))
    killed: list[int] = []

    def progress(sent: int, total: int) -> None:
        """Kill the server when 40 MB are on their way, and start it again (the client's next write fails)."""
        if not killed and sent >= 40 << 20:
            killed.append(sent)
            server.kill9()
            server.start()

    client = HostingClient(server.url, token)
    kept: list[dict[str, Any]] = []
    original_resume = client.resume

    def resume(pending: Any, **kwargs: Any) -> dict[str, Any]:
        kept.append(json.loads((pending.folder / "upload.json").read_text()))
        return original_resume(pending, **kwargs)

    monkeypatch.setattr(client, "resume", resume)
    view = client.submit(big_submission, progress=progress)
    assert killed, "the server was never killed"
    stored = api(server, token, f"/api/v1/submissions/{view['id']}")
    assert [s["id"] for s in api(server, token, "/api/v1/submissions")] == [view["id"]]
    assert api(server, token, "/api/v1/quota")["hidden"]["used_24h"] == 1
    upload = next((server.state / "uploads").glob(f"{view['id']}.tar.gz"))
    sha256 = hashlib.sha256(upload.read_bytes()).hexdigest()
    assert sha256 == kept[0]["sha256"] and upload.stat().st_size == kept[0]["length"] > BIG  # the bytes packed, whole
    assert stored["state"] in ("received", "queued")
    assert not (tmp_path / "pending").exists() or not any((tmp_path / "pending").iterdir())  # forgotten once complete


def test_grader_submit_sends_the_rest_after_its_connection_is_cut(server: Server, big_submission: Path, tmp_path: Path) -> None:
    token = participant(server, "fay")
    proxy = FaultyProxy(server.port)
    try:
        proxy.plan(Fault(CUT_REQUEST, after=60 << 20))  # 60 MB in: the connection is cut mid-PATCH
        env = {"GRADER_TOKEN": token, "GRADER_UPLOADS": str(tmp_path / "pending")}
        result = grader_cli("submit", str(big_submission), "--server", proxy.url, env=env, timeout=600)
        assert result.returncode == 0, result.stderr[-2000:]
        submission = result.stdout.strip().splitlines()[-1]
        assert proxy.connections >= 2  # cut once, resumed on a new connection
        assert proxy.forwarded < BIG * 3 // 2  # the rest was sent, not the whole again
    finally:
        proxy.close()
    assert [s["id"] for s in api(server, token, "/api/v1/submissions")] == [submission]
    assert api(server, token, "/api/v1/quota")["hidden"]["used_24h"] == 1


def test_the_real_tuspy_client_uploads_in_chunks_and_resumes_after_a_cut(server: Server, tmp_path: Path) -> None:
    from tusclient.client import TusClient

    token = participant(server, "gus")
    archive = tmp_path / "submission.tar.gz"
    archive.write_bytes(example_archive(tmp_path))
    proxy = FaultyProxy(server.port)
    try:
        proxy.plan(Fault(CUT_REQUEST, after=(1 << 20) + 4096))  # cut inside the fifth 256 KiB PATCH
        client = TusClient(f"{proxy.url}/api/v1/uploads", headers={"Authorization": f"Bearer {token}"})
        uploader = client.uploader(str(archive), chunk_size=256 << 10, retries=5, retry_delay=1)
        uploader.upload()
        assert proxy.connections >= 2
        assert proxy.forwarded < archive.stat().st_size * 3 // 2  # resumed, not sent again from the start
        location = str(uploader.url).removeprefix(proxy.url)
    finally:
        proxy.close()
    view = httpx.get(f"{server.url}{location}", headers=bearer(token), timeout=30).json()
    assert [s["id"] for s in api(server, token, "/api/v1/submissions")] == [view["id"]]
    stored = server.state / "uploads" / f"{view['id']}.tar.gz"
    assert hashlib.sha256(stored.read_bytes()).digest() == hashlib.sha256(archive.read_bytes()).digest()


def test_a_killed_grader_submit_run_again_resumes_with_the_same_bytes(server: Server, big_submission: Path, tmp_path: Path) -> None:
    """The first run is killed with 40 MB on the server; the same command again sends the rest of the kept archive."""
    token = participant(server, "kim")
    pending = tmp_path / "pending"
    env = {"GRADER_TOKEN": token, "GRADER_UPLOADS": str(pending)}
    proxy = FaultyProxy(server.port)  # the same server address for both runs: the kept upload is the server's
    try:
        proxy.hold_after(40 << 20)
        first = subprocess.Popen(
            [sys.executable, "-c", "from grader.cli.main import main; main()", "submit", str(big_submission), "--server", proxy.url],
            env={**os.environ, **env},
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert proxy.holding.wait(300), "the first run never sent 40 MB"
        finally:
            first.kill()
            first.wait(30)
        proxy.released.set()  # the server sees the connection end, and keeps what came
        (record,) = pending.glob("*/upload.json")
        kept = json.loads(record.read_text())
        location = f"/api/v1/uploads/{kept['key']}"
        wait_for(lambda: offset_of(server, token, location) > 30 << 20, timeout=60, what="the server to hold about 40 MB")
        proxy.plan()  # count the second run's bytes alone
        result = grader_cli("submit", str(big_submission), "--server", proxy.url, env=env)
        assert result.returncode == 0, result.stderr[-2000:]
        assert proxy.forwarded < kept["length"] - (30 << 20)  # the rest only: the kept archive resumed, not packed and sent anew
    finally:
        proxy.close()
    submission = result.stdout.strip().splitlines()[-1]
    assert [s["id"] for s in api(server, token, "/api/v1/submissions")] == [submission]
    stored = server.state / "uploads" / f"{submission}.tar.gz"
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == kept["sha256"]
    assert not record.exists()  # forgotten once complete


def test_the_web_session_needs_its_csrf_token_in_a_header_and_the_cap_is_known_before_the_body(server: Server) -> None:
    token = participant(server, "lee")
    with httpx.Client(base_url=server.url, timeout=30) as web:
        csrf = re.search(r'name="csrf" value="([^"]+)"', web.get("/signin").text)
        assert csrf is not None
        assert web.post("/signin", data={"token": token, "csrf": csrf.group(1)}).status_code in (200, 303)
        page = re.search(r'data-csrf="([^"]+)"', web.get("/me").text)
        assert page is not None
        headers = {**TUS, "Upload-Length": "1024"}
        assert web.post("/api/v1/uploads", headers=headers).status_code == 403  # the cookie alone: refused
        assert web.post("/api/v1/uploads", headers={**headers, "X-CSRF-Token": "x" * 43}).status_code == 403
        made = web.post("/api/v1/uploads", headers={**headers, "X-CSRF-Token": page.group(1)})
        assert made.status_code == 201, made.text
        assert web.delete(made.headers["Location"], headers={**TUS, "X-CSRF-Token": page.group(1)}).status_code == 204
    # A PATCH declaring more than upload.max_bytes is answered 413 by the body-cap middleware on its headers alone.
    location = create(server, token, 1024).headers["Location"]
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        head = [
            f"PATCH {location} HTTP/1.1",
            "Host: 127.0.0.1",
            f"Authorization: Bearer {token}",
            "Tus-Resumable: 1.0.0",
            "Upload-Offset: 0",
            "Content-Type: application/offset+octet-stream",
            f"Content-Length: {161 << 20}",
        ]
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        assert sock.recv(4096).startswith(b"HTTP/1.1 413")  # no byte of the body was sent
    assert offset_of(server, token, location) == 0
    assert httpx.delete(f"{server.url}{location}", headers=bearer(token), timeout=30).status_code == 204
