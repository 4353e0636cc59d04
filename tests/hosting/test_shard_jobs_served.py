"""Sharded ONNX grades through `grader serve` (issue 23 item 1): shard jobs in the database, run by two local workers.

One server (SQLite) with ``[sharding] shard_documents`` set and two local workers grades the
example ONNX encoder on mini twice: each task's query job and shard jobs are rows claimed over
the worker API, the server merges the shards' runs and scores them, and both served reports
equal ``grader run`` of the same submission without sharding, measure for measure and per-query
value for per-query value. During the second grade one shard job's process is killed (SIGKILL):
that job alone is run again (its second try), the others keep their first.

mini's corpora (about 3,600 documents a task) are one encoding chunk (8,192), so each task is
one shard here: more shards per task are tested in-process (tests/test_shard_jobs_work.py).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from grader.hosting.client import HostingClient
from grader.hosting.db.models import ShardJob, Submission
from grader.hosting.db.session import open_database
from tests.hosting.support import REPO, Server, admin, grader_cli, write_competition

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"


def _kill_a_shard_process(server: Server, timeout: float = 120) -> int:
    """SIGKILL the first forked child of a local worker seen (a shard job's process: sharded grades fork nothing else)."""
    workers = set(server.worker_pids())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) in workers:
                os.kill(int(entry.name), signal.SIGKILL)
                return int(entry.name)
        time.sleep(0.02)
    raise AssertionError("no shard process seen")


def _shard_jobs(state: Path, submission_id: str) -> tuple[int, list[ShardJob]]:
    db = open_database(state, None)
    try:
        with db.session() as session:
            submission = session.get(Submission, submission_id)
            assert submission is not None
            return submission.attempt, list(session.scalars(select(ShardJob).where(ShardJob.submission_id == submission_id)).all())
    finally:
        db.dispose()


def _served_report(server: Server, submission_id: str, env: dict[str, str], folder: Path) -> dict[str, Any]:
    got = grader_cli("status", submission_id, "--report", str(folder / f"{submission_id}.dsse.json"), "--server", server.url, env=env)
    assert got.returncode == 0, got.stderr
    verified = grader_cli("verify", str(folder / f"{submission_id}.dsse.json"), "--key", str(folder / "host.pub"), "--json")
    assert verified.returncode == 0, verified.stderr
    return dict(json.loads(verified.stdout))


def test_sharded_grades_serve_the_unsharded_report_and_a_killed_shard_runs_again_alone(tmp_path: Path) -> None:
    competition = write_competition(tmp_path / "c.toml", tables={"sharding": {"shard_documents": 1000}})
    server = Server(competition, tmp_path / "state", workers=2).start()
    try:
        token = admin(server.state, "add-participant", "alice").strip()
        alice = {"GRADER_TOKEN": token}
        plain = grader_cli("submit", str(EXAMPLE), "--server", server.url, "--wait", env=alice)
        assert plain.returncode == 0, plain.stderr + server.log.read_text()[-3000:]
        plain_id = plain.stdout.split()[0]
        client = HostingClient(server.url, token)
        killed_id = client.submit(EXAMPLE)["id"]
        _kill_a_shard_process(server)
        assert client.wait(killed_id, poll_s=0.2, timeout_s=300)["state"] == "scored", server.log.read_text()[-3000:]
        direct = grader_cli("run", str(EXAMPLE), "--benchmark", "mini", "--split", "test", "--sandbox", "none", "--out", str(tmp_path / "direct"))
        assert direct.returncode == 0, direct.stderr
        expected = json.loads((tmp_path / "direct" / "report.json").read_text())
        (tmp_path / "host.pub").write_bytes(httpx.get(f"{server.url}/host-key.pub").content)
        admin(server.state, "end", "--yes")
        reports = [_served_report(server, submission_id, alice, tmp_path) for submission_id in (plain_id, killed_id)]
    finally:
        server.stop()
    for report in reports:
        assert report["aggregate"] == expected["aggregate"]
        for key in ("measures", "per_query", "queries"):
            assert {name: entry[key] for name, entry in report["tasks"].items()} == {name: entry[key] for name, entry in expected["tasks"].items()}, (
                key
            )
        assert report["subject"]["digest"] == expected["subject"]["digest"]
    tasks = sorted(expected["tasks"])
    for submission_id, retried in ((plain_id, 0), (killed_id, 1)):
        attempt, jobs = _shard_jobs(server.state, submission_id)
        assert attempt == 1  # charged once: one attempt; its shard jobs are rows of it
        assert sorted((job.task, job.number) for job in jobs) == sorted((task, n) for task in tasks for n in (-1, 0))
        assert all(job.state == "done" for job in jobs) and len({job.fingerprint for job in jobs}) == 1
        assert sorted(job.tries for job in jobs) == [1] * (len(jobs) - retried) + [2] * retried, [(j.task, j.number, j.tries) for j in jobs]
