"""Against a real `grader serve` on real sockets: a remote worker without a recorded key takes no job.

Before: a remote worker registered without a public key (its token stolen before its first
start, say) could claim jobs (each claim cost the submission an attempt, its result being refused)
and download participants' uploads. After: 403 on claim and on upload until its key is recorded;
once recorded (first use, or by the host) it works as before.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest

from grader.hosting.keyring.worker_signing import ensure_worker_key, worker_public_key_path
from grader.hosting.worker.shard_loop import fingerprint_digest
from tests.hosting.attack_support import BODY, post, upload_of
from tests.hosting.support import Server, admin, claim_body, stated_fingerprint, worker_headers, write_competition
from tests.image_tars import image_tar

pytestmark = pytest.mark.slow


def test_a_remote_worker_without_a_recorded_key_cannot_claim_or_download(tmp_path: Path) -> None:
    server = Server(write_competition(tmp_path / "c.toml"), tmp_path / "state", workers=0).start()
    try:
        participant = admin(server.state, "add-participant", "pat").strip()
        ensure_worker_key(tmp_path / "keyed")
        keyed = admin(server.state, "add-worker", "keyed", "--public-key", str(worker_public_key_path(tmp_path / "keyed"))).strip()
        unkeyed = admin(server.state, "add-worker", "unkeyed").strip()
        clients = {
            name: httpx.Client(base_url=server.url, headers=worker_headers(token), timeout=30)
            for name, token in (("keyed", keyed), ("unkeyed", unkeyed))
        }
        submitted = post(server, participant, upload_of(image=image_tar([BODY])))
        assert submitted.status_code == 201, submitted.text
        sid = submitted.json()["id"]

        refused = clients["unkeyed"].post("/api/v1/worker/claim", json=claim_body(fingerprint_digest(), 1))
        assert refused.status_code == 403 and "public key is not registered" in refused.json()["detail"]
        assert "state queued" in admin(server.state, "history", sid).replace("->", "state")  # the claim took nothing
        keyed_fingerprint = stated_fingerprint(server.url, keyed, ensure_worker_key(tmp_path / "keyed"))
        job = clients["keyed"].post("/api/v1/worker/claim", json=claim_body(keyed_fingerprint, 5)).json()
        assert (job["submission_id"], job["attempt"]) == (sid, 1)  # the refused claim cost no attempt
        assert clients["unkeyed"].get(f"/api/v1/worker/jobs/{sid}/upload", params={"attempt": 1}).status_code == 403
        body = clients["keyed"].get(f"/api/v1/worker/jobs/{sid}/upload", params={"attempt": 1}).content
        assert hashlib.sha256(body).hexdigest() == job["upload_sha256"]

        # Once its key is recorded (first use), the same worker may take jobs: 204, none queued now.
        ensure_worker_key(tmp_path / "late")
        pem = worker_public_key_path(tmp_path / "late").read_text(encoding="ascii")
        assert clients["unkeyed"].post("/api/v1/worker/key", json={"public_key": pem}).json() == {"status": "recorded"}
        late = stated_fingerprint(server.url, unkeyed, ensure_worker_key(tmp_path / "late"))  # signed with the key just recorded
        assert clients["unkeyed"].post("/api/v1/worker/claim", json=claim_body(late)).status_code == 204
    finally:
        server.stop()
