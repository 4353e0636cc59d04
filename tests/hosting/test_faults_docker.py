"""Crashes during grading, in the real Docker sandbox: every submission still ends, is scored once, charged once."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx
import pytest

from grader.hosting.participant.client import HostingClient
from tests.hosting.support import REPO, Server, admin, wait_for, write_competition
from tests.sandbox_support import RUNNER_IMAGE

pytestmark = [pytest.mark.docker(RUNNER_IMAGE), pytest.mark.slow]
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"


def host_view(server: Server, submission_id: str) -> dict:
    rows = json.loads(admin(server.state, "submissions", "--json"))
    return next(row for row in rows if row["id"] == submission_id)


def _exited(pid: int) -> bool:
    """Whether process ``pid`` is gone or a zombie (read without racing its exit)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def running(client: HostingClient, submission_id: str) -> bool:
    return client.status(submission_id)["state"] == "running"


def test_kill9_of_a_worker_mid_grade(tmp_path: Path, docker_engine) -> None:  # type: ignore[no-untyped-def]
    server = Server(write_competition(tmp_path / "c.toml"), tmp_path / "state", workers=1).start()
    try:
        token = admin(server.state, "add-participant", "erin").strip()
        client = HostingClient(server.url, token)
        submission_id = client.submit(EXAMPLE)["id"]
        wait_for(lambda: running(client, submission_id), timeout=180, interval=0.05, what="running")
        [pid] = server.worker_pids()
        os.kill(pid, signal.SIGKILL)
        final = client.wait(submission_id, timeout_s=900)
        assert final["state"] == "scored" and final["score"] is not None
        assert host_view(server, submission_id)["attempt"] == 2
        history = admin(server.state, "history", submission_id)
        assert "lease of attempt 1 expired (worker lost)" in history
        assert history.count("-> scored") == 1
        quota = httpx.get(f"{server.url}/api/v1/quota", headers={"Authorization": f"Bearer {token}"}).json()
        assert quota["hidden"]["used_24h"] == 1 and quota["hidden"]["used_total"] == 1
        assert [p.name for p in (server.state / "results" / submission_id).iterdir()] == ["2"]
    finally:
        server.stop()


def test_kill9_of_the_server_during_grading(tmp_path: Path, docker_engine) -> None:  # type: ignore[no-untyped-def]
    server = Server(write_competition(tmp_path / "c.toml", tables={"quotas": {"concurrent": 3}}), tmp_path / "state", workers=1).start()
    token = admin(server.state, "add-participant", "frank").strip()
    client = HostingClient(server.url, token)
    first = client.submit(EXAMPLE)["id"]
    second = client.submit(EXAMPLE)["id"]  # waits in the queue behind the first
    wait_for(lambda: running(client, first), timeout=180, interval=0.05, what="running")
    [old_worker] = server.worker_pids()
    server.kill9()
    wait_for(lambda: _exited(old_worker), timeout=120, what="the orphaned worker to exit")
    try:
        server.start()
        for submission_id in (first, second):
            assert client.wait(submission_id, timeout_s=900)["state"] == "scored"
        assert admin(server.state, "history", first).count("-> scored") == 1
    finally:
        server.stop()
