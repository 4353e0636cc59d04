"""The real server (uvicorn subprocess, SQLite and PostgreSQL) refusing bad uploads and bad callers, storing nothing.

No worker runs here (``--workers 0``): these tests need no Docker engine.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from grader.hosting.participant.client import HostingClient, packed
from tests.hosting.support import REPO, Server, admin, grader_cli, wait_for, write_competition

pytestmark = pytest.mark.slow  # each test starts a server, a container or a subprocess

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"


def stored_files(state: Path) -> list[Path]:
    return sorted(p for p in (state / "uploads").rglob("*") if p.is_file())


def submissions(state: Path, database: str | None) -> list[dict]:
    return json.loads(admin(state, "submissions", "--json", database=database))


@pytest.fixture
def server(tmp_path: Path, database_url: str | None):  # type: ignore[no-untyped-def]
    competition = write_competition(tmp_path / "c.toml", tables={"upload": {"max_bytes": "2m"}})
    srv = Server(competition, tmp_path / "state", workers=0, database=database_url).start()
    srv.tokens = {name: admin(srv.state, "add-participant", name, database=database_url).strip() for name in ("alice", "bob")}  # type: ignore[attr-defined]
    yield srv
    srv.stop()


def post(server: Server, body, token: str, **kwargs) -> httpx.Response:  # type: ignore[no-untyped-def]
    return httpx.post(
        f"{server.url}/api/v1/submissions",
        content=body,
        headers={"Authorization": f"Bearer {token}", **kwargs.pop("headers", {})},
        timeout=30,
        **kwargs,
    )


def tar_gz(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_bad_uploads_are_refused_and_nothing_is_stored(server: Server) -> None:
    alice = server.tokens["alice"]  # type: ignore[attr-defined]
    cases = {
        "malformed archive": (os.urandom(4096), 422, "not a readable tar archive"),
        "path traversal": ((REPO / "tests/broken_submissions/archive-dotdot/submission.tar.gz").read_bytes(), 422, "contains '..'"),
        "100 MB name": (
            tar_gz({"submission.json": json.dumps({"kind": "onnx", "name": "n" * 100_000_000}).encode()}),
            422,
            "unpacks to more than",  # 100 MB of one letter: past the unpack ratio (20:1) before the manifest's own cap
        ),
        "invalid model": (None, 422, "pooler_output"),
    }
    with packed(REPO / "tests/broken_submissions/onnx-wrong-output") as archive:
        cases["invalid model"] = (archive.read_bytes(), 422, "pooler_output")
    for what, (body, status, message) in cases.items():
        response = post(server, body, alice)
        assert response.status_code == status, (what, response.text)
        detail = response.json()["detail"]
        assert message in detail, (what, detail)
        assert "/tmp" not in detail and str(server.state) not in detail, detail  # no server paths
    assert stored_files(server.state) == []
    assert submissions(server.state, server.database) == []


def test_over_cap_upload_is_refused_while_streaming(server: Server) -> None:
    alice = server.tokens["alice"]  # type: ignore[attr-defined]

    def endless():  # no Content-Length: refused 411 before a byte is read (grader submit always declares it)
        for _ in range(64):
            yield b"\0" * (256 << 10)

    try:
        response = post(server, endless(), alice)
        assert response.status_code == 411 and "Content-Length" in response.json()["detail"]
    except httpx.HTTPError:
        pass  # the server may close the connection before reading the rest; either way nothing is stored
    declared = post(server, b"\0" * 10, alice, headers={"Content-Length": str(10)})  # small body passes the cap check
    assert declared.status_code == 422
    huge = httpx.post(
        f"{server.url}/api/v1/submissions",
        headers={"Authorization": f"Bearer {alice}", "Content-Length": str(3 << 20)},
        content=b"\0" * (3 << 20),
        timeout=30,
    )
    assert huge.status_code == 413
    assert stored_files(server.state) == []
    assert submissions(server.state, server.database) == []


def test_tokens_ownership_and_rate_limit(server: Server) -> None:
    alice, bob = server.tokens["alice"], server.tokens["bob"]  # type: ignore[attr-defined]
    view = HostingClient(server.url, alice).submit(EXAMPLE)
    assert view["state"] in ("queued", "received") and len(view["sha256"]) == 64
    # bob sees nothing of alice's: 404, not 403; his list is empty
    other = httpx.get(f"{server.url}/api/v1/submissions/{view['id']}", headers={"Authorization": f"Bearer {bob}"})
    assert other.status_code == 404
    assert httpx.get(f"{server.url}/api/v1/submissions", headers={"Authorization": f"Bearer {bob}"}).json() == []
    status = grader_cli("status", view["id"], "--server", server.url, env={"GRADER_TOKEN": bob})
    assert status.returncode == 6 and "404: no such submission" in status.stderr
    # the real CLI lists alice's one submission
    listed = grader_cli("submissions", "--server", server.url, "--json", env={"GRADER_TOKEN": alice})
    assert listed.returncode == 0 and [v["id"] for v in json.loads(listed.stdout)] == [view["id"]]
    # a revoked token stops working at once
    admin(server.state, "revoke", "bob", database=server.database)
    assert httpx.get(f"{server.url}/api/v1/submissions", headers={"Authorization": f"Bearer {bob}"}).status_code == 401
    assert "bob" in admin(server.state, "list", database=server.database) and "REVOKED" in admin(server.state, "list", database=server.database)
    # wrong tokens: 401, then 429 for that address; a right token is still served (a guesser cannot lock its owner out)
    for _ in range(9):  # the revoked token above was the first failure
        assert httpx.get(f"{server.url}/api/v1/submissions", headers={"Authorization": "Bearer gp_wrong"}).status_code == 401
    limited = httpx.get(f"{server.url}/api/v1/submissions", headers={"Authorization": "Bearer gp_wrong"})
    assert limited.status_code == 429 and "Retry-After" in limited.headers
    assert httpx.get(f"{server.url}/api/v1/submissions", headers={"Authorization": f"Bearer {alice}"}).status_code == 200


def test_quota_and_window_answers_say_when(tmp_path: Path) -> None:
    competition = write_competition(tmp_path / "c.toml", tables={"quotas": {"per_day": 1, "concurrent": 5}})
    srv = Server(competition, tmp_path / "state", workers=0).start()
    try:
        token = admin(srv.state, "add-participant", "carol").strip()
        first = HostingClient(srv.url, token).submit(EXAMPLE)
        refused = grader_cli("submit", str(EXAMPLE), "--server", srv.url, env={"GRADER_TOKEN": token})
        assert refused.returncode == 4, refused.stderr
        assert "daily quota used: 1 of 1" in refused.stderr and "next possible at" in refused.stderr
        # a host cancel refunds the quota
        admin(srv.state, "cancel", first["id"])
        second = HostingClient(srv.url, token).submit(EXAMPLE)
        admin(srv.state, "end", "--yes")
        closed = grader_cli("submit", str(EXAMPLE), "--server", srv.url, env={"GRADER_TOKEN": token})
        assert closed.returncode == 4 and "competition closed at" in closed.stderr
        assert {s["id"]: s["state"] for s in submissions(srv.state, None)} == {first["id"]: "cancelled", second["id"]: "queued"}
    finally:
        srv.stop()


def test_kill9_server_during_upload_leaves_no_half_submission(tmp_path: Path) -> None:
    competition = write_competition(tmp_path / "c.toml")
    srv = Server(competition, tmp_path / "state", workers=0).start()
    token = admin(srv.state, "add-participant", "dave").strip()
    with packed(EXAMPLE) as archive:
        data = archive.read_bytes()
    half = threading.Event()

    def slow():
        yield data[: len(data) // 2]
        half.set()
        time.sleep(300)  # the server is killed long before (a daemon thread: it ends with the test process)
        yield data[len(data) // 2 :]

    def upload() -> None:
        try:
            post(srv, slow(), token, headers={"Content-Length": str(len(data))})
        except httpx.HTTPError:
            pass

    thread = threading.Thread(target=upload, daemon=True)
    thread.start()
    assert half.wait(120), "the first half of the upload was never sent"
    wait_for(lambda: any((srv.state / "uploads" / "tmp").iterdir()), timeout=120, what="the partial upload on disk")
    srv.kill9()
    srv.start()  # the same state folder and port
    try:
        assert list((srv.state / "uploads" / "tmp").iterdir()) == []
        assert stored_files(srv.state) == []
        assert submissions(srv.state, None) == []
        # and the restarted server takes a complete upload
        complete = tmp_path / "complete.tar.gz"
        complete.write_bytes(data)
        assert HostingClient(srv.url, token).upload(complete)["state"] in ("queued", "received")
    finally:
        srv.stop()


def test_refuses_to_start_on_changed_pins_until_repin(tmp_path: Path) -> None:
    competition = write_competition(tmp_path / "c.toml")
    Server(competition, tmp_path / "state", workers=0).start().stop()
    # another hidden split is other data: refused at start, with the way out
    write_competition(tmp_path / "c.toml", split="dev", sample_split="train")
    again = Server(competition, tmp_path / "state", workers=0)
    try:
        again.start(expect_ok=False)
        assert again.process is not None and again.process.wait(60) == 3
        log = again.log.read_text()
        assert "pinned on other data or grader" in log and "grader admin repin" in log
        admin(tmp_path / "state", "repin", "--competition", str(competition))
        again.start()
    finally:
        again.stop()
