"""The distributed setting: `grader serve --broker` on PostgreSQL and Redis, two `grader worker --broker` processes, tiny images.

Each test starts its own redis-server and database, server and workers, all
on loopback; durations are bounded by the waits' timeouts.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import httpx
import pytest

from tests.hosting.distributed import TINY, TINY_SLEEP, deploy, tiny_submission
from tests.hosting.redis import redis_server  # noqa: F401 - a fixture
from tests.hosting.support import admin, wait_for

pytestmark = [pytest.mark.docker(TINY, TINY_SLEEP), pytest.mark.slow]


def test_two_workers_grade_sign_and_report(tmp_path: Path, docker_engine, redis_server, postgres_cluster) -> None:  # type: ignore[no-untyped-def]
    d = deploy(tmp_path, broker=redis_server.url, database=postgres_cluster.new_database(), workers=2)
    try:
        ids = []
        for who in ("ann", "ben"):
            _token, client = d.participant(who)
            ids += [client.submit(tiny_submission(tmp_path, f"{who}-{n}", TINY_SLEEP))["id"] for n in range(2)]
        rows = d.wait_all_terminal(ids, timeout=600)
        assert {row["state"] for row in rows.values()} == {"scored"}
        d.check_invariants(ids)
        assert all(d.lease_holder(i) is None for i in ids)  # no lease left behind
        # Both workers graded (a second job waits in the queue while the first worker is busy).
        logs = {w.name: w.log.read_text() for w in d.workers}
        assert all("claimed" in text for text in logs.values()), logs
        for worker in d.workers:  # key pair made on first start, private half 0600, public half recorded by the server
            mode = stat.S_IMODE(os.stat(worker.key_dir / "grader.key").st_mode)
            assert mode == 0o600
        listed = {row["name"]: row for row in json.loads(admin(d.server.state, "workers", "--json", database=d.server.database))}
        assert listed["w1"]["key"] and listed["w2"]["key"] and not listed["w1"]["local"]
        # /metrics: behind its own token, Prometheus text.
        assert httpx.get(f"{d.server.url}/metrics").status_code == 401
        token = admin(d.server.state, "metrics-token", database=d.server.database).strip()
        page = httpx.get(f"{d.server.url}/metrics", headers={"Authorization": f"Bearer {token}"})
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
        assert 'grader_submissions{state="scored"} 4.0' in page.text
        assert "grader_queue_depth 0.0" in page.text
        assert 'grader_running_jobs{worker="w1"} 0.0' in page.text
        published = next(line for line in page.text.splitlines() if line.startswith('grader_broker_dispatches{outcome="published"}'))
        assert float(published.split()[-1]) >= 4
    finally:
        for worker in d.workers:
            worker.stop()
        d.server.stop()


def test_kill9_of_a_celery_worker_mid_grade(tmp_path: Path, docker_engine, redis_server, postgres_cluster) -> None:  # type: ignore[no-untyped-def]
    d = deploy(tmp_path, broker=redis_server.url, database=postgres_cluster.new_database(), workers=2)
    try:
        _token, client = d.participant("cat")
        victim = client.submit(tiny_submission(tmp_path, "victim", TINY_SLEEP))["id"]
        holder = wait_for(lambda: d.lease_holder(victim), timeout=180, interval=0.1, what="a worker to claim")
        holder.kill9()
        rows = d.wait_all_terminal([victim], timeout=600)
        assert rows[victim]["state"] == "scored" and rows[victim]["attempt"] == 2
        assert "lease of attempt 1 expired (worker lost)" in admin(d.server.state, "history", victim, database=d.server.database)
        d.check_invariants([victim])
    finally:
        for worker in d.workers:
            worker.stop()
        d.server.stop()


def test_worker_hygiene_finds_the_uploaded_image_and_keeps_a_named_one(tmp_path: Path, docker_engine) -> None:  # type: ignore[no-untyped-def]
    from grader.hosting.participant.client import packed
    from grader.hosting.worker.hygiene import loaded_image_id, remove_submission_image

    with packed(tiny_submission(tmp_path, "h")) as archive:
        assert loaded_image_id(archive) == docker_engine.images.get(TINY).id
        remove_submission_image(archive)  # the engine also holds it as grader-test-tiny:1: kept
    assert docker_engine.images.get(TINY).tags == [TINY]
