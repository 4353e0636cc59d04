"""Against a real `grader serve` on real sockets: a sharded grade always ends.

Before: the first claim of a task pinned its fingerprint on every job of the task for good. A worker that claimed
a shard job stating a fingerprint no other worker has, then vanished, left the job re-queued under that pin: no
live worker could claim it again, and the coordinator waited for ever (observed: 15 minutes until cancelled).
After: the pin lapses with the task's last lease (no job of the task running or done: any fingerprint may claim),
and the lapsed lease, unused, costs the job no try; a task no live worker can finish (its query vectors done under
a fingerprint now gone) fails ``INFRA`` at the attempt's deadline (``[sharding] deadline_s``), uncharged, and the
coordinator stops waiting then.

The vanishing worker is a stub over the shard routes; the honest one is the worker's real coordinator
(:func:`grader.hosting.worker.shard_loop.coordinate`), in this process, over the same sockets: in the first
test it runs the shard jobs in the runner container and the grade ends scored.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from grader.failures import FailureCode
from grader.hosting.environment import WORKER_DATA
from grader.hosting.keyring.worker_signing import ensure_worker_key, sign_fingerprint, worker_public_key_path
from grader.hosting.participant.client import HostingClient
from grader.hosting.protocol.messages import Job
from grader.hosting.services.replication import fingerprint_digest as digest_of
from grader.hosting.worker.fingerprint import worker_fingerprint
from grader.hosting.worker.loop import Heartbeat, worker_client
from grader.hosting.worker.shard_loop import ShardApi, fingerprint_digest
from grader.retrieval.shard_exchange import pack_vectors
from tests.hosting.attack_support import Coordinating, claim_sharded_grade, post_result, submission_and_shard_jobs
from tests.hosting.support import REPO, Server, admin, claim_body, stated_fingerprint, write_competition

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
#: A fingerprint no live worker has (the honest worker's is this machine's): the stub states it (bound to it), then vanishes.
GONE_FINGERPRINT = {**worker_fingerprint(), "machine": "gone", "cpu_flags_sha256": "c" * 64}
GONE = str(digest_of(GONE_FINGERPRINT))
#: A short lease, so that the vanished worker's lapses within the test; the reaper looks twice a second.
QUEUE = {"lease_s": 4, "heartbeat_s": 1, "reap_every_s": 0.5}


def _served(tmp_path: Path, sharding: dict[str, object]) -> tuple[Server, str, str, str, Path]:
    """A server of one task (text2code), no local worker; a submission; tokens of the honest worker and the stub; the key dir."""
    tables = {"sharding": {"shard_documents": 8192, **sharding}, "queue": QUEUE}
    competition = write_competition(tmp_path / "c.toml", tables=tables, tasks=["text2code"])
    server = Server(competition, tmp_path / "state", workers=0).start()
    participant = admin(server.state, "add-participant", "pat").strip()
    keys = tmp_path / "keys"
    ensure_worker_key(keys)
    honest = admin(server.state, "add-worker", "honest", "--public-key", str(worker_public_key_path(keys))).strip()
    stub_keys = tmp_path / "stub-keys"  # a keyed worker, as any that may claim (its results would count if it posted any)
    ensure_worker_key(stub_keys)
    stub = admin(server.state, "add-worker", "stub", "--public-key", str(worker_public_key_path(stub_keys))).strip()
    # Each states its fingerprint once (worker protocol 2): the honest one this machine's, the stub one nobody else has.
    stated_fingerprint(server.url, honest, ensure_worker_key(keys))
    with worker_client(server.url, stub) as http:
        signature = sign_fingerprint(ensure_worker_key(stub_keys), worker="stub", competition="test-comp", fingerprint=GONE_FINGERPRINT)
        assert http.post("/api/v1/worker/fingerprint", json={"fingerprint": GONE_FINGERPRINT, "signature": signature}).status_code == 200
    submission_id = HostingClient(server.url, participant).submit(EXAMPLE)["id"]
    return server, submission_id, honest, stub, keys


def _claim_the_grade(server: Server, token: str, tmp_path: Path) -> tuple[Job, Path, Heartbeat]:
    """The honest worker claims the sharded submission (its jobs are planned) and keeps its lease alive."""
    job, upload, beat = claim_sharded_grade(server, token, tmp_path, QUEUE["heartbeat_s"])
    assert job.attempt == 1
    return job, upload, beat


def test_a_job_claimed_under_a_vanished_fingerprint_is_claimed_again_and_the_grade_ends_scored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, submission_id, honest, stub_token, keys = _served(tmp_path, {})
    try:
        job, upload, beat = _claim_the_grade(server, honest, tmp_path)
        stub = worker_client(server.url, stub_token)
        taken = stub.post("/api/v1/worker/shards/claim", json=claim_body(GONE))
        assert taken.status_code == 200 and (taken.json()["number"], taken.json()["tries"]) == (-1, 1), taken.text
        stub.close()  # it vanishes: never fetches, never renews

        # The honest worker's real coordinator, of this machine's fingerprint, on the copy the server exported.
        monkeypatch.setenv(WORKER_DATA, str(server.state / "worker-data"))
        honest_http = worker_client(server.url, honest)
        assert honest_http.post("/api/v1/worker/shards/claim", json=claim_body(fingerprint_digest())).status_code == 204  # pinned
        coordinator = Coordinating(ShardApi(honest_http), job, upload)
        coordinator.start()
        coordinator.join(timeout=300)
        alive = coordinator.is_alive()
        coordinator.stop.set()
        assert not alive, "the coordinator still waits: the job stayed pinned to a fingerprint no live worker has"
        assert coordinator.result is not None and coordinator.result.failure_code is None, coordinator.result
        assert post_result(server, honest, keys, job, coordinator.result) == "accepted"
        beat.done.set()
        honest_http.close()
        submission, jobs = submission_and_shard_jobs(server.state, submission_id)
    finally:
        server.stop()
    assert (submission.state, submission.attempt, submission.failure_code) == ("scored", 1, None)  # charged once
    query = next(row for row in jobs if row.number == -1)
    # Its second claim, by the honest worker; the first lapsed unused, so no try was charged for it.
    assert (query.state, query.tries, query.unused, query.fingerprint) == ("done", 2, 1, fingerprint_digest())
    assert all(row.state == "done" and row.fingerprint == fingerprint_digest() for row in jobs)


def test_a_task_no_live_worker_can_finish_ends_infra_at_the_deadline_uncharged(tmp_path: Path) -> None:
    deadline_s = 8
    server, submission_id, honest, stub_token, keys = _served(tmp_path, {"deadline_s": deadline_s})
    try:
        planned = time.monotonic()
        job, upload, beat = _claim_the_grade(server, honest, tmp_path)
        # The stub does the query job under a fingerprint no live worker has, then vanishes: the task's shards are
        # pinned to it (its query vectors are that fingerprint's), and nobody can run them.
        stub = worker_client(server.url, stub_token)
        taken = stub.post("/api/v1/worker/shards/claim", json=claim_body(GONE)).json()
        assert taken["number"] == -1
        assert stub.get(f"/api/v1/worker/shards/{taken['job_id']}/upload", params={"tries": 1}).status_code == 200
        vectors = pack_vectors(np.zeros((len(taken["judged"]), 4), dtype=np.float32))  # they hold: the put checks them
        put = stub.put(f"/api/v1/worker/shards/{taken['job_id']}/output", params={"tries": 1}, content=vectors)
        assert put.status_code == 200, put.text
        stub.close()

        honest_http = worker_client(server.url, honest)
        coordinator = Coordinating(ShardApi(honest_http), job, upload)
        coordinator.start()
        coordinator.join(timeout=deadline_s + 60)
        alive = coordinator.is_alive()
        coordinator.stop.set()
        assert not alive, "the coordinator waited past the attempt's deadline"
        # It stopped at the deadline (counted from the claim, after ``planned``), not long after, and not before it.
        assert deadline_s <= coordinator.ended - planned < deadline_s + 10
        result = coordinator.result
        assert result is not None and result.failure_code is FailureCode.INFRA, result
        assert post_result(server, honest, keys, job, result) == "requeued"  # the platform's failure: re-run, uncharged
        beat.done.set()
        honest_http.close()
        submission, jobs = submission_and_shard_jobs(server.state, submission_id)
    finally:
        server.stop()
    assert (submission.state, submission.failure_code) == ("queued", None)
    shards = [row for row in jobs if row.number >= 0]
    assert shards and all((row.state, row.failure_code) == ("failed", "INFRA") for row in shards), [(r.state, r.message) for r in shards]
    assert all("deadline" in row.message for row in shards)
