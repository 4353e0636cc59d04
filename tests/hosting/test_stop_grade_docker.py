"""A grade the server no longer wants is stopped, in the real Docker sandbox: cancelled by the host, or its attempt gone stale.

The submission is `grader-test-tiny-long` (sleeps 600 s): without the stop the
container would run until the competition's time limit. In each case the
container is gone within a few heartbeats, nothing is posted for the stopped
attempt, the worker's staging is removed (each server and worker runs with
its own TMPDIR here, so the test can look), the quota is not charged, and the
same worker goes on grading. And a worker killed outright (kill -9) leaves no
container or staging behind: its grading child cleans up.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from grader.hosting.participant.client import HostingClient
from tests.hosting.distributed import TINY, deploy, tiny_submission
from tests.hosting.redis import redis_server  # noqa: F401 - a fixture
from tests.hosting.support import Server, admin, wait_for, write_competition
from tests.hosting.tcp_proxy import CuttableProxy
from tests.sandbox_support import image_of

TINY_LONG = image_of("tiny-long")
pytestmark = [pytest.mark.docker(TINY, TINY_LONG), pytest.mark.slow]

#: Heartbeats come every second (tests/hosting/support.FAST_QUEUE); the container must be gone within a few of them.
GONE_WITHIN_S = 8


def _containers_of(docker_engine: Any, image: str) -> list[Any]:
    image_id = docker_engine.images.get(image).id
    # sparse: no inspect per container, which would race the removal this test waits for (404 on a container just gone)
    return docker_engine.containers.list(all=True, sparse=True, filters={"ancestor": image_id})  # type: ignore[no-any-return]


def _staging_left(tmp: Path) -> list[str]:
    """What the worker and the grading core left in their temporary folder (work folders, staged data, /output images)."""
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith(("grader-worker-", "grader-stage-", "grader-output-", "grader-encode-")))


def _quota(url: str, token: str) -> dict[str, Any]:
    return httpx.get(f"{url}/api/v1/quota", headers={"Authorization": f"Bearer {token}"}).json()["hidden"]  # type: ignore[no-any-return]


def test_a_cancelled_grade_is_stopped_by_a_local_worker(tmp_path: Path, docker_engine, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    server = Server(write_competition(tmp_path / "c.toml"), tmp_path / "state", workers=1).start()
    try:
        token = admin(server.state, "add-participant", "cleo").strip()
        client = HostingClient(server.url, token)
        long_id = client.submit(tiny_submission(tmp_path, "long", TINY_LONG))["id"]
        wait_for(lambda: _containers_of(docker_engine, TINY_LONG), timeout=60, interval=0.1, what="the grading container")
        assert admin(server.state, "cancel", long_id).strip() == f"cancelled {long_id}"
        wait_for(lambda: not _containers_of(docker_engine, TINY_LONG), timeout=GONE_WITHIN_S, interval=0.1, what="the container to go")
        wait_for(lambda: not _staging_left(tmp), timeout=GONE_WITHIN_S, interval=0.1, what="the staging to go")
        assert client.status(long_id)["state"] == "cancelled"
        assert not (server.state / "results" / long_id).exists()  # nothing was posted for it
        assert _quota(server.url, token)["used_24h"] == 0  # a host cancellation is never charged
        # The worker is free again: the next submission is graded by it.
        next_id = client.submit(tiny_submission(tmp_path, "next", TINY))["id"]
        assert client.wait(next_id, timeout_s=120)["state"] == "scored"
        assert _quota(server.url, token)["used_24h"] == 1
        history = admin(server.state, "history", long_id)
        assert "-> cancelled" in history and "-> scored" not in history and "-> failed" not in history
        # A worker killed outright: its grading child sees it gone and removes the container itself.
        orphan_id = client.submit(tiny_submission(tmp_path, "orphan", TINY_LONG))["id"]
        wait_for(lambda: _containers_of(docker_engine, TINY_LONG), timeout=60, interval=0.1, what="the grading container")
        [worker_pid] = server.worker_pids()
        os.kill(worker_pid, signal.SIGKILL)
        wait_for(lambda: not _containers_of(docker_engine, TINY_LONG), timeout=GONE_WITHIN_S, interval=0.1, what="the orphan's container to go")
        wait_for(lambda: not _staging_left(tmp), timeout=GONE_WITHIN_S, interval=0.1, what="the orphan's staging to go")
        admin(server.state, "cancel", orphan_id)  # else the restarted worker grades attempt 2 for 600 s
    finally:
        server.stop()
    log = (server.state / "run" / "local-1.log").read_text()
    assert f"{long_id} attempt 1 is stale or cancelled: grade stopped, no result posted" in log


def test_a_stale_then_a_cancelled_grade_are_stopped_by_a_celery_worker(  # type: ignore[no-untyped-def]
    tmp_path: Path, docker_engine, monkeypatch, redis_server, postgres_cluster
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    d = deploy(tmp_path, broker=redis_server.url, database=postgres_cluster.new_database(), workers=0)
    proxy = CuttableProxy(d.server.port)
    try:
        far = d.add_worker("far", server_url=proxy.url)
        token, client = d.participant("nell")
        long_id = client.submit(tiny_submission(tmp_path, "long", TINY_LONG))["id"]
        wait_for(lambda: d.lease_holder(long_id) is far, timeout=60, interval=0.05, what="the worker to claim")
        wait_for(lambda: _containers_of(docker_engine, TINY_LONG), timeout=60, interval=0.1, what="the grading container")
        # Stale: cut the worker off until its lease expires and the reaper re-queues the job, then let it through again.
        proxy.cut()

        def requeued() -> bool:
            row = next(row for row in d.host_rows() if row["id"] == long_id)
            return row["state"] == "queued"

        wait_for(requeued, timeout=30, interval=0.2, what="the lease to expire")
        assert _containers_of(docker_engine, TINY_LONG)  # cut off, the worker still grades the stale attempt
        proxy.restore()
        # Its next heartbeat is answered "stale": the grade stops, nothing is posted; it then claims attempt 2 itself.
        wait_for(lambda: f"{long_id} attempt 1: abandoned" in far.log.read_text(), timeout=30, interval=0.2, what="attempt 1 to be stopped")
        wait_for(lambda: d.lease_holder(long_id) is far, timeout=60, interval=0.1, what="attempt 2 to be claimed")
        wait_for(lambda: _containers_of(docker_engine, TINY_LONG), timeout=60, interval=0.1, what="attempt 2's container")
        assert len(_containers_of(docker_engine, TINY_LONG)) == 1  # attempt 1's container is gone
        # Cancelled: the host cancels attempt 2.
        admin(d.server.state, "cancel", long_id, database=d.server.database)
        wait_for(lambda: not _containers_of(docker_engine, TINY_LONG), timeout=GONE_WITHIN_S, interval=0.1, what="the container to go")
        wait_for(
            lambda: f"{long_id} attempt 2: abandoned" in far.log.read_text(), timeout=GONE_WITHIN_S, interval=0.2, what="attempt 2 to be stopped"
        )
        wait_for(lambda: not _staging_left(tmp), timeout=GONE_WITHIN_S, interval=0.1, what="the staging to go")
        row = next(row for row in d.host_rows() if row["id"] == long_id)
        assert row["state"] == "cancelled" and row["attempt"] == 2
        assert not list((d.server.state / "results").glob(f"{long_id}/*"))  # neither attempt posted a result
        assert _quota(d.server.url, token)["used_total"] == 0
        next_id = client.submit(tiny_submission(tmp_path, "next", TINY))["id"]
        state = d.wait_all_terminal([next_id], timeout=120)[next_id]["state"]
        assert state == "scored", admin(d.server.state, "history", next_id, database=d.server.database)
        d.check_invariants([next_id])
    finally:
        proxy.cut()
        for worker in d.workers:
            worker.stop()
        d.server.stop()
