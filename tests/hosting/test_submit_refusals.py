"""`grader submit` refuses, before sending a byte of the archive, whatever the server would refuse, in the server's words.

One real `grader serve` subprocess (no workers: nothing is graded) with the rules
the refusals need (ONNX only, training labels required, a 3 MiB upload cap, one
hidden submission a day), a counting TCP proxy in front of it, and the real CLI in
a subprocess pointed at the proxy. For each refusal: exit 4, the line the server
itself gives when the same archive is posted to it directly, and no upload through
the proxy (no ``POST /api/v1/submissions``; fewer bytes than the archive). `grader check --competition URL`
finds the same rule refusals in its step 1.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import socket
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from grader.hosting.intake.refusals import refusal_line
from grader.hosting.participant.client import packed
from tests.hosting.support import REPO, Server, admin, grader_cli, write_competition
from tests.hosting.tcp_proxy import CuttableProxy

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
#: The one-shot upload, and a resumable upload's creation and bytes (grader submit uses the latter where the server offers them).
UPLOADS = (b"POST /api/v1/submissions", b"POST /api/v1/uploads", b"PATCH /api/v1/uploads/")


class CountingProxy(CuttableProxy):
    """The tests' TCP proxy, recording every byte that goes from the client to the server."""

    def __init__(self, target_port: int) -> None:
        self.upstream = bytearray()
        self._count_lock = threading.Lock()
        super().__init__(target_port)

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:  # type: ignore[override]
        to_server = sink.getpeername()[1] == self.target_port
        try:
            while data := source.recv(65536):
                if to_server:
                    with self._count_lock:
                        self.upstream += data
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def take(self) -> bytes:
        """What went to the server since the last call."""
        with self._count_lock:
            data = bytes(self.upstream)
            self.upstream.clear()
        return data


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, CountingProxy]]:
    root = tmp_path_factory.mktemp("refusals")
    competition = write_competition(
        root / "c.toml",
        kinds=["onnx"],
        require_training_labels=True,
        # refusals_per_hour 2: each test's participant is refused by the server itself at most once, except the limit's own test
        tables={"quotas": {"per_day": 1, "concurrent": 5, "refusals_per_hour": 2}, "upload": {"max_bytes": "3m"}},
    )
    server = Server(competition, root / "state", workers=0).start()
    proxy = CountingProxy(server.port)
    try:
        yield server, proxy
    finally:
        proxy.cut()
        server.stop()


def variant(root: Path, name: str, *, manifest: dict | None = None, padding: int = 0) -> Path:
    """The example ONNX submission with another manifest or an incompressible extra file."""
    folder = root / name
    shutil.copytree(EXAMPLE, folder)
    if manifest is not None:
        (folder / "submission.json").write_text(json.dumps(manifest), encoding="utf-8")
    if padding:
        (folder / "padding.bin").write_bytes(os.urandom(padding))
    return folder


def archive_of(submission: Path) -> bytes:
    """The folder as a .tar.gz, as `grader submit` packs an ONNX submission (a Docker one's image is left out: the
    kind is refused before the image matters, and the server checks the size first)."""
    if json.loads((submission / "submission.json").read_text())["kind"] != "docker":
        with packed(submission) as archive:
            return archive.read_bytes()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        for path in sorted(submission.rglob("*")):
            tar.add(path, arcname=path.relative_to(submission).as_posix(), recursive=False)
    return buffer.getvalue()


def server_line(server: Server, token: str, submission: Path) -> str:
    """What the server itself answers to this submission, posted straight to it, as `grader submit` prints a refusal."""
    response = httpx.post(
        f"{server.url}/api/v1/submissions",
        content=archive_of(submission),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/gzip"},
        timeout=60,
    )
    assert response.status_code in (403, 413, 422, 429), response.text
    body = response.json()
    return refusal_line(response.status_code, body["detail"], body.get("retry_at"))


def submit_through(proxy: CountingProxy, token: str, submission: Path) -> tuple[int, str, bytes]:
    proxy.take()
    result = grader_cli("submit", str(submission), "--server", proxy.url, env={"GRADER_TOKEN": token}, timeout=300)
    return result.returncode, result.stderr, proxy.take()


def assert_refused_before_upload(code: int, stderr: str, sent: bytes, expected: str, submission: Path) -> None:
    assert code == 4, stderr
    assert stderr.splitlines()[0] == f"error: {expected}"
    assert "hint: refused here before uploading" in stderr
    assert not any(upload in sent for upload in UPLOADS)
    assert len(sent) < len(archive_of(submission)) // 100, len(sent)  # a few requests' headers, nothing of the archive


def base_manifest() -> dict:
    return json.loads((EXAMPLE / "submission.json").read_text())


@pytest.mark.parametrize(
    ("case", "manifest", "padding"),
    [
        ("kind", {"kind": "docker", "image": "grader-example-bm25:1", "mode": "retrieve", "name": "bm25", "training": {"setting": "zero-shot"}}, 0),
        ("labels", {k: v for k, v in base_manifest().items() if k != "training"}, 0),
        ("fine-tuned-without-datasets", {**base_manifest(), "training": {"setting": "fine-tuned"}}, 0),
        ("size", None, 2 << 20),
    ],
)
def test_rule_refusals_send_nothing(served: tuple[Server, CountingProxy], tmp_path: Path, case: str, manifest: dict | None, padding: int) -> None:
    server, proxy = served
    token = admin(server.state, "add-participant", f"p-{case}").strip()
    submission = variant(tmp_path, case, manifest=manifest, padding=padding)
    expected = server_line(server, token, submission)
    code, stderr, sent = submit_through(proxy, token, submission)
    assert_refused_before_upload(code, stderr, sent, expected, submission)
    # `grader check --competition URL` finds the same refusal in step 1
    checked = grader_cli("check", str(submission), "--competition", server.url, "--sandbox", "none", timeout=300)
    assert checked.returncode == 1, checked.stderr
    assert checked.stdout.splitlines()[0] == f"[FAIL] 1. archive and manifest: the server would refuse it: {expected}"


def test_quota_refusal_sends_nothing_and_an_accepted_upload_goes_through(served: tuple[Server, CountingProxy]) -> None:
    server, proxy = served
    token = admin(server.state, "add-participant", "quota-user").strip()
    code, stderr, sent = submit_through(proxy, token, EXAMPLE)
    assert code == 0, stderr
    with packed(EXAMPLE) as archive:
        assert b"PATCH /api/v1/uploads/" in sent and len(sent) > archive.stat().st_size  # the proxy does see an upload when there is one
    expected = server_line(server, token, EXAMPLE)
    assert "daily quota used: 1 of 1 hidden submissions" in expected and "(next possible at " in expected
    code, stderr, sent = submit_through(proxy, token, EXAMPLE)
    assert_refused_before_upload(code, stderr, sent, expected, EXAMPLE)


def test_too_many_refused_uploads_are_refused_before_the_next_one_and_quota_says_so(served: tuple[Server, CountingProxy], tmp_path: Path) -> None:
    server, proxy = served
    token = admin(server.state, "add-participant", "refused-twice").strip()
    unlabelled = variant(tmp_path, "unlabelled", manifest={k: v for k, v in base_manifest().items() if k != "training"})
    for _ in range(2):  # two invalid uploads, refused 422 by the server: the hour's limit
        assert server_line(server, token, unlabelled).startswith("refused (422): invalid submission: ")
    quota = grader_cli("quota", "--server", proxy.url, env={"GRADER_TOKEN": token}, timeout=120)
    assert quota.returncode == 0, quota.stderr
    assert re.search(r"^refused uploads: 2 of at most 2 in the last hour; next upload possible at \S+Z$", quota.stdout, re.M), quota.stdout
    expected = server_line(server, token, EXAMPLE)  # a valid submission, refused on its headers
    assert expected.startswith("refused (429): too many refused uploads: 2 refused and 0 ended by a platform failure in the last hour"), expected
    code, stderr, sent = submit_through(proxy, token, EXAMPLE)
    assert_refused_before_upload(code, stderr, sent, expected, EXAMPLE)


def test_window_closed_refusal_sends_nothing(served: tuple[Server, CountingProxy]) -> None:
    # Last in the module: it ends the shared competition.
    server, proxy = served
    token = admin(server.state, "add-participant", "late").strip()
    admin(server.state, "end", "--yes")
    expected = server_line(server, token, EXAMPLE)
    assert "the competition closed at" in expected
    code, stderr, sent = submit_through(proxy, token, EXAMPLE)
    assert_refused_before_upload(code, stderr, sent, expected, EXAMPLE)
