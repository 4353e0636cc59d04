"""Against a real `grader serve`: the bytes a participant keeps on the server are bounded.

Before: every accepted upload stayed on disk, and only the number of charged submissions was
bounded, so uploads that ended uncharged (``error``, cancelled) or many large ones filled the
disk without limit. After: ``[quotas] stored_bytes`` bounds the sum of a participant's stored
uploads, whatever their state; the upload that does not fit is refused 429 and not stored, and
once nothing fits any more the next one is refused before its body is read.
"""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from tests.hosting.attack_support import BODY, post, stored_uploads, upload_of
from tests.hosting.support import Server, admin, write_competition
from tests.image_tars import image_tar

pytestmark = pytest.mark.slow


def test_stored_upload_bytes_are_bounded_per_participant(tmp_path: Path) -> None:
    body = upload_of(image=image_tar([BODY]))
    bound = 2 * len(body) + len(body) // 2  # two uploads fit, a third does not
    competition = write_competition(
        tmp_path / "c.toml", tables={"quotas": {"per_day": 10, "total": 10, "concurrent": 10, "stored_bytes": str(bound)}}
    )
    server = Server(competition, tmp_path / "state", workers=0).start()  # no workers: the uploads stay queued
    try:
        token = admin(server.state, "add-participant", "hoarder").strip()
        other = admin(server.state, "add-participant", "neighbour").strip()
        assert [post(server, token, body).status_code for _ in range(2)] == [201, 201]
        kept = stored_uploads(server)
        third = post(server, token, body)
        assert third.status_code == 429 and "this upload of" in third.json()["detail"], third.text
        assert stored_uploads(server) == kept  # the refused upload left nothing
        quota = httpx.get(f"{server.url}/api/v1/quota", headers={"Authorization": f"Bearer {token}"}).json()["hidden"]
        assert (quota["stored_bytes"], quota["stored_limit"], quota["used_24h"]) == (2 * len(body), bound, 2)
        # The bound is per participant: another one still uploads.
        assert post(server, other, body).status_code == 201
        # Full to the byte: the next upload is refused before its body is read.
        competition.write_text(competition.read_text().replace(f'stored_bytes = "{bound}"', f'stored_bytes = "{2 * len(body)}"'))
        server.stop()
        server.start()
        # Only the head is sent (it declares 100 bytes, none follow): the answer comes on the headers alone.
        head = (
            f"POST /api/v1/submissions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/gzip\r\nContent-Length: 100\r\n\r\n"
        )
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
            sock.sendall(head.encode())
            answer = b""
            while b"\r\n\r\n" not in answer or b"stored uploads" not in answer:
                chunk = sock.recv(4096)  # socket.timeout here: the server waits for the body
                if not chunk:
                    break
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 429") and b"stored uploads" in answer, answer
    finally:
        server.stop()
