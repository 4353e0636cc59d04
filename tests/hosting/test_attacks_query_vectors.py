"""Against a real `grader serve` on real sockets: a worker that lies with a task's query vectors charges nobody.

Before: a sharded grade's query job output (the task's packed query vectors) was stored as put, unchecked; a worker
doing a task's query job could put vectors of a wrong dimension, and the honest workers of the task's shards then
failed the task ``MODEL_ERROR``, charged to an honest participant on one worker's word.
After: the put is checked (header, rows, exact size, dimension 1 to 8,192, finite values): a bad header or wrong rows
are refused 422 and the try fails ``INFRA`` (the job runs again). Vectors of a wrong dimension under a correct header
cannot be told from the model's at the put; the honest shard worker meets the mismatch, encodes the queries itself,
finds its own vectors fit its documents, and reports the received ones suspect (``INFRA``): the server re-runs the
query job (a try counted on it) and the shards done with them, and the grade ends scored, with the score the same
submission gets from honest workers alone, charged once, never ``MODEL_ERROR``.

The liar is a stub over the shard routes; the honest worker is the real coordinator
(:func:`grader.hosting.worker.shard_loop.coordinate`) in this process, running the jobs in the runner container.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest

from grader.hosting.environment import WORKER_DATA
from grader.hosting.keyring.worker_signing import ensure_worker_key, worker_public_key_path
from grader.hosting.participant.client import HostingClient
from grader.hosting.protocol.messages import Job, WorkerResult
from grader.hosting.worker.loop import worker_client
from grader.hosting.worker.shard_loop import ShardApi, fingerprint_digest
from grader.retrieval.shard_exchange import pack_vectors
from tests.hosting.attack_support import Coordinating, claim_sharded_grade, post_result, submission_and_shard_jobs
from tests.hosting.support import REPO, Server, admin, claim_body, stated_fingerprint, write_competition

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
QUEUE = {"lease_s": 10, "heartbeat_s": 1, "reap_every_s": 0.5}
#: Tries a shard job has: the liar's three, then the honest worker's.
TRIES = 5


def _grade(server: Server, token: str, keys: Path, job: Job, upload: Path) -> WorkerResult:
    """The honest worker's real coordinator runs the claimed attempt to its end; its result, posted and accepted."""
    http = worker_client(server.url, token)
    try:
        coordinator = Coordinating(ShardApi(http), job, upload)
        coordinator.start()
        coordinator.join(timeout=240)
        alive = coordinator.is_alive()
        coordinator.stop.set()
        assert not alive, "the coordinator still waits"
        result = coordinator.result
        assert result is not None and result.failure_code is None, result
        assert post_result(server, token, keys, job, result) == "accepted"
        return result
    finally:
        http.close()


def _lie(liar: httpx.Client, fingerprint: str, tries: int, body: bytes | None = None) -> httpx.Response:
    """The liar claims the task's query job (it bound the honest worker's fingerprint: binding proves nothing) and puts ``body``
    (by default, the judged queries' rows of 7-dimension vectors: a correct header, not the model's dimension)."""
    taken = liar.post("/api/v1/worker/shards/claim", json=claim_body(fingerprint))
    assert taken.status_code == 200, taken.text
    job = taken.json()
    assert (job["number"], job["tries"]) == (-1, tries)
    rows = len(job["judged"])
    data = pack_vectors(np.ones((rows, 7), dtype=np.float32)) if body is None else body
    return liar.put(f"/api/v1/worker/shards/{job['job_id']}/output", params={"tries": tries}, content=data)


def test_lying_query_vectors_are_refused_or_re_run_and_the_grade_ends_with_the_honest_score_uncharged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tables = {"sharding": {"shard_documents": 8192}, "queue": QUEUE}
    competition = write_competition(tmp_path / "c.toml", tables=tables, tasks=["text2code"], max_attempts=TRIES)
    server = Server(competition, tmp_path / "state", workers=0).start()
    try:
        participant = admin(server.state, "add-participant", "pat").strip()
        keys, liar_keys = tmp_path / "keys", tmp_path / "liar-keys"
        ensure_worker_key(keys)
        ensure_worker_key(liar_keys)  # a keyed worker, as any that may claim
        honest = admin(server.state, "add-worker", "honest", "--public-key", str(worker_public_key_path(keys))).strip()
        liar_token = admin(server.state, "add-worker", "liar", "--public-key", str(worker_public_key_path(liar_keys))).strip()
        client = HostingClient(server.url, participant)
        attacked_id, reference_id = client.submit(EXAMPLE)["id"], client.submit(EXAMPLE)["id"]
        monkeypatch.setenv(WORKER_DATA, str(server.state / "worker-data"))
        fingerprint = fingerprint_digest()
        # Both state this machine's fingerprint once (worker protocol 2), signed with their keys.
        assert stated_fingerprint(server.url, honest, ensure_worker_key(keys)) == fingerprint
        assert stated_fingerprint(server.url, liar_token, ensure_worker_key(liar_keys)) == fingerprint

        job, upload, beat = claim_sharded_grade(server, honest, tmp_path, QUEUE["heartbeat_s"])
        assert job.submission_id == attacked_id
        liar = worker_client(server.url, liar_token)
        bad_header = _lie(liar, fingerprint, 1, b"GQVX" + b"\0" * 8)
        assert bad_header.status_code == 422 and "query vectors refused: not" in bad_header.json()["detail"], bad_header.text
        wrong_rows = _lie(liar, fingerprint, 2, pack_vectors(np.ones((3, 384), dtype=np.float32)))
        assert wrong_rows.status_code == 422 and "rows of float32 vectors" in wrong_rows.json()["detail"], wrong_rows.text
        wrong_dimension = _lie(liar, fingerprint, 3)
        assert wrong_dimension.status_code == 200, wrong_dimension.text  # it holds as vectors: only a shard can tell
        liar.close()
        attacked = _grade(server, honest, keys, job, upload)
        beat.done.set()

        job, upload, beat = claim_sharded_grade(server, honest, tmp_path, QUEUE["heartbeat_s"])
        assert job.submission_id == reference_id
        reference = _grade(server, honest, keys, job, upload)  # honest workers only
        beat.done.set()
        used = httpx.get(f"{server.url}/api/v1/quota", headers={"Authorization": f"Bearer {participant}"}).json()["hidden"]["used_24h"]
        (submission, jobs), (honestly, _) = (submission_and_shard_jobs(server.state, sid) for sid in (attacked_id, reference_id))
    finally:
        server.stop()
    assert attacked.runs == reference.runs  # the merged runs, byte for byte: the honest vectors searched every shard
    assert (submission.state, submission.attempt, submission.failure_code) == ("scored", 1, None)  # one attempt, no failure
    assert submission.public_score is not None and submission.public_score == honestly.public_score
    assert used == 2  # each submission charged once for its grade, the attacked one no more than the reference
    query = next(row for row in jobs if row.number == -1)
    # Two refused tries and the suspect one, counted; the fourth, the honest worker's, is done.
    assert (query.state, query.tries, query.unused) == ("done", 4, 0)
    shards = [row for row in jobs if row.number >= 0]
    # Each shard: its try with the suspect vectors (uncharged), then its try with the honest ones.
    assert shards and all((row.state, row.tries, row.unused) == ("done", 2, 1) for row in shards), [(r.state, r.tries, r.message) for r in shards]
    assert all(row.failure_code != "MODEL_ERROR" for row in jobs)
