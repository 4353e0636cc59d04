"""What the attack tests share: hand-written uploads, posting them to a real server, what it stored (rows read back),
and an honest worker's part in a sharded grade (its claim, its real coordinator in a thread, its signed result)."""

from __future__ import annotations

import io
import json
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from grader.hosting.db.models import ShardJob, Submission
from grader.hosting.db.session import open_database
from grader.hosting.keyring.worker_signing import ensure_worker_key, sign_result
from grader.hosting.protocol.messages import Job, WorkerResult
from grader.hosting.worker.loop import Heartbeat, WorkerApi, worker_client
from grader.hosting.worker.shard_loop import ShardApi, coordinate, fingerprint_digest
from tests.hosting.support import Server, admin, claim_body
from tests.image_tars import image_tar, layer


def token_for(server: Server, name: str) -> str:
    return admin(server.state, "add-participant", name).strip()


def upload_of(manifest: dict[str, Any] | None = None, *, image: bytes | None = None, members: list[tuple[str, bytes]] = ()) -> bytes:  # type: ignore[assignment]
    """A .tar.gz upload written by hand (the client would refuse some of these before sending them)."""
    data = {"kind": "docker", "name": "attack", "mode": "retrieve", "image": "image.tar", "training": {"setting": "zero-shot", "datasets": []}}
    data.update(manifest or {})
    files = [("submission.json", json.dumps(data).encode()), *members]
    if image is not None:
        files.append(("image.tar", image))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, body in files:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


def post(server: Server, token: str, body: bytes) -> httpx.Response:
    return httpx.post(
        f"{server.url}/api/v1/submissions",
        content=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/gzip"},
        timeout=120,
    )


def stored_uploads(server: Server) -> list[str]:
    return sorted(p.name for p in (server.state / "uploads").glob("*.tar.gz")) + sorted(p.name for p in (server.state / "uploads" / "tmp").iterdir())


def submissions_of(server: Server, participant: str) -> list[dict[str, Any]]:
    return [row for row in json.loads(admin(server.state, "submissions", "--json")) if row["participant"] == participant]


BODY = layer({"run": bytes(range(256)) * 40})
BROKEN_IMAGES = {
    "missing layer": (image_tar([BODY, layer({"b": b"x"})], omit=("layer1",)), "is missing"),
    "truncated layer": (image_tar([BODY], stored_layers={0: BODY[: len(BODY) // 2]}), "is not a readable tar"),
    "non-JSON config": (image_tar([BODY], config_bytes=b"{not json"), "does not match its name's sha256"),
}


def submission_and_shard_jobs(state: Path, submission_id: str) -> tuple[Submission, list[ShardJob]]:
    """What the server's database holds of ``submission_id`` and its shard jobs (in id order), read in a connection of the test's own."""
    db = open_database(state, None)
    try:
        with db.session() as session:
            submission = session.get(Submission, submission_id)
            assert submission is not None
            jobs = list(session.scalars(select(ShardJob).where(ShardJob.submission_id == submission_id).order_by(ShardJob.id)))
            session.expunge_all()
            return submission, jobs
    finally:
        db.dispose()


class Coordinating(threading.Thread):
    """An honest worker's real coordinator of a claimed sharded attempt, in a thread: its result and when it returned."""

    def __init__(self, api: ShardApi, job: Job, upload: Path) -> None:
        super().__init__(daemon=True)
        self.api, self.job, self.upload = api, job, upload
        self.stop = threading.Event()
        self.result: WorkerResult | None = None
        self.ended = 0.0

    def run(self) -> None:
        self.result = coordinate(self.api, self.job, self.upload, self.stop.is_set)
        self.ended = time.monotonic()


def post_result(server: Server, token: str, keys: Path, job: Job, result: WorkerResult) -> str:
    """Sign the coordinator's result as the worker loop does and post it; the server's verdict."""
    result.signature = sign_result(
        ensure_worker_key(keys),
        submission_id=job.submission_id,
        attempt=job.attempt,
        upload_sha256=job.upload_sha256,
        facts=result.facts,
        runs=result.runs,
        failure_code=result.failure_code,
        message=result.message,
    )
    return WorkerApi(server.url, token).post_result(job.submission_id, result)


def claim_sharded_grade(server: Server, token: str, folder: Path, heartbeat_s: float) -> tuple[Job, Path, Heartbeat]:
    """An honest worker claims the next sharded submission (its jobs are planned), fetches its upload into ``folder``
    and keeps its lease alive (set the heartbeat's ``done`` to stop it). Its fingerprint, this machine's, is stated already."""
    http = worker_client(server.url, token)
    job = Job.model_validate(http.post("/api/v1/worker/claim", json=claim_body(fingerprint_digest(), 5)).json())
    assert job.sharded
    upload = folder / f"{job.submission_id}.tar.gz"
    upload.write_bytes(http.get(f"/api/v1/worker/jobs/{job.submission_id}/upload", params={"attempt": job.attempt}).content)
    http.close()
    beat = Heartbeat(WorkerApi(server.url, token), job.submission_id, job.attempt, heartbeat_s)
    beat.start()
    return job, upload, beat
