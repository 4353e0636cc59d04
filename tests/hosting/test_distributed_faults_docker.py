"""Faults in the distributed setting (PostgreSQL, Redis, Celery, `grader worker` processes), each bounded in time.

In every case: every submission ends, none is scored twice, every published
report verifies under the host key (Deployment.check_invariants).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.hosting.distributed import TINY, TINY_SLEEP, Deployment, deploy, tiny_submission
from tests.hosting.postgres import _as_postgres
from tests.hosting.redis import redis_server  # noqa: F401 - a fixture
from tests.hosting.support import admin, wait_for
from tests.hosting.tcp_proxy import CuttableProxy

pytestmark = [pytest.mark.docker(TINY, TINY_SLEEP), pytest.mark.slow]


def _stop(d: Deployment) -> None:
    for worker in d.workers:
        worker.stop()
    d.server.stop()


def _submit_some(d: Deployment, tmp_path: Path, who: str, count: int) -> list[str]:
    _token, client = d.participant(who)
    return [client.submit(tiny_submission(tmp_path, f"{who}-{n}", TINY_SLEEP))["id"] for n in range(count)]


def test_redis_restarted_during_a_run(tmp_path: Path, docker_engine, redis_server, postgres_cluster) -> None:  # type: ignore[no-untyped-def]
    d = deploy(tmp_path, broker=redis_server.url, database=postgres_cluster.new_database(), workers=2)
    try:
        ids = _submit_some(d, tmp_path, "dan", 3)
        wait_for(lambda: any(d.lease_holder(i) for i in ids), timeout=180, interval=0.1, what="a grading")
        redis_server.stop()  # queued wake-ups are lost with it (no persistence)
        _token, client = d.participant("eve")
        during = [client.submit(tiny_submission(tmp_path, f"eve-{n}", TINY))["id"] for n in range(2)]  # uploads still accepted
        time.sleep(2)
        redis_server.start()
        rows = d.wait_all_terminal(ids + during, timeout=600)
        assert {row["state"] for row in rows.values()} == {"scored"}
        d.check_invariants(ids + during)
        assert "not published" in d.server.log.read_text()  # the lost dispatches were re-sent by the reaper
    finally:
        _stop(d)


def test_postgresql_restarted_during_a_run(tmp_path: Path, docker_engine, redis_server, postgres_cluster) -> None:  # type: ignore[no-untyped-def]
    d = deploy(tmp_path, broker=redis_server.url, database=postgres_cluster.new_database(), workers=2)
    try:
        ids = _submit_some(d, tmp_path, "fay", 3)
        wait_for(lambda: any(d.lease_holder(i) for i in ids), timeout=180, interval=0.1, what="a grading")
        pg_ctl = str(postgres_cluster.bin / "pg_ctl")
        subprocess.run(_as_postgres([pg_ctl, "-D", str(postgres_cluster.data), "-m", "immediate", "stop"]), check=True, capture_output=True)
        time.sleep(2)
        postgres_cluster.start()
        rows = d.wait_all_terminal(ids, timeout=600)
        assert {row["state"] for row in rows.values()} == {"scored"}
        d.check_invariants(ids)
    finally:
        _stop(d)


def test_postgresql_killed_during_a_run(tmp_path: Path, docker_engine, redis_server, private_postgres_cluster) -> None:  # type: ignore[no-untyped-def]
    """kill -9 of the postmaster and all its backends mid-run (a crash, not a shutdown), then a restart with crash recovery."""
    cluster = private_postgres_cluster
    d = deploy(tmp_path, broker=redis_server.url, database=cluster.new_database(), workers=2)
    try:
        ids = _submit_some(d, tmp_path, "kit", 4)
        wait_for(lambda: any(d.lease_holder(i) for i in ids), timeout=180, interval=0.1, what="a grading")
        killed = cluster.kill9()
        assert len(killed) > 1  # the postmaster and its backends (the server's and the test's connections among them)
        time.sleep(3)  # heartbeats, result posts, claims and the reaper all fail meanwhile
        cluster.start()
        assert "database system was interrupted" in (cluster.root / "log").read_text()  # it recovered from a crash
        _token, client = d.participant("lou")
        ids.append(client.submit(tiny_submission(tmp_path, "lou-after", TINY))["id"])  # the server works again
        rows = d.wait_all_terminal(ids, timeout=600)
        assert {row["state"] for row in rows.values()} == {"scored"}
        d.check_invariants(ids)
    finally:
        _stop(d)


def test_server_restarted_during_a_run(tmp_path: Path, docker_engine, redis_server, postgres_cluster) -> None:  # type: ignore[no-untyped-def]
    d = deploy(tmp_path, broker=redis_server.url, database=postgres_cluster.new_database(), workers=2)
    try:
        ids = _submit_some(d, tmp_path, "gus", 3)
        wait_for(lambda: any(d.lease_holder(i) for i in ids), timeout=180, interval=0.1, what="a grading")
        d.server.kill9()
        time.sleep(1)
        d.server.start()
        rows = d.wait_all_terminal(ids, timeout=600)
        assert {row["state"] for row in rows.values()} == {"scored"}
        d.check_invariants(ids)
    finally:
        _stop(d)


def test_worker_cut_off_from_the_server_its_late_result_is_refused(tmp_path: Path, docker_engine, redis_server, postgres_cluster) -> None:  # type: ignore[no-untyped-def]
    d = deploy(tmp_path, broker=redis_server.url, database=postgres_cluster.new_database(), workers=0)
    proxy = CuttableProxy(d.server.port)
    try:
        far = d.add_worker("far", server_url=proxy.url)
        [victim] = _submit_some(d, tmp_path, "hal", 1)
        wait_for(lambda: d.lease_holder(victim) is far, timeout=180, interval=0.05, what="the far worker to claim")
        sleeper = docker_engine.images.get(TINY_SLEEP).id
        wait_for(
            lambda: docker_engine.containers.list(sparse=True, filters={"ancestor": sleeper}),
            timeout=120,
            interval=0.05,
            what="the grading container",
        )
        proxy.cut()  # heartbeats and the result post now fail; the far worker retries with back-off
        near = d.add_worker("near")
        rows = d.wait_all_terminal([victim], timeout=600)  # the lease expired, the job was re-attempted by the near worker
        assert rows[victim]["state"] == "scored" and rows[victim]["attempt"] == 2
        proxy.restore()
        wait_for(lambda: f"{victim} attempt 1: stale" in far.log.read_text(), timeout=180, interval=0.5, what="the late result to be refused")
        history = admin(d.server.state, "history", victim, database=d.server.database)
        assert "lease of attempt 1 expired" in history and f"worker {near.name}: attempt 2" in history  # named as reports name it
        d.check_invariants([victim])
        assert near.name in json.dumps(json.loads((next((d.server.state / "results" / victim).glob("2/report.json"))).read_text())["labels"])
    finally:
        proxy.cut()
        _stop(d)


def test_a_submission_that_kills_its_worker_every_time(tmp_path: Path, docker_engine, redis_server, postgres_cluster) -> None:  # type: ignore[no-untyped-def]
    """The host-killing submission is simulated: the test kill -9s whichever worker grades it (a real one would OOM the machine)."""
    d = deploy(tmp_path, broker=redis_server.url, database=postgres_cluster.new_database(), workers=2, max_attempts=2)
    try:
        token, client = d.participant("ivy")
        killer = client.submit(tiny_submission(tmp_path, "killer", TINY_SLEEP))["id"]
        fine = client.submit(tiny_submission(tmp_path, "fine", TINY))["id"]
        deadline = time.monotonic() + 150
        killed: set[int] = set()
        while time.monotonic() < deadline:
            row = next(row for row in d.host_rows() if row["id"] == killer)
            if row["state"] in ("scored", "failed", "error", "cancelled"):
                break
            holder = d.lease_holder(killer) if row["state"] == "running" and row["attempt"] not in killed else None
            if holder is not None and holder.process is not None and holder.process.poll() is None:
                holder.kill9()  # once per attempt: the lease still names it until it expires
                killed.add(row["attempt"])
                holder.start()  # the host's supervisor restarts it
            time.sleep(0.1)
        rows = d.wait_all_terminal([killer, fine], timeout=600)
        assert rows[killer]["state"] == "error" and rows[killer]["failure_code"] == "INFRA" and killed == {1, 2}
        assert rows[fine]["state"] == "scored"
        quota = httpx.get(f"{d.server.url}/api/v1/quota", headers={"Authorization": f"Bearer {token}"}).json()
        assert quota["hidden"]["used_total"] == 1  # the killer is not charged: only the fine one counts
        d.check_invariants([killer, fine])
    finally:
        _stop(d)
