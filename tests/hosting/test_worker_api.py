"""The worker API over HTTP on a real server (no local workers; the test plays two workers)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest

from grader.hosting.db.session import open_database
from grader.hosting.identity.participants import rekey_local_worker
from grader.hosting.participant.client import HostingClient
from tests.hosting.support import REPO, Server, admin, claim_body, stated_fingerprint, worker_headers, write_competition

pytestmark = pytest.mark.slow  # each test starts a server, a container or a subprocess


def worker_token(state: Path, name: str) -> str:
    db = open_database(state)
    with db.session() as session:
        token = rekey_local_worker(session, name)
    db.dispose()
    return token


def test_claim_heartbeat_upload_and_stale_results(tmp_path: Path) -> None:
    server = Server(write_competition(tmp_path / "c.toml", max_attempts=2), tmp_path / "state", workers=0).start()
    try:
        participant = admin(server.state, "add-participant", "gina").strip()
        # the OpenAPI page loads its assets from this server, never a CDN
        page = httpx.get(f"{server.url}/docs").text
        assert "/docs-assets/swagger-ui-bundle.js" in page and "cdn" not in page.lower() and "https://" not in page
        assert httpx.get(f"{server.url}/docs-assets/swagger-ui-bundle.js").status_code == 200
        assert "/api/v1/worker/claim" in httpx.get(f"{server.url}/openapi.json").json()["paths"]
        tokens = {name: worker_token(server.state, name) for name in ("remote-1", "remote-2")}
        one = httpx.Client(base_url=server.url, headers=worker_headers(tokens["remote-1"]), timeout=30)
        two = httpx.Client(base_url=server.url, headers=worker_headers(tokens["remote-2"]), timeout=30)
        # a participant token is not a worker token
        assert httpx.post(f"{server.url}/api/v1/worker/claim", json={"wait_s": 0}, headers=worker_headers(participant)).status_code == 401
        # each states its fingerprint (local workers: unsigned), then claims naming it
        fingerprint = {name: stated_fingerprint(server.url, token) for name, token in tokens.items()}
        assert one.post("/api/v1/worker/claim", json=claim_body(fingerprint["remote-1"])).status_code == 204

        view = HostingClient(server.url, participant).submit(REPO / "submissions_example" / "onnx-lsa")
        job = one.post("/api/v1/worker/claim", json=claim_body(fingerprint["remote-1"], 5)).json()
        assert (job["submission_id"], job["attempt"], job["split"], job["track"]) == (view["id"], 1, "test", "hidden")
        assert set(job["ranking_digests"]) == set(job["judged"]) == {"text2code", "code2code", "code2text"} and job["limits"]["time_limit_s"] == 60
        # the judged query ids, never the judgements; no pin of the split that would need them
        assert job["data_digests"] == {} and all(isinstance(i, str) for ids in job["judged"].values() for i in ids)
        # the upload, to the lease holder only, with the recorded digest
        assert two.get(f"/api/v1/worker/jobs/{view['id']}/upload", params={"attempt": 1}).status_code == 409
        body = one.get(f"/api/v1/worker/jobs/{view['id']}/upload", params={"attempt": 1}).content
        assert hashlib.sha256(body).hexdigest() == job["upload_sha256"] == view["sha256"]
        assert one.post(f"/api/v1/worker/jobs/{view['id']}/heartbeat", json={"attempt": 1}).status_code == 200
        # the result body is read as strictly as a file (grader.jsonio): a duplicate key or a NaN is refused and changes nothing
        for raw, why in (
            (b'{"attempt": 1, "attempt": 2, "failure_code": "INFRA"}', "key 'attempt' appears twice"),
            (b'{"attempt": 1, "failure_code": "INFRA", "facts": {"tasks": NaN}}', "NaN is not a valid score"),
        ):
            refused = one.post(f"/api/v1/worker/jobs/{view['id']}/result", content=raw, headers={"Content-Type": "application/json"})
            assert refused.status_code == 422 and refused.json()["detail"].startswith(f"request body: {why}"), refused.text
        # an INFRA result re-queues (attempt 1 of 2); the next claim is attempt 2
        assert (
            one.post(f"/api/v1/worker/jobs/{view['id']}/result", json={"attempt": 1, "failure_code": "INFRA", "message": "engine gone"}).json()[
                "status"
            ]
            == "requeued"
        )
        second = two.post("/api/v1/worker/claim", json=claim_body(fingerprint["remote-2"], 5)).json()
        assert second["attempt"] == 2
        # worker one's late heartbeat and result for attempt 1 are refused and change nothing
        assert one.post(f"/api/v1/worker/jobs/{view['id']}/heartbeat", json={"attempt": 1}).status_code == 409
        late = one.post(f"/api/v1/worker/jobs/{view['id']}/result", json={"attempt": 1, "failure_code": "OOM"})
        assert late.status_code == 409 and "discarded" in late.json()["detail"]
        assert HostingClient(server.url, participant).status(view["id"])["state"] == "running"
        # a second INFRA at the attempt limit ends `error`, which is never charged
        assert two.post(f"/api/v1/worker/jobs/{view['id']}/result", json={"attempt": 2, "failure_code": "INFRA"}).json() == {
            "status": "error",
            "state": "error",
        }
        final = HostingClient(server.url, participant).status(view["id"])
        assert (final["state"], final["failure_code"]) == ("error", "INFRA")
        quota = httpx.get(f"{server.url}/api/v1/quota", headers={"Authorization": f"Bearer {participant}"}).json()
        assert quota["hidden"]["used_24h"] == 0
        one.close()
        two.close()
    finally:
        server.stop()
