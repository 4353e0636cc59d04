"""No GET writes anything: the database and the state folder are byte-identical before and after every read route.

Every GET route of the app (API, web pages, report downloads, metrics, the
worker's upload) is requested, as anonymous, as each participant (bearer token
and signed-in web session) and as a worker, before and after the end of the
competition; on SQLite and a real PostgreSQL.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from grader.hosting.api.app import create_app
from grader.hosting.db.models import Base
from tests.hosting.support import admin, worker_headers
from tests.hosting.world import World

pytestmark = pytest.mark.board(seeded=True)


def state_files(state: Path) -> dict[str, str]:
    """Every file of the state folder by path: its mode and the digest of its bytes.

    SQLite's ``-shm`` file is left out: it is the WAL's shared-memory index, where readers record their
    read marks; the database itself (main file and WAL) is compared byte for byte.
    """
    return {
        str(path.relative_to(state)): f"{path.stat().st_mode:o} {hashlib.sha256(path.read_bytes()).hexdigest()}"
        for path in sorted(state.rglob("*"))
        if path.is_file() and not path.name.endswith("-shm")
    }


def table_rows(world: World) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, in primary-key order (what PostgreSQL holds outside the state folder)."""
    with world.ctx.db.session() as session:
        return {
            table.name: [tuple(row) for row in session.execute(text(f"SELECT * FROM {table.name} ORDER BY 1")).all()]
            for table in Base.metadata.sorted_tables
        }


def snapshot(world: World) -> tuple[dict[str, str], dict[str, list[tuple[Any, ...]]]]:
    return state_files(world.state.root), table_rows(world)


def _csrf(client: TestClient, page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', client.get(page).text)
    assert match is not None
    return match.group(1)


def signed_in_clients(world: World) -> dict[str, TestClient]:
    """A client signed in through the page per participant (signing in stores a session: a write, done before the reads)."""
    clients = {}
    for name, token in world.tokens.items():
        web = TestClient(create_app(world.ctx))
        signin = web.post("/signin", data={"token": token, "csrf": _csrf(web, "/signin")}, follow_redirects=False)
        assert signin.status_code == 303, name
        clients[name] = web
    return clients


def read_everything(world: World, client: TestClient, metrics_token: str, web: dict[str, TestClient]) -> set[str]:
    """GET every read route as every caller (``web``: each participant's signed-in client); the route templates requested."""
    ids = [s.id for s in world.submissions]
    requested: set[str] = set()

    def get(template: str, path: str | None = None, headers: dict[str, str] | None = None, via: TestClient = client) -> None:
        response = via.get(path or template, headers=headers or {})
        assert response.status_code < 500, (path or template, response.status_code, response.text[:200])
        requested.add(template)

    for path in (
        "/",
        "/signin",
        "/signup",
        "/me",
        "/assets/board.css",
        "/assets/upload.js",
        "/assets/tus.min.js",
        "/docs",
        "/docs-init.js",
        "/openapi.json",
        "/healthz",
        "/host-key.pub",
    ):
        get(path)
    for template in ("/api/v1/competition", "/api/v1/partition"):
        get(template)
    for part in ("public", "private"):
        get("/", f"/?part={part}")
        get("/api/v1/leaderboard", f"/api/v1/leaderboard?part={part}")
        get("/leaderboard.csv", f"/leaderboard.csv?part={part}")
    for i in ids:
        get("/api/v1/leaderboard/reports/{submission_id}", f"/api/v1/leaderboard/reports/{i}")
    get("/metrics", headers={"Authorization": f"Bearer {metrics_token}"})
    worker = worker_headers(world.worker_token)
    for i in ids:
        get("/api/v1/worker/jobs/{submission_id}/upload", f"/api/v1/worker/jobs/{i}/upload?attempt=1", headers=worker)
    for what in ("upload", "queries"):  # shard jobs: none here, so each answers 409
        get(f"/api/v1/worker/shards/{{job_id}}/{what}", f"/api/v1/worker/shards/1/{what}?tries=1", headers=worker)
    for name, token in world.tokens.items():
        bearer = {"Authorization": f"Bearer {token}"}
        for template in ("/api/v1/submissions", "/api/v1/quota", "/api/v1/finals", "/api/v1/notify", "/api/v1/team"):
            get(template, headers=bearer)
        get("/api/v1/uploads/{key}", f"/api/v1/uploads/{'0' * 32}", headers=bearer)  # no such upload: 404, nothing written
        for i in ids:
            for tail in ("", "/report", "/logs"):
                get(f"/api/v1/submissions/{{submission_id}}{tail}", f"/api/v1/submissions/{i}{tail}", headers=bearer)
        get("/me", via=web[name])
        for i in ids:
            get("/me/submissions/{submission_id}/report", f"/me/submissions/{i}/report", via=web[name])
    return requested


def test_no_read_route_writes_the_database_or_the_state_folder(world: World) -> None:
    metrics_token = admin(world.state.root, "metrics-token", database=world.database).strip()
    client = TestClient(create_app(world.ctx))
    routes = {r.path for r in client.app.routes if "GET" in getattr(r, "methods", set())}
    for phase in ("before the end", "after the end"):
        if phase == "after the end":
            admin(world.state.root, "end", "--yes", database=world.database)
        web = signed_in_clients(world)
        before = snapshot(world)
        requested = read_everything(world, client, metrics_token, web)
        after = snapshot(world)
        assert after[0] == before[0], f"{phase}: a GET changed the state folder"
        assert after[1] == before[1], f"{phase}: a GET changed the database"
        assert routes <= requested | {"/docs/oauth2-redirect", "/redoc"}, routes - requested
    # the downloads read above are the reports signed at acceptance, public part first, full after the end
    alice = world.by_name("alice-encoder-v2")
    envelope = client.get(f"/api/v1/submissions/{alice.id}/report", headers={"Authorization": f"Bearer {world.tokens['alice']}"})
    assert envelope.status_code == 200 and b"partition_commitment" not in envelope.content
