"""A worker's part in sharded grades (issue 23 item 1): run shard jobs, and coordinate the attempt it claimed.

:func:`work_one` claims one shard job (any submission's; a task's jobs go to workers of one
fingerprint), fetches the upload (and, for a shard, the task's query vectors, checked by their
sha256 and a size cap), runs it in a forked child bound by the competition's time limit and
memory (:func:`_in_child`), and puts its output: the query vectors, or the shard's top-k as a
compact run with scores. A participant's fault (``MODEL_ERROR``, ``TIMEOUT``...) is reported
as the job's failure, which fails its task; anything else is ``INFRA`` and the job is re-run alone.

:func:`coordinate` is what the worker that claimed a sharded submission does instead of ranking
it: it runs shard jobs too until every task is done, then returns the result naming the runs the
server merged (the server scores them as any run).
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import resource
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from grader import jsonio
from grader.errors import SubmissionError, TaskFailure, failure_code
from grader.failures import FailureCode
from grader.hosting.grading_adapter import limits_from_json
from grader.hosting.messages import Job, WorkerResult
from grader.hosting.shard_messages import ShardClaimRequest, ShardFailure, ShardGradeStatus, ShardJobMessage, ShardTry
from grader.hosting.worker.fingerprint import worker_fingerprint
from grader.reports.model import format_timestamp
from grader.reports.pieces import Failure
from grader.submissions.archive import open_submission, unpack_limits
from grader.submissions.manifest import OnnxManifest, load_manifest

log = logging.getLogger("grader.worker")
#: Seconds between looks at a sharded attempt's progress while no shard job is free.
POLL_S = 0.5


def fingerprint_digest() -> str:
    """The sha256 of this machine's fingerprint (:func:`grader.hosting.worker.fingerprint.worker_fingerprint`): what a claim names."""
    return hashlib.sha256(jsonio.dumps(worker_fingerprint(), sort_keys=True).encode()).hexdigest()


class ShardApi:
    """The shard routes of one server, over a worker's authenticated client."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    def claim(self, fingerprint: str, wait_s: float = 0.0) -> ShardJobMessage | None:
        body = ShardClaimRequest(fingerprint=fingerprint, wait_s=wait_s).model_dump()
        response = self.http.post("/api/v1/worker/shards/claim", json=body, timeout=wait_s + 30)
        if response.status_code == 204:
            return None
        response.raise_for_status()
        return ShardJobMessage.model_validate_json(response.content)

    def heartbeat(self, job: ShardJobMessage) -> bool:
        response = self.http.post(f"/api/v1/worker/shards/{job.job_id}/heartbeat", json=ShardTry(tries=job.tries).model_dump())
        return response.status_code != 409

    def fetch(self, job: ShardJobMessage, what: str, cap: int) -> bytes:
        """``upload`` or ``queries`` of a held job, at most ``cap`` bytes."""
        data = bytearray()
        with self.http.stream("GET", f"/api/v1/worker/shards/{job.job_id}/{what}", params={"tries": job.tries}) as response:
            response.raise_for_status()
            for chunk in response.iter_bytes(1 << 20):
                data += chunk
                if len(data) > cap:
                    raise TaskFailure(FailureCode.INFRA, f"the job's {what} is larger than {cap} bytes")
        return bytes(data)

    def put_output(self, job: ShardJobMessage, data: bytes) -> str | None:
        response = self.http.put(f"/api/v1/worker/shards/{job.job_id}/output", params={"tries": job.tries}, content=data)
        if response.status_code == 409:
            return None
        response.raise_for_status()
        return str(response.json()["sha256"])

    def fail(self, job: ShardJobMessage, code: str, message: str) -> None:
        body = ShardFailure(tries=job.tries, failure_code=code, message=message[-20_000:]).model_dump()
        self.http.post(f"/api/v1/worker/shards/{job.job_id}/failure", json=body)

    def status(self, submission_id: str, attempt: int) -> ShardGradeStatus:
        response = self.http.post(f"/api/v1/worker/jobs/{submission_id}/shards", json={"attempt": attempt})
        response.raise_for_status()
        return ShardGradeStatus.model_validate_json(response.content)


def _compute(job: ShardJobMessage, upload: Path, queries: bytes | None, work: Path) -> bytes:
    """The job's output (in the child): query vectors, or the shard's compact run with scores."""
    from grader.data.registry import resolve_benchmark
    from grader.grading.ranking import ranking_inputs
    from grader.grading.shard_work import encode_query_job, rank_shard_job
    from grader.retrieval.encoder import OnnxEncoder
    from grader.retrieval.shard_exchange import unpack_vectors

    task = resolve_benchmark(job.benchmark).task(job.task)
    if task.ranking_digest(job.judged) != job.ranking_digest:
        raise TaskFailure(FailureCode.INFRA, f"task {job.task}: this worker's data does not match the pin")
    inputs = ranking_inputs(task, job.judged)
    bounds = unpack_limits(upload.stat().st_size, ratio=job.max_unpack_ratio, cap=job.max_unpacked_bytes)
    with open_submission(upload, bounds) as folder:
        manifest = load_manifest(folder)
        if not isinstance(manifest, OnnxManifest):
            raise TaskFailure(FailureCode.INFRA, "a shard job of a submission that is not ONNX")
        encoder = OnnxEncoder.load(folder, manifest, threads=1)
        if job.number < 0:
            return encode_query_job(encoder, inputs.queries, prefix=manifest.query_prefix)
        assert queries is not None and job.queries_sha256 is not None
        vectors = unpack_vectors(queries, sha256=job.queries_sha256, rows=len(inputs.queries), max_bytes=job.max_query_bytes)
        return rank_shard_job(
            encoder,
            inputs.documents,
            inputs.queries,
            job.number,
            vectors,
            shard_documents=job.shard_documents,
            depth=job.depth,
            folder=work,
            prefix=manifest.document_prefix,
            search_memory=job.search_memory,
        )


def _child_main(job: ShardJobMessage, upload: Path, queries: bytes | None, work: Path) -> None:
    """The forked child: bound its address space, compute, leave ``output`` or ``error.json`` in ``work``."""
    memory = int(job.limits.get("memory_bytes", 8 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    try:
        (work / "output").write_bytes(_compute(job, upload, queries, work))
    except (TaskFailure, SubmissionError) as error:
        message = error.detail if isinstance(error, TaskFailure) else str(error)
        jsonio.write_json(work / "error.json", {"code": failure_code(error), "message": message}, ensure_ascii=True)
    except MemoryError:
        jsonio.write_json(work / "error.json", {"code": FailureCode.OOM.value, "message": "an allocation was refused (the memory limit)"})


def _in_child(job: ShardJobMessage, upload: Path, queries: bytes | None, work: Path, lost: Callable[[], bool]) -> tuple[bytes | None, str, str]:
    """Run the job in a forked child under the time limit: (output, code, message); output None on a failure (code, message)."""
    limit_s = float(job.limits.get("time_limit_s", 3600.0))
    child = multiprocessing.get_context("fork").Process(target=_child_main, args=(job, upload, queries, work), name="grader-shard")
    child.start()
    deadline = time.monotonic() + limit_s
    while child.is_alive() and time.monotonic() < deadline and not lost():
        child.join(0.2)
    if child.is_alive():
        child.kill()
        child.join()
        if lost():
            return None, FailureCode.INFRA.value, "stale: the shard job was handed on"
        return None, FailureCode.TIMEOUT.value, f"the shard job ran past the time limit of {limit_s:.0f} s"
    if (work / "output").is_file():
        return (work / "output").read_bytes(), "", ""
    if (work / "error.json").is_file():
        error = jsonio.load_file(work / "error.json")
        return None, str(error["code"]), str(error["message"])
    return None, FailureCode.INFRA.value, f"the shard process ended without an output (exit status {child.exitcode})"


class _Beat(threading.Thread):
    """Renews a shard job's lease; sets ``lost`` when the server calls the try stale."""

    def __init__(self, api: ShardApi, job: ShardJobMessage) -> None:
        super().__init__(daemon=True)
        self.api, self.job = api, job
        self.done, self.lost = threading.Event(), threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.job.heartbeat_s):
            try:
                if not self.api.heartbeat(self.job):
                    self.lost.set()
                    return
            except httpx.HTTPError:
                continue


def run_job(api: ShardApi, job: ShardJobMessage) -> str:
    """Run one claimed shard job and put its output or its failure; what happened, in a word."""
    beat = _Beat(api, job)
    beat.start()
    try:
        with tempfile.TemporaryDirectory(prefix="grader-shard-") as scratch:
            work = Path(scratch)
            upload = work / "upload.tar.gz"
            upload.write_bytes(api.fetch(job, "upload", job.max_unpacked_bytes))
            if hashlib.sha256(upload.read_bytes()).hexdigest() != job.upload_sha256:
                api.fail(job, FailureCode.INFRA.value, "upload digest mismatch in transfer")
                return "infra"
            queries = None if job.number < 0 else api.fetch(job, "queries", job.max_query_bytes)
            output, code, message = _in_child(job, upload, queries, work, beat.lost.is_set)
        if output is None:
            api.fail(job, code, message)
            return code
        return "done" if api.put_output(job, output) is not None else "stale"
    except (httpx.HTTPError, TaskFailure) as error:
        log.warning("shard job %s try %s: %s", job.job_id, job.tries, error)
        return "infra"  # its lease lapses and the reaper re-queues it alone
    finally:
        beat.done.set()


def work_one(api: ShardApi, fingerprint: str, wait_s: float = 0.0) -> bool:
    """Claim and run one shard job if one is free; whether there was one."""
    job = api.claim(fingerprint, wait_s)
    if job is None:
        return False
    log.info("shard job %s (%s %s shard %s) try %s: %s", job.job_id, job.submission_id, job.task, job.number, job.tries, run_job(api, job))
    return True


def _facts(upload: Path, job: Job, status: ShardGradeStatus, started: datetime) -> dict[str, Any]:
    """What the coordinator states about the sharded grade (subject, sandbox, labels, times, task failures): no score."""
    from grader.submissions.digest import submission_digest

    bounds = unpack_limits(upload.stat().st_size, ratio=job.max_unpack_ratio, cap=job.max_unpacked_bytes)
    with open_submission(upload, bounds) as folder:
        manifest = load_manifest(folder)
        subject = {"kind": "onnx", "name": manifest.name, "digest": {"sha256": submission_digest(folder)}}
        labels = manifest.training.as_labels()
    tasks: dict[str, Any] = {name: {"failure": None} for name in status.runs}
    for name, (code, message) in status.failures.items():
        tasks[name] = {"failure": Failure(FailureCode(code), message, None).as_json()}
    limits = {**limits_from_json(job.limits).as_report(), "enforcement": "shard jobs in forked children: time limit and address space per shard"}
    return {
        "subject": subject,
        "sandbox": {"kind": "none", "threads": 1, "isolated": False, "sharded": True, "limits": limits},
        "labels": labels,
        "started_at": format_timestamp(started),
        "finished_at": format_timestamp(datetime.now(UTC)),
        "tasks": tasks,
    }


def coordinate(api: ShardApi, job: Job, upload: Path, lost: Callable[[], bool]) -> WorkerResult | None:
    """Run shard jobs until the claimed sharded attempt is done; its result (None when it went stale or was cancelled)."""
    started = datetime.now(UTC)
    fingerprint = fingerprint_digest()
    while True:
        if lost():
            return None
        status = api.status(job.submission_id, job.attempt)
        if status.state == "stale":
            return None
        if status.state == "done":
            break
        if not work_one(api, fingerprint):
            time.sleep(POLL_S)
    infra = [name for name, (code, _message) in status.failures.items() if code == FailureCode.INFRA.value]
    if infra:
        return WorkerResult(
            attempt=job.attempt, failure_code=FailureCode.INFRA.value, message=f"shard jobs of {', '.join(infra)} failed for a platform reason"
        )
    facts = {**_facts(upload, job, status, started), "fingerprint": worker_fingerprint()}
    return WorkerResult(attempt=job.attempt, facts=facts, runs=status.runs)
