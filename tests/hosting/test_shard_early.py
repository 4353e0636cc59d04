"""Against a real `grader serve` on real sockets: a shard job starts before its query vectors exist, and no pool deadlocks.

* Two keyed workers: one takes a task's query job over the shard routes and holds it; the other, the real worker
  code (:func:`grader.hosting.worker.shard_loop.work_one`, the model in the runner container), takes the task's shard
  while the query job still runs: the database shows the shard job running with its upload fetched (its work begun)
  while the query job is running, and the queries route answers 202 (not yet) until the vectors are put; then the
  shard searches with them and the real coordinator's result, signed and posted, is accepted and scored.
* A pool of ONE worker (``grader serve --workers 1``, the real worker process) finishes a sharded grade: the only
  worker coordinates, takes the query job, then the shard, and the grade ends scored; its signed report carries the
  cost block of its two jobs' figures merged (labelled the workers' word, within the sandbox's bounds; no timing asserted).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from grader.hosting.db.models import Attempt, Result, Submission
from grader.hosting.db.session import open_database
from grader.hosting.environment import WORKER_DATA
from grader.hosting.keyring.worker_signing import ensure_worker_key, worker_public_key_path
from grader.hosting.participant.client import HostingClient
from grader.hosting.protocol.shard_messages import ShardJobMessage
from grader.hosting.worker.loop import worker_client
from grader.hosting.worker.shard_loop import ShardApi, _compute, coordinate, fingerprint_digest, work_one
from tests.hosting.attack_support import claim_sharded_grade, post_result, submission_and_shard_jobs
from tests.hosting.support import REPO, Server, admin, stated_fingerprint, wait_for, write_competition

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
#: One task of one shard (8,192 documents a chunk): a query job and a shard job. A long lease: only what the test does moves.
TABLES = {"sharding": {"shard_documents": 8192}, "queue": {"lease_s": 600, "heartbeat_s": 2}}


def _keyed_worker(server: Server, name: str, folder: Path) -> tuple[str, Path]:
    keys = folder / f"keys-{name}"
    ensure_worker_key(keys)
    token = admin(server.state, "add-worker", name, "--public-key", str(worker_public_key_path(keys))).strip()
    assert stated_fingerprint(server.url, token, ensure_worker_key(keys)) == fingerprint_digest()
    return token, keys


def _jobs(server: Server, submission_id: str) -> dict[int, tuple[str, bool, int | None]]:
    """Per job number: (state, upload fetched: its work begun, worker id), as the server's database holds them."""
    _submission, jobs = submission_and_shard_jobs(server.state, submission_id)
    return {job.number: (job.state, job.used, job.worker_id) for job in jobs}


def test_a_shard_job_encodes_while_its_query_job_runs_and_searches_once_the_vectors_are_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    competition = write_competition(tmp_path / "c.toml", tables=TABLES, tasks=["text2code"])
    server = Server(competition, tmp_path / "state", workers=0).start()
    monkeypatch.setenv(WORKER_DATA, str(server.state / "worker-data"))
    try:
        (coordinator, keys), (other, _other_keys) = (_keyed_worker(server, name, tmp_path) for name in ("c", "q"))
        submission_id = HostingClient(server.url, admin(server.state, "add-participant", "pat").strip()).submit(EXAMPLE)["id"]
        job, upload, beat = claim_sharded_grade(server, coordinator, tmp_path, 2)
        querying = ShardApi(worker_client(server.url, other))
        query = querying.claim(fingerprint_digest())
        assert query is not None and query.number == -1  # the query job, held by the other worker
        shards = ShardApi(worker_client(server.url, coordinator))
        took: list[bool] = []
        shard_worker = threading.Thread(target=lambda: took.append(work_one(shards, fingerprint_digest())), daemon=True)
        shard_worker.start()  # the real worker code: claims the shard, fetches its upload, encodes, waits for the vectors
        wait_for(lambda: _jobs(server, submission_id)[0][:2] == ("running", True), timeout=120, what="the shard job's upload fetched")
        assert _jobs(server, submission_id)[-1][0] == "running"  # the shard's work began while the query job runs
        shard_id = _job_id(server, submission_id, 0)
        pending = shards.http.get(f"/api/v1/worker/shards/{shard_id}/queries", params={"tries": 1})
        assert pending.status_code == 202  # not yet: the shard job waits, holding nothing it cannot finish
        assert shard_worker.is_alive()
        assert querying.put_output(query, _honest_vectors(query, querying, tmp_path, server)) is not None
        shard_worker.join(timeout=300)
        assert not shard_worker.is_alive() and took == [True]
        deadline = time.monotonic() + 300  # a shard job that failed and went back to the queue would leave it waiting: bounded
        result = coordinate(shards, job, upload, lambda: time.monotonic() > deadline, work=lambda *_: False)
        assert result is not None and result.failure_code is None, (result, _jobs(server, submission_id))
        assert post_result(server, coordinator, keys, job, result) == "accepted"
        beat.done.set()
        submission, rows = submission_and_shard_jobs(server.state, submission_id)
    finally:
        server.stop()
    assert (submission.state, submission.attempt) == ("scored", 1)
    assert sorted((row.number, row.state, row.tries, row.unused) for row in rows) == [(-1, "done", 1, 0), (0, "done", 1, 0)]


def _stored_report(server: Server, submission_id: str) -> dict[str, Any]:
    """The signed report's payload the server stored for ``submission_id``."""
    db = open_database(server.state, None)
    try:
        with db.session() as session:
            row = session.get(Submission, submission_id)
            assert row is not None and row.result_id is not None
            result = session.get(Result, row.result_id)
            assert result is not None and result.report_path is not None
            return dict(json.loads(Path(result.report_path).read_text(encoding="utf-8")))
    finally:
        db.dispose()


def _kept_progress(server: Server, submission_id: str) -> dict[str, Any] | None:
    """The progress the server kept on ``submission_id``'s first attempt."""
    db = open_database(server.state, None)
    try:
        with db.session() as session:
            return session.scalars(select(Attempt.progress).where(Attempt.submission_id == submission_id, Attempt.number == 1)).one()
    finally:
        db.dispose()


def _job_id(server: Server, submission_id: str, number: int) -> int:
    _submission, jobs = submission_and_shard_jobs(server.state, submission_id)
    return next(job.id for job in jobs if job.number == number)


def _honest_vectors(query: ShardJobMessage, api: ShardApi, folder: Path, server: Server) -> bytes:
    """The query job's honest output, computed by the real worker code (in a spawned process: no OpenMP in this one)."""
    upload = folder / "query-upload.tar.gz"
    api.fetch_upload(query, upload)
    assert hashlib.sha256(upload.read_bytes()).hexdigest() == query.upload_sha256
    output = folder / "query-vectors.out"  # the job's output file, as a worker's child writes it
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pool.submit(_compute, query, upload, None, server.state / "worker-data", output).result()
    return output.read_bytes()


def test_a_pool_of_one_worker_finishes_a_sharded_grade(tmp_path: Path) -> None:
    competition = write_competition(tmp_path / "c.toml", tables=TABLES, tasks=["text2code"])
    server = Server(competition, tmp_path / "state", workers=1).start()
    try:
        client = HostingClient(server.url, admin(server.state, "add-participant", "pat").strip())
        submission_id = client.submit(EXAMPLE)["id"]
        assert client.wait(submission_id, poll_s=0.2, timeout_s=300)["state"] == "scored", server.log.read_text()[-3000:]
        submission, rows = submission_and_shard_jobs(server.state, submission_id)
        report = _stored_report(server, submission_id)
        kept = _kept_progress(server, submission_id)
        logged = (server.state / "run" / "local-1.log").read_text(encoding="utf-8")
    finally:
        server.stop()
    assert submission.attempt == 1
    # The coordinator's log: a line per change of the task's shards, in a participant's words, up to the last shard ranked.
    prefix = f"{submission_id} attempt 1: task "
    assert [line.partition(prefix)[2] for line in logged.splitlines() if prefix in line] == [
        "text2code: encoding, shard 1 of 1",
        "text2code: ranked, 1 of 1 shards ranked",
    ]
    # The attempt's last progress is the server's own step, recorded as it scored the posted run (no worker states it).
    assert kept == {"tasks": [{"task": "text2code", "phase": "scoring"}]}
    assert sorted((row.number, row.state) for row in rows) == [(-1, "done"), (0, "done")]
    assert len({row.worker_id for row in rows}) == 1  # the one worker did both
    # The sharded grade's cost block: its two jobs' figures merged, the workers' word, within the sandbox's bounds.
    cost, limits = report["cost"], report["sandbox"]["limits"]
    assert (cost["scheme"], cost["source"], list(cost["tasks"])) == ("grader-cost/v1", "worker", ["text2code"])
    entry = cost["tasks"]["text2code"]
    assert entry["queries"] == cost["total"]["queries"] > 0 and entry["texts"] > entry["queries"]  # the server's own counts
    assert entry["measured_by"].startswith("summed over the task's 2 shard jobs")
    assert entry["wall_s"]["encode"] is not None and entry["wall_s"]["encode"] >= 0 and entry["wall_s"]["search"] is not None
    for figure in ("cpu_s", "peak_memory_bytes"):  # measured where the engine's cgroup allows it, else null with the reason
        assert (entry[figure] is not None and entry[figure] >= 0) or figure in entry["missing"], entry
    if entry["peak_memory_bytes"] is not None:
        assert entry["peak_memory_bytes"] <= limits["memory_bytes"] + limits.get("tmp_bytes", 0)
