"""Sharded ONNX grades through `grader serve` (issue 23 item 1): shard jobs in the database, run by two local workers.

One server (SQLite) with ``[sharding] shard_documents`` set and two local workers grades the
example ONNX encoder on mini: each task's query job and shard jobs are rows claimed over the
worker API, the server merges the shards' runs and scores them, and the served report equals
``grader run`` of the same submission without sharding, measure for measure and per-query value
for per-query value. mini's corpora (about 3,600 documents a task) are one encoding chunk (8,192),
so each task is one shard here: more shards per task are tested in-process
(tests/test_shard_jobs_work.py), where the chunk is small.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from grader.hosting.db.models import ShardJob, Submission
from grader.hosting.db.session import open_database
from tests.hosting.support import REPO, Server, admin, grader_cli, write_competition

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"


def test_a_sharded_grade_serves_the_unsharded_report(tmp_path: Path) -> None:
    competition = write_competition(tmp_path / "c.toml", tables={"sharding": {"shard_documents": 1000}})
    server = Server(competition, tmp_path / "state", workers=2).start()
    try:
        alice = {"GRADER_TOKEN": admin(server.state, "add-participant", "alice").strip()}
        scored = grader_cli("submit", str(EXAMPLE), "--server", server.url, "--wait", env=alice)
        assert scored.returncode == 0, scored.stderr + server.log.read_text()[-3000:]
        scored_id = scored.stdout.split()[0]
        direct = grader_cli("run", str(EXAMPLE), "--benchmark", "mini", "--split", "test", "--sandbox", "none", "--out", str(tmp_path / "direct"))
        assert direct.returncode == 0, direct.stderr
        expected = json.loads((tmp_path / "direct" / "report.json").read_text())
        (tmp_path / "host.pub").write_bytes(httpx.get(f"{server.url}/host-key.pub").content)
        admin(server.state, "end", "--yes")
        got = grader_cli("status", scored_id, "--report", str(tmp_path / "report.dsse.json"), "--server", server.url, env=alice)
        assert got.returncode == 0, got.stderr
        verified = grader_cli("verify", str(tmp_path / "report.dsse.json"), "--key", str(tmp_path / "host.pub"), "--json")
        assert verified.returncode == 0, verified.stderr
        report = json.loads(verified.stdout)
    finally:
        server.stop()
    assert report["aggregate"] == expected["aggregate"]
    for key in ("measures", "per_query", "queries"):
        assert {name: entry[key] for name, entry in report["tasks"].items()} == {name: entry[key] for name, entry in expected["tasks"].items()}, key
    assert report["subject"]["digest"] == expected["subject"]["digest"]
    db = open_database(server.state, None)
    with db.session() as session:
        submission = session.get(Submission, scored_id)
        assert submission is not None and submission.attempt == 1  # charged once: one attempt, its shards are rows of it
        jobs = session.scalars(select(ShardJob).where(ShardJob.submission_id == scored_id)).all()
    db.dispose()
    tasks = sorted(expected["tasks"])
    assert sorted((job.task, job.number) for job in jobs) == sorted((task, n) for task in tasks for n in (-1, 0))
    assert all(job.state == "done" and job.tries == 1 for job in jobs)
    assert len({job.fingerprint for job in jobs}) == 1
