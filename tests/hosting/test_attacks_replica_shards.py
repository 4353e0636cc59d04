"""Against a real `grader serve` on real sockets: with ``replicas = 2``, a lying worker cannot steer a sharded grade.

Before: a replica attempt's shard jobs went to whichever worker claimed first, so one worker could compute the shard
outputs of every replica; the replicas then agreed with each other on its lie (a sharded ONNX grade's public score
was set to 1.0000 that way), and a disagreement flagged the coordinator of the losing replica, never the worker whose
output differed. After: the jobs of one replica go only to workers that contribute to no other replica of the
submission, at most ``[sharding] replica_workers`` of them (its coordinator included); the replicas' shard jobs are
compared job by job, and the dissent is charged to the worker of the first job whose output differs while its inputs
agree with the majority's.

Five registered, keyed workers over the worker API: three coordinators, one honest helper and the liar, which states
the honest workers' own fingerprint (this machine's: a binding of fingerprints proves nothing about the machine, and
the comparison of outputs is what catches it). The orchestration is the test's, step by step, so that the liar is
where the attack wants it: inside an honest coordinator's replica. The honest workers are deterministic stubs: each
output is the real worker's computation (:func:`grader.hosting.worker.shard_loop._compute`, the model in the runner
container over the server's exported copy, in a spawned process), computed once per distinct input and put by every honest worker that
takes that job; the coordinators end their attempts with the real coordinator (:func:`coordinate`), which states the
facts and names the runs the server merged.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import select

from grader.hosting.db.models import Replica, Result, ResultPart
from grader.hosting.db.models import Worker as WorkerRow
from grader.hosting.db.session import open_database
from grader.hosting.environment import WORKER_DATA
from grader.hosting.keyring.worker_signing import ensure_worker_key, worker_public_key_path
from grader.hosting.participant.client import HostingClient
from grader.hosting.protocol.messages import Job
from grader.hosting.protocol.shard_messages import ShardJobMessage
from grader.hosting.worker.loop import worker_client
from grader.hosting.worker.shard_loop import ShardApi, _compute, coordinate, fingerprint_digest
from grader.retrieval.shard_exchange import pack_vectors, unpack_vectors
from tests.hosting.attack_support import post_result, submission_and_shard_jobs
from tests.hosting.support import REPO, Server, admin, claim_body, stated_fingerprint, write_competition

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
#: One task of one shard (8,192 documents a chunk): a query job and a shard job per replica.
TABLES = {"sharding": {"shard_documents": 8192, "replica_workers": 2}, "queue": {"lease_s": 600, "heartbeat_s": 60}}
#: Honest outputs by (upload, task, job number, sha256 of the query vectors searched): computed once each.
HONEST: dict[tuple[str, str, int, str], bytes] = {}


def _honest(message: ShardJobMessage, upload: Path, queries: bytes | None, copy: Path) -> bytes:
    key = (message.upload_sha256, message.task, message.number, hashlib.sha256(queries or b"").hexdigest())
    if key not in HONEST:
        # In a spawned process, as a worker computes in a child of its own: the search's OpenMP threads must not start in
        # this process, whose later tests fork workers' children (GNU OpenMP aborts a child forked after it started).
        output = upload.with_name(f"honest-{len(HONEST)}.out")  # the job's output file, as a worker's child writes it
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            pool.submit(_compute, message, upload, queries, copy, output).result()
        HONEST[key] = output.read_bytes()
    return HONEST[key]


def _negated(data: bytes, rows: int) -> bytes:
    """Query vectors negated: the same header, rows and dimension (a put takes them), the ranking reversed."""
    vectors = unpack_vectors(data, sha256=hashlib.sha256(data).hexdigest(), rows=rows, max_bytes=len(data))
    return pack_vectors(-vectors)


@dataclass
class Worker:
    """A registered, keyed worker over the worker API, driven step by step by the test."""

    server: Server
    name: str
    folder: Path
    token: str = ""
    uploads: dict[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        keys = self.folder / f"keys-{self.name}"
        ensure_worker_key(keys)
        self.keys = keys
        self.token = admin(self.server.state, "add-worker", self.name, "--public-key", str(worker_public_key_path(keys))).strip()
        # Each states this machine's fingerprint once, signed (worker protocol 2): the liar too, as binding proves nothing.
        assert stated_fingerprint(self.server.url, self.token, ensure_worker_key(keys)) == fingerprint_digest()
        self.http = worker_client(self.server.url, self.token)
        self.shards = ShardApi(self.http)

    def claim_grade(self) -> Job | None:
        """A whole-job claim naming the bound fingerprint; the job (its upload fetched), or None (204)."""
        answer = self.http.post("/api/v1/worker/claim", json=claim_body(fingerprint_digest()))
        if answer.status_code == 204:
            return None
        assert answer.status_code == 200, answer.text
        job = Job.model_validate(answer.json())
        upload = self.folder / f"{self.name}-{job.submission_id}-{job.attempt}.tar.gz"
        upload.write_bytes(self.http.get(f"/api/v1/worker/jobs/{job.submission_id}/upload", params={"attempt": job.attempt}).content)
        self.uploads[f"{job.submission_id}/{job.attempt}"] = upload
        return job

    def take_shard(self) -> ShardJobMessage | None:
        """A shard claim stating this machine's fingerprint's digest (the liar's too)."""
        return self.shards.claim(fingerprint_digest())

    def run_shard(self, message: ShardJobMessage, *, lie: bool = False) -> None:
        """Fetch the job's inputs and put its honest output; ``lie``: the liar's, a valid output of the wrong ranking (query
        vectors negated; a shard searched with negated query vectors)."""
        upload = self.folder / f"{self.name}-shard-{message.job_id}.tar.gz"
        self.shards.fetch_upload(message, upload)
        queries = None
        if message.number >= 0:
            fetched = self.shards.query_vectors(message)
            assert isinstance(fetched, tuple), fetched  # the query job ran first: the vectors are in
            queries = fetched[0]
        copy = self.server.state / "worker-data"
        if lie and queries is None:
            output = _negated(_honest(message, upload, None, copy), len(message.judged))
        elif lie:
            negated = _negated(queries or b"", len(message.judged))
            output = _honest(message.model_copy(update={"queries_sha256": hashlib.sha256(negated).hexdigest()}), upload, negated, copy)
        else:
            output = _honest(message, upload, queries, copy)
        assert self.shards.put_output(message, output) is not None

    def finish(self, job: Job) -> str:
        """End the coordinated attempt with the real coordinator (no shard job of its own: all are in), sign, post; the verdict."""
        result = coordinate(self.shards, job, self.uploads[f"{job.submission_id}/{job.attempt}"], lambda: False, work=lambda *_: False)
        assert result is not None and result.failure_code is None, result
        return post_result(self.server, self.token, self.keys, job, result)


def _take(worker: Worker, number: int) -> ShardJobMessage:
    message = worker.take_shard()
    assert message is not None and message.number == number, (worker.name, message)
    return message


def _replica_rows(state: Path, submission_id: str) -> list[tuple[int, str | None, int | None]]:
    db = open_database(state, None)
    try:
        with db.session() as session:
            rows = session.scalars(select(Replica).where(Replica.submission_id == submission_id).order_by(Replica.attempt)).all()
            return [(row.attempt, row.verdict, row.blamed_worker_id) for row in rows]
    finally:
        db.dispose()


def _public_score(state: Path, submission_id: str) -> float:
    db = open_database(state, None)
    try:
        with db.session() as session:
            result = session.scalars(select(Result).where(Result.submission_id == submission_id)).one()
            part = session.get(ResultPart, result.id)
            assert part is not None
            return part.public_score
    finally:
        db.dispose()


def _worker_ids(state: Path) -> dict[str, int]:
    db = open_database(state, None)
    try:
        with db.session() as session:
            return {row.name: row.id for row in session.scalars(select(WorkerRow)).all()}
    finally:
        db.dispose()


@pytest.mark.parametrize("lie", ["forged shard run", "forged query vectors", "a forged shard run once"])
def test_a_liar_inside_an_honest_replica_is_outvoted_and_flagged_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lie: str) -> None:
    competition = write_competition(tmp_path / "c.toml", replicas=2, tables=TABLES, tasks=["text2code"])
    server = Server(competition, tmp_path / "state", workers=0).start()
    monkeypatch.setenv(WORKER_DATA, str(server.state / "worker-data"))  # the coordinators state their facts from the copy
    in_queries = lie == "forged query vectors"
    try:
        c1, liar, c2, h2, c3 = (Worker(server, name, tmp_path) for name in ("c1", "liar", "c2", "h2", "c3"))
        client = HostingClient(server.url, admin(server.state, "add-participant", "pat").strip())
        attacked = client.submit(EXAMPLE)["id"]

        # Replica 1: c1 coordinates; the liar computes one of its two jobs and lies in it.
        first = c1.claim_grade()
        assert first is not None and first.attempt == 1
        if in_queries:
            liar.run_shard(_take(liar, -1), lie=True)
            c1.run_shard(_take(c1, 0))
        else:
            c1.run_shard(_take(c1, -1))
            liar.run_shard(_take(liar, 0), lie=True)
        assert c1.finish(first) == "replicated"

        # Replica 2: neither c1 nor the liar computes anything of it; two workers at most (c2 and h2), so c3 takes nothing.
        assert liar.claim_grade() is None and c1.claim_grade() is None
        second = c2.claim_grade()
        assert second is not None and second.attempt == 2
        assert liar.take_shard() is None and c1.take_shard() is None
        h2.run_shard(_take(h2, -1))
        assert liar.take_shard() is None and c1.take_shard() is None and c3.take_shard() is None  # the replica has its two
        c2.run_shard(_take(c2, 0))
        assert c2.finish(second) == "replicated"  # disagrees with replica 1: a third decides

        # Replica 3: only c3 is left; it computes both jobs and makes the honest majority.
        assert all(worker.claim_grade() is None for worker in (liar, c1, c2, h2))
        third = c3.claim_grade()
        assert third is not None and third.attempt == 3
        c3.run_shard(_take(c3, -1))
        c3.run_shard(_take(c3, 0))
        assert c3.finish(third) == "replicated"  # two agree; the worker charged with the dissent grades it again first

        # The re-run: the liar's alone (it coordinates and computes every job); it lies again, or tells the truth this time.
        assert all(worker.claim_grade() is None for worker in (c1, c2, h2, c3))
        rerun = liar.claim_grade()
        assert rerun is not None and rerun.attempt == 4
        liar.run_shard(_take(liar, -1), lie=in_queries)
        assert c1.take_shard() is None and c3.take_shard() is None  # a re-run is its worker's alone
        liar.run_shard(_take(liar, 0), lie=lie == "forged shard run")
        ended = liar.finish(rerun)

        if lie != "a forged shard run once":
            # The same upload again, graded by honest workers only (fresh for this submission): the honest score.
            reference = client.submit(EXAMPLE)["id"]
            for coordinator in (c1, c2):
                job = coordinator.claim_grade()
                assert job is not None and job.submission_id == reference
                coordinator.run_shard(_take(coordinator, -1))
                coordinator.run_shard(_take(coordinator, 0))
                assert coordinator.finish(job) == ("replicated" if coordinator is c1 else "accepted")
            scores = (_public_score(server.state, attacked), _public_score(server.state, reference))

        submission, jobs = submission_and_shard_jobs(server.state, attacked)
        ids = _worker_ids(server.state)
        standing = {entry["name"]: (entry["dissents"], entry["nondeterministic"]) for entry in json.loads(admin(server.state, "workers", "--json"))}
        replicas = _replica_rows(server.state, attacked)
    finally:
        server.stop()
    # Every job of one replica was computed by that replica's workers only; the re-run's by the liar alone.
    by_attempt: dict[int, set[int]] = {}
    for shard_job in jobs:
        assert shard_job.worker_id is not None
        by_attempt.setdefault(shard_job.attempt, set()).add(shard_job.worker_id)
    assert by_attempt == {1: {ids["c1"], ids["liar"]}, 2: {ids["c2"], ids["h2"]}, 3: {ids["c3"]}, 4: {ids["liar"]}}
    if lie == "a forged shard run once":
        # Two outputs for one input: the liar cannot be told from a model that is not deterministic. No one is flagged,
        # nothing is charged, the grade ends error NONDETERMINISTIC; the host sees whose re-run gave two outputs.
        assert (ended, submission.state, submission.failure_code) == ("error", "error", "NONDETERMINISTIC")
        assert replicas == [(1, "nondeterministic", ids["liar"]), (2, "majority", None), (3, "majority", None), (4, "rerun", None)]
        assert standing == {"c1": (0, 0), "liar": (0, 1), "c2": (0, 0), "h2": (0, 0), "c3": (0, 0)}
        return
    # The same lie twice: the dissent stands. Scored, charged once (replicas and the re-run are no lost attempts), at the
    # honest score; the liar alone is flagged (replica 1 is charged to it, not to its honest coordinator c1).
    assert (ended, submission.state, submission.failure_code) == ("accepted", "scored", None)
    assert scores[0] == scores[1]
    assert replicas == [(1, "dissent", ids["liar"]), (2, "majority", None), (3, "majority", None), (4, "rerun", None)]
    assert standing == {"c1": (0, 0), "liar": (1, 0), "c2": (0, 0), "h2": (0, 0), "c3": (0, 0)}
