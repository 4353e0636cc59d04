"""Against a real `grader serve` (and a real `grader worker`) on real sockets: a worker's words are untrusted input.

Before: a shard failure posted with the code ``"BOGUS"`` was stored; the coordinator of the grade turned it into
``FailureCode("BOGUS")``, raised ``ValueError`` and died (a remote worker for good, a local one in a crash loop),
and the grade ended ``error``. A whole-job result's code was a plain string too. Any exception of one grade ended
the worker. A 23-digit job id, attempt or try reached SQLite, which raised ``OverflowError``: a 500.
After: a code outside :class:`grader.failures.FailureCode` is refused (422) and nothing is stored; a stored row
holding one anyway (an older or damaged row, written here straight into the database) reads as ``INFRA``, so the
coordinator posts INFRA and the attempt is re-run, uncharged; a worker whose grade raises posts INFRA and claims
the next job; every integer path and query parameter refuses a number no row can hold (422).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from grader.data.benchmark import load_benchmark_folder
from grader.data.registry import resolve_benchmark
from grader.failures import FailureCode
from grader.hosting.db.models import ShardJob
from grader.hosting.db.session import open_database
from grader.hosting.keyring.worker_signing import ensure_worker_key, sign_result, verify_result, worker_public_key_path
from grader.hosting.participant.client import HostingClient
from grader.hosting.protocol.messages import Job, WorkerResult
from grader.hosting.protocol.version import HEADER, WORKER_PROTOCOL
from grader.hosting.protocol.worker_data import export_worker_data, pseudonymous_judged
from grader.hosting.worker.loop import WorkerApi, worker_client
from grader.hosting.worker.shard_loop import ShardApi, coordinate
from grader.sandbox.blinding import BlindingKey
from tests.hosting.attack_support import submission_and_shard_jobs
from tests.hosting.support import REPO, Server, admin, claim_body, stated_fingerprint, wait_for, worker_headers, write_competition

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
#: More digits than any 64-bit integer: SQLite raised OverflowError on it.
HUGE = "1" * 23
#: A lease longer than the test's steps (the test is the worker, and beats no heartbeat).
SLOW_QUEUE = {"lease_s": 120, "heartbeat_s": 5}


def _write_rows(state: Path, *changes: tuple[Any, dict[str, Any]]) -> None:
    """Write straight into the database (a stand-in for a row an older grader or a damaged disk left)."""
    db = open_database(state, None)
    try:
        with db.session() as session:
            for where, values in changes:
                session.execute(update(ShardJob).where(where).values(**values))
    finally:
        db.dispose()


def test_a_failure_code_outside_the_enum_is_refused_and_a_stored_one_reads_as_infra(tmp_path: Path) -> None:
    tables = {"sharding": {"shard_documents": 8192}, "queue": SLOW_QUEUE}
    server = Server(write_competition(tmp_path / "c.toml", tables=tables), tmp_path / "state", workers=0).start()
    try:
        participant = admin(server.state, "add-participant", "pat").strip()
        key = ensure_worker_key(tmp_path / "keys")
        token = admin(server.state, "add-worker", "w", "--public-key", str(worker_public_key_path(tmp_path / "keys"))).strip()
        submission_id = HostingClient(server.url, participant).submit(EXAMPLE)["id"]
        http = worker_client(server.url, token)
        bound = stated_fingerprint(server.url, token, key)
        job = Job.model_validate(http.post("/api/v1/worker/claim", json=claim_body(bound, 5)).json())
        assert (job.submission_id, job.attempt, job.sharded) == (submission_id, 1, True)
        upload = tmp_path / "upload.tar.gz"
        upload.write_bytes(http.get(f"/api/v1/worker/jobs/{submission_id}/upload", params={"attempt": 1}).content)
        shard = http.post("/api/v1/worker/shards/claim", json=claim_body(bound)).json()
        assert (shard["submission_id"], shard["number"], shard["tries"]) == (submission_id, -1, 1)

        # A shard failure with a code no FailureCode names: 422, and the job is still held, nothing stored.
        bogus = http.post(f"/api/v1/worker/shards/{shard['job_id']}/failure", json={"tries": 1, "failure_code": "BOGUS", "message": "m"})
        assert bogus.status_code == 422, bogus.text
        assert "Traceback" not in bogus.text and "failure_code" in bogus.text
        # A whole-job result with one: 422 before its signature is even read; the attempt still runs.
        fields = {"submission_id": submission_id, "attempt": 1, "upload_sha256": job.upload_sha256, "facts": None, "runs": {}, "message": "m"}
        signed = sign_result(key, **fields, failure_code="BOGUS")
        result = http.post(
            f"/api/v1/worker/jobs/{submission_id}/result", json={"attempt": 1, "failure_code": "BOGUS", "message": "m", "signature": signed}
        )
        assert result.status_code == 422, result.text
        submission, jobs = submission_and_shard_jobs(server.state, submission_id)
        assert (submission.state, submission.attempt, submission.failure_code) == ("running", 1, None)
        held = next(row for row in jobs if row.id == shard["job_id"])
        assert (held.state, held.failure_code, held.message) == ("running", None, "")

        # A row that holds such a code anyway: the server states INFRA for the task, and the worker's real
        # coordinator (over these sockets) posts INFRA instead of dying on it.
        # (Every task's query job holds it, so that no shard job is left to run in a container.)
        mine = ShardJob.submission_id == submission_id
        _write_rows(
            server.state,
            (mine & (ShardJob.number == -1), {"state": "failed", "failure_code": "BOGUS", "message": "an older row", "lease_expires_at": None}),
            (mine & (ShardJob.state == "queued"), {"state": "skipped"}),
        )
        status = http.post(f"/api/v1/worker/jobs/{submission_id}/shards", json={"attempt": 1})
        tasks = sorted(resolve_benchmark("mini").spec.tasks)
        assert status.status_code == 200, status.text
        assert status.json()["failures"] == {task: ["INFRA", "an older row"] for task in tasks}, status.text
        coordinated = coordinate(ShardApi(http), job, upload, lambda: False)
        assert coordinated is not None and coordinated.failure_code is FailureCode.INFRA and coordinated.facts is None
        coordinated.signature = sign_result(key, **{**fields, "message": coordinated.message}, failure_code=coordinated.failure_code)
        assert WorkerApi(server.url, token).post_result(submission_id, coordinated) == "requeued"
        # INFRA is the platform's: the attempt is re-run, nothing charged, and the next claim plans fresh shard jobs.
        submission, _ = submission_and_shard_jobs(server.state, submission_id)
        assert (submission.state, submission.failure_code) == ("queued", None)
        assert "running -> queued" in admin(server.state, "history", submission_id)
        again = http.post("/api/v1/worker/claim", json=claim_body(bound, 5)).json()
        assert (again["submission_id"], again["attempt"]) == (submission_id, 2)
        _, jobs = submission_and_shard_jobs(server.state, submission_id)
        assert {row.state for row in jobs if row.attempt == 2} == {"queued"}
        http.close()
    finally:
        server.stop()


#: Every integer path and query parameter of every route, as the server's OpenAPI names it (a test checks that
#: this is all of them), and a request that puts the number there.
INTEGER_PARAMETERS = [
    ("POST", "/api/v1/worker/shards/{job_id}/heartbeat", "job_id", "/api/v1/worker/shards/{n}/heartbeat", {"tries": 1}),
    ("GET", "/api/v1/worker/shards/{job_id}/upload", "job_id", "/api/v1/worker/shards/{n}/upload?tries=1", None),
    ("GET", "/api/v1/worker/shards/{job_id}/upload", "tries", "/api/v1/worker/shards/1/upload?tries={n}", None),
    ("GET", "/api/v1/worker/shards/{job_id}/queries", "job_id", "/api/v1/worker/shards/{n}/queries?tries=1", None),
    ("GET", "/api/v1/worker/shards/{job_id}/queries", "tries", "/api/v1/worker/shards/1/queries?tries={n}", None),
    ("PUT", "/api/v1/worker/shards/{job_id}/output", "job_id", "/api/v1/worker/shards/{n}/output?tries=1", None),
    ("PUT", "/api/v1/worker/shards/{job_id}/output", "tries", "/api/v1/worker/shards/1/output?tries={n}", None),
    ("POST", "/api/v1/worker/shards/{job_id}/failure", "job_id", "/api/v1/worker/shards/{n}/failure", {"tries": 1, "failure_code": "INFRA"}),
    ("GET", "/api/v1/worker/jobs/{submission_id}/upload", "attempt", "/api/v1/worker/jobs/s1/upload?attempt={n}", None),
    ("PUT", "/api/v1/worker/jobs/{submission_id}/runs/{task}", "attempt", "/api/v1/worker/jobs/s1/runs/text2code?attempt={n}", None),
]
#: The integer fields of the worker's bodies, bounded alike (``"{n}"`` becomes the bare number).
INTEGER_FIELDS = [
    ("POST", "/api/v1/worker/shards/1/heartbeat", {"tries": "{n}"}),
    ("POST", "/api/v1/worker/shards/1/failure", {"tries": "{n}", "failure_code": "INFRA"}),
    ("POST", "/api/v1/worker/jobs/s1/heartbeat", {"attempt": "{n}"}),
    ("POST", "/api/v1/worker/jobs/s1/shards", {"attempt": "{n}"}),
    ("POST", "/api/v1/worker/jobs/s1/result", {"attempt": "{n}", "failure_code": "INFRA"}),
]
REQUESTS = [(method, url, body) for method, _path, _name, url, body in INTEGER_PARAMETERS] + INTEGER_FIELDS


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    root = tmp_path_factory.mktemp("bounds")
    server = Server(write_competition(root / "c.toml", tables={"sharding": {"shard_documents": 8192}}), root / "state", workers=0).start()
    try:
        ensure_worker_key(root / "keys")
        yield server, admin(server.state, "add-worker", "w", "--public-key", str(worker_public_key_path(root / "keys"))).strip()
    finally:
        server.stop()


@pytest.mark.parametrize(("method", "url", "body"), REQUESTS, ids=[f"{method} {url}" for method, url, _ in REQUESTS])
def test_every_integer_parameter_refuses_a_23_digit_number(served: tuple[Server, str], method: str, url: str, body: dict[str, Any] | None) -> None:
    server, token = served
    content = b"" if body is None else json.dumps(body).replace('"{n}"', HUGE).encode()
    headers = {**worker_headers(token), "Content-Type": "application/octet-stream" if body is None else "application/json"}
    answer = httpx.request(method, server.url + url.replace("{n}", HUGE), content=content, headers=headers, timeout=30)
    assert answer.status_code == 422, (answer.status_code, answer.text)
    assert "Traceback" not in answer.text and "Internal Server Error" not in answer.text


def test_the_list_is_every_integer_parameter_of_the_server(served: tuple[Server, str]) -> None:
    server, _ = served
    spec = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    found = {
        (method.upper(), path, parameter["name"])
        for path, methods in spec["paths"].items()
        for method, operation in methods.items()
        for parameter in operation.get("parameters", [])
        if parameter.get("schema", {}).get("type") == "integer"
    }
    assert found == {(method, path, name) for method, path, name, _url, _body in INTEGER_PARAMETERS}
    # and each is bounded where the server says so
    for method, path, name in found:
        [parameter] = [p for p in spec["paths"][path][method.lower()]["parameters"] if p["name"] == name]
        assert parameter["schema"].get("maximum") == 2**31 - 1, (method, path, parameter)


class _StubServer(ThreadingHTTPServer):
    """A worker API that hands out one job whose ``limits`` no sandbox knows (grading it raises), then no more; it records what it is sent."""

    def __init__(self, job: dict[str, Any], upload: bytes) -> None:
        super().__init__(("127.0.0.1", 0), _StubHandler)
        self.job, self.upload = job, upload
        self.claims = 0
        self.results: list[dict[str, Any]] = []
        self.lock = threading.Lock()


class _StubHandler(BaseHTTPRequestHandler):
    server: _StubServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _answer(self, status: int, body: dict[str, Any] | bytes | None = None) -> None:
        data = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header(HEADER, str(WORKER_PROTOCOL))  # a server of the worker's protocol
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/api/v1/worker/fingerprint":  # what the worker signs its statement over
            self._answer(200, {"worker": "w", "competition": "c", "fingerprint": None})
            return
        self._answer(200, self.server.upload) if self.path.endswith("/upload?attempt=1") else self._answer(404)

    def do_POST(self) -> None:
        sent = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/api/v1/worker/key":
            self._answer(200, {"status": "recorded"})
        elif self.path == "/api/v1/worker/fingerprint":  # bound (a stub takes any)
            self._answer(200, {"worker": "w", "competition": "c", "fingerprint": "0" * 64})
        elif self.path == "/api/v1/worker/claim":
            with self.server.lock:
                self.server.claims += 1
                first = self.server.claims == 1
            if first:
                self._answer(200, self.server.job)
            else:
                threading.Event().wait(0.2)  # a long-poll that found nothing
                self._answer(204)
        elif self.path == "/api/v1/worker/shards/claim":
            self._answer(204)
        elif self.path.endswith("/heartbeat"):
            self._answer(200, {"lease_expires_at": None})
        elif self.path.endswith("/result"):
            with self.server.lock:
                self.server.results.append(json.loads(sent))
            self._answer(200, {"status": "requeued", "state": "queued"})
        else:
            self._answer(404)


def test_a_worker_whose_grade_raises_posts_infra_and_claims_the_next_job(tmp_path: Path) -> None:
    key = BlindingKey(bytes(range(32)))
    copy = tmp_path / "copy"
    mini = resolve_benchmark("mini")
    export_worker_data(mini, ["text2code"], ["test"], key, copy)
    judged = pseudonymous_judged(key, "text2code", mini.task("text2code").qrels("test"))
    upload = b"never opened: the grade fails before it unpacks anything"
    job = {
        "protocol": WORKER_PROTOCOL,
        "competition": "c",
        "submission_id": "s1",
        "attempt": 1,
        "lease_expires_at": None,
        "lease_s": 60,
        "heartbeat_s": 5,
        "upload_sha256": hashlib.sha256(upload).hexdigest(),
        "benchmark": "mini",
        "tasks": ["text2code"],
        "split": "test",
        "track": "hidden",
        # a field the server's schema allows (any object) but no sandbox knows: building the grade's limits raises
        "limits": {"no_such_limit": 1},
        "judged": {"text2code": judged},
        "ranking_digests": {"text2code": load_benchmark_folder(copy).task("text2code").ranking_digest(judged)},
    }
    stub = _StubServer(job, upload)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{stub.server_address[1]}"
    args = ["worker", "--server", url, "--worker-token", "t", "--key-dir", str(tmp_path / "keys"), "--data", str(copy), "--min-free-disk", "1"]
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen([sys.executable, "-c", Server.PROGRAM, *args], stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        wait_for(lambda: (stub.results and stub.claims >= 3) or worker.poll() is not None, timeout=120, what="a result and more claims")
        assert worker.poll() is None, log.read_text()[-3000:]  # still serving
        [posted] = stub.results
        result = WorkerResult.model_validate(posted)
        assert (result.attempt, result.failure_code, result.facts, result.runs) == (1, FailureCode.INFRA, None, {})
        assert result.message.startswith("the worker failed unexpectedly: TypeError"), result.message
        pem = worker_public_key_path(tmp_path / "keys").read_text(encoding="ascii")
        assert verify_result(
            pem,
            result.signature,
            submission_id="s1",
            attempt=1,
            upload_sha256=job["upload_sha256"],
            facts=None,
            runs={},
            failure_code=result.failure_code,
            message=result.message,
        )
        assert "Traceback" in log.read_text()  # the worker's own log keeps the traceback; the server got one line
    finally:
        worker.terminate()
        try:
            worker.wait(15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(5)
        stub.shutdown()
        stub.server_close()
