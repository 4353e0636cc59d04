"""What the attack tests share: hand-written uploads, posting them to a real server, what it stored (rows read back)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from grader.hosting.db.models import ShardJob, Submission
from grader.hosting.db.session import open_database
from tests.hosting.support import Server, admin
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
