"""Against a real `grader serve`: refused uploads and free platform failures are limited per participant.

Before: an invalid upload cost nothing (each was unpacked, checked and refused 422, any number of
times), and a submission ending ``error`` (INFRA, never charged) neither. After: per rolling hour,
refused uploads plus ``error`` outcomes beyond ``infra_per_hour`` reach ``refusals_per_hour``, then
the participant's next uploads are refused 429, before their body is read, with ``Retry-After``.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from grader.hosting.db.session import open_database
from grader.hosting.identity.participants import rekey_local_worker
from tests.hosting.attack_support import BODY, BROKEN_IMAGES, post, upload_of
from tests.hosting.support import Server, admin, claim_body, stated_fingerprint, worker_headers, write_competition
from tests.image_tars import image_tar

pytestmark = pytest.mark.slow
LIMIT = 2


def garbage_post(server: Server, token: str) -> httpx.Response:
    """An upload that is not even an archive: 422 if read, so a 429 shows it was refused unread."""
    return post(server, token, b"x" * 100)


def test_refused_uploads_and_platform_failures_are_limited_per_participant(tmp_path: Path) -> None:
    quotas = {"per_day": 20, "total": 20, "concurrent": 20, "refusals_per_hour": LIMIT, "infra_per_hour": 0}
    server = Server(write_competition(tmp_path / "c.toml", max_attempts=1, tables={"quotas": quotas}), tmp_path / "state", workers=0).start()
    try:
        prober, unlucky, bystander = (admin(server.state, "add-participant", name).strip() for name in ("prober", "unlucky", "bystander"))
        # Refused uploads: LIMIT are read and refused 422, the next is refused unread.
        broken = upload_of(image=BROKEN_IMAGES["missing layer"][0])
        assert [post(server, prober, broken).status_code for _ in range(LIMIT)] == [422] * LIMIT
        limited = garbage_post(server, prober)
        assert limited.status_code == 429 and "too many refused uploads" in limited.json()["detail"], limited.text
        assert 0 < int(limited.headers["Retry-After"]) <= 3600
        assert post(server, prober, upload_of(image=image_tar([BODY]))).status_code == 429  # a valid one too, until the hour passes
        assert garbage_post(server, bystander).status_code == 422  # per participant

        # Platform failures: with infra_per_hour = 0 each submission ending `error` counts.
        db = open_database(server.state)
        with db.session() as session:
            worker_token = rekey_local_worker(session, "local-test")
        db.dispose()
        worker = httpx.Client(base_url=server.url, headers=worker_headers(worker_token), timeout=30)
        bound = stated_fingerprint(server.url, worker_token)  # a local worker: unsigned
        for _ in range(LIMIT):
            sid = post(server, unlucky, upload_of(image=image_tar([BODY]))).json()["id"]
            job = worker.post("/api/v1/worker/claim", json=claim_body(bound, 5)).json()
            assert job["submission_id"] == sid
            verdict = worker.post(f"/api/v1/worker/jobs/{sid}/result", json={"attempt": 1, "failure_code": "INFRA", "message": "engine gone"}).json()
            assert verdict["state"] == "error"
        quota = httpx.get(f"{server.url}/api/v1/quota", headers={"Authorization": f"Bearer {unlucky}"}).json()["hidden"]
        assert quota["used_24h"] == 0  # never charged...
        limited = garbage_post(server, unlucky)
        assert limited.status_code == 429 and f"{LIMIT} ended by a platform failure" in limited.json()["detail"], limited.text  # ...but not free
    finally:
        server.stop()
