"""A worker's part in sharded grades: run shard jobs, and coordinate the attempt it claimed.

:func:`work_one` claims one shard job (any submission's; a task's jobs go to workers of one
fingerprint), fetches the upload (and, for a shard, the task's query vectors, checked by their
sha256 and a size cap: fetched while the child encodes the documents, since a shard may be claimed
while its query job still runs, and handed to the child once in, :class:`_VectorsInbox`), runs it in a stoppable forked child (:func:`_in_child`,
:func:`grader.hosting.worker.child.run_in_child`) in which the submitted model runs in the
runner image's sandbox over this worker's pseudonymous data copy, under the competition's
limits per job (:mod:`grader.grading.shard_sandbox`), and puts its output: the query vectors,
or the shard's top-k and boundary ties as a compact run with scores. A participant's fault (``MODEL_ERROR``, ``TIMEOUT``...) is reported
as the job's failure, which fails its task; anything else is ``INFRA`` and the job is re-run alone. Query vectors that
do not fit a shard's documents are another worker's word: the shard job encodes the queries itself, and only a
mismatch it reproduces is ``MODEL_ERROR``; otherwise it reports the vectors suspect (``INFRA``; the server re-runs
the task's query job).

:func:`coordinate` is what the worker that claimed a sharded submission does instead of ranking
it: it runs shard jobs too until every task is done, then returns the result naming the runs the
server merged (the server scores them as any run).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from grader import jsonio
from grader.errors import DimensionMismatch, GraderError, SuspectQueries, TaskFailure, failure_code
from grader.failures import FailureCode, code_or_infra
from grader.files import atomic_write_bytes
from grader.grading.cost import RankCost
from grader.hosting.allocator import release_job_memory
from grader.hosting.environment import environment
from grader.hosting.errors import WorkerProtocolMismatch
from grader.hosting.protocol.messages import UNBOUND, Job, WorkerResult
from grader.hosting.protocol.progress import task_words
from grader.hosting.protocol.shard_messages import (
    QUERIES_SHA256,
    SHARD_COST,
    ShardClaimRequest,
    ShardFailure,
    ShardGradeStatus,
    ShardJobMessage,
    ShardTry,
)
from grader.hosting.protocol.version import checked_job
from grader.hosting.protocol.worker_data import copy_key
from grader.hosting.results.grading_adapter import DEPTH, limits_from_json
from grader.hosting.worker.child import run_in_child
from grader.hosting.worker.claim_throttle import ClaimThrottled, raise_if_throttled, wait_out
from grader.hosting.worker.engine_gate import engine_up
from grader.hosting.worker.fingerprint import worker_fingerprint
from grader.hosting.worker.hygiene import copy_mismatch
from grader.hosting.worker.upload_cache import UPLOADS
from grader.reports.model import format_timestamp
from grader.reports.pieces import Failure
from grader.submissions.archive import open_submission, unpack_limits
from grader.submissions.manifest import OnnxManifest, load_manifest

log = logging.getLogger("grader.worker")
#: What a shard job's child hands back: the file it wrote its output to, or a failure code, message and the sha256 of
#: query vectors it found suspect; and what its container used (:func:`grader.grading.shard_cost.job_figures`), or None.
#: The output goes by file, not through the pipe: a shard's run at CoIR's scale is hundreds of MB (31k queries at depth
#: 1,000), which the pipe made the worker hold twice (its pickle and its bytes) before the put: a worker past 1 GiB.
Outcome = tuple[Path | None, str, str, str | None, dict[str, Any] | None]
#: Seconds between looks at a sharded attempt's progress while no shard job is free.
POLL_S = 0.5
#: Seconds between a shard job's asks for its query vectors while their query job runs.
VECTORS_POLL_S = 1.0
#: Seconds between the child's looks for the query vectors once its documents are encoded.
INBOX_POLL_S = 0.1
#: What :meth:`ShardApi.query_vectors` answers while the query job runs.
PENDING = "pending"


def fingerprint_digest() -> str:
    """The sha256 of this machine's fingerprint (:func:`grader.hosting.worker.fingerprint.worker_fingerprint`): what a claim names.

    The same canonical JSON as the server's digest of the fingerprint a worker states
    (``services.replication.fingerprint_digest``): the digest the server binds to the worker, which every claim must name.
    """
    return hashlib.sha256(jsonio.dumps(worker_fingerprint(), sort_keys=True, ensure_ascii=True).encode("ascii")).hexdigest()


class FingerprintUnbound(Exception):
    """The server holds no fingerprint bound to this worker (the host reset it): state it again, then claim."""


def check_claim(response: httpx.Response) -> None:
    """Nothing for any answer to a claim but a 409 of the fingerprint, which raises.

    :class:`FingerprintUnbound` when none is bound (the worker states it again); SystemExit with the server's line
    when another is bound: a worker that claims again under the same fingerprint would only be refused again.
    """
    if response.status_code != 409:
        return
    try:
        detail = str(response.json().get("detail", ""))[:500]
    except ValueError:
        detail = response.text[:500]
    if detail == UNBOUND or detail.endswith(f": {UNBOUND}"):  # the server's claim of many competitions names the competition first
        raise FingerprintUnbound(detail)
    raise SystemExit(f"the server refused this worker's claim: {detail}")


def _capped(response: httpx.Response, what: str, cap: int) -> bytes:
    """A streamed answer's body, read in 1 MiB chunks and refused (INFRA) past ``cap`` bytes: a server's word is bounded."""
    data = bytearray()
    for chunk in response.iter_bytes(1 << 20):
        data += chunk
        if len(data) > cap:
            raise TaskFailure(FailureCode.INFRA, f"the job's {what} is larger than {cap} bytes")
    return bytes(data)


class ShardApi:
    """The shard routes of one server, over a worker's authenticated client."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    def claim(self, fingerprint: str, wait_s: float = 0.0) -> ShardJobMessage | None:
        body = ShardClaimRequest(fingerprint=fingerprint, wait_s=wait_s).model_dump()
        response = self.http.post("/api/v1/worker/shards/claim", json=body, timeout=wait_s + 30)
        if response.status_code == 204:
            return None
        raise_if_throttled(response)
        check_claim(response)
        response.raise_for_status()
        return ShardJobMessage.model_validate(checked_job(response.content, str(self.http.base_url).rstrip("/")))

    def heartbeat(self, job: ShardJobMessage) -> bool:
        response = self.http.post(f"/api/v1/worker/shards/{job.job_id}/heartbeat", json=ShardTry(tries=job.tries).model_dump())
        return response.status_code != 409

    def fetch_upload(self, job: ShardJobMessage, target: Path) -> str:
        """Write a held job's upload to ``target`` as it arrives, 1 MiB at a time (refused INFRA past the job's
        ``max_unpacked_bytes``: a server's word is bounded); its sha256."""
        digest, size = hashlib.sha256(), 0
        with self.http.stream("GET", f"/api/v1/worker/shards/{job.job_id}/upload", params={"tries": job.tries}) as response:
            response.raise_for_status()
            with target.open("wb") as handle:
                for chunk in response.iter_bytes(1 << 20):
                    size += len(chunk)
                    if size > job.max_unpacked_bytes:
                        raise TaskFailure(FailureCode.INFRA, f"the job's upload is larger than {job.max_unpacked_bytes} bytes")
                    digest.update(chunk)
                    handle.write(chunk)
        return digest.hexdigest()

    def query_vectors(self, job: ShardJobMessage) -> tuple[bytes, str] | str | None:
        """A held shard job's query vectors and the sha256 the server names; :data:`PENDING` while its query job runs;
        None when the try is stale (or was released: its query job went back to the queue)."""
        with self.http.stream("GET", f"/api/v1/worker/shards/{job.job_id}/queries", params={"tries": job.tries}) as response:
            if response.status_code == 202:
                return PENDING
            if response.status_code == 409:
                return None
            response.raise_for_status()
            return _capped(response, "query vectors", job.max_query_bytes), response.headers.get(QUERIES_SHA256, "")[:64]

    def put_output(self, job: ShardJobMessage, data: bytes | Path, cost: dict[str, Any] | None = None) -> str | None:
        """Put the job's output, bytes or a file streamed 1 MiB at a time (and what it cost, in the :data:`SHARD_COST`
        header); its sha256, or None when stale."""
        headers = {} if cost is None else {SHARD_COST: jsonio.dumps(cost, sort_keys=True)}
        url, tries = f"/api/v1/worker/shards/{job.job_id}/output", {"tries": job.tries}
        if isinstance(data, bytes):
            response = self.http.put(url, params=tries, content=data, headers=headers)
        else:
            with data.open("rb") as handle:  # a stated length: streamed, not chunked (the server's body cap reads it first)
                size = os.fstat(handle.fileno()).st_size
                chunks = iter(partial(handle.read, 1 << 20), b"")
                response = self.http.put(url, params=tries, content=chunks, headers={**headers, "Content-Length": str(size)})
        if response.status_code == 409:
            return None
        response.raise_for_status()
        return str(response.json()["sha256"])

    def fail(self, job: ShardJobMessage, code: FailureCode, message: str, *, suspect_queries: str | None = None) -> None:
        failure = ShardFailure(tries=job.tries, failure_code=code, message=message[-20_000:], suspect_queries=suspect_queries)
        body = failure.model_dump(exclude_none=True)  # no suspect_queries unless set: the body a server before it read
        self.http.post(f"/api/v1/worker/shards/{job.job_id}/failure", json=body)

    def status(self, submission_id: str, attempt: int) -> ShardGradeStatus:
        response = self.http.post(f"/api/v1/worker/jobs/{submission_id}/shards", json={"attempt": attempt})
        response.raise_for_status()
        return ShardGradeStatus.model_validate_json(response.content)


def _runner(folder: Path, job: ShardJobMessage | Job, copy: Path, *, depth: int) -> Any:
    """The runner image prepared for the submission unpacked in ``folder``, on this worker's copy."""
    from grader.data.registry import resolve_benchmark
    from grader.grading.backends import RUNNER_IMAGE
    from grader.grading.shard_sandbox import ShardRunner

    manifest = load_manifest(folder)
    if not isinstance(manifest, OnnxManifest):
        raise TaskFailure(FailureCode.INFRA, "a shard job of a submission that is not ONNX")
    limits = limits_from_json(job.limits)
    return ShardRunner.prepare(
        folder, manifest, resolve_benchmark(str(copy)), copy_key(copy), limits=limits, split=job.split, depth=depth, runner_image=RUNNER_IMAGE
    )


def _compute(
    job: ShardJobMessage,
    upload: Path,
    queries: bytes | None,
    copy: Path,
    output: Path,
    *,
    waited: Callable[[], tuple[bytes, str]] | None = None,
    spent: list[RankCost] | None = None,
) -> None:
    """The job's output (in the child), written whole to ``output``: query vectors, or the shard's compact run with
    scores (written a block of queries at a time), both from the runner container.

    A shard searches with ``queries`` (checked by ``job.queries_sha256``), or, without them, with what ``waited``
    returns once its documents are encoded (the vectors and their sha256: :class:`_VectorsInbox`). What its container
    used is appended to ``spent``.
    """
    from grader.data.registry import resolve_benchmark
    from grader.grading.shard_sandbox import encode_queries, judge_mismatch, rank_shard
    from grader.retrieval.shard_exchange import unpack_vectors

    # The pseudonymous copy the server exported: the ids the server decodes the runs against (checked against the pin
    # by the worker before the fork: _in_child).
    task = resolve_benchmark(str(copy)).task(job.task)
    bounds = unpack_limits(upload.stat().st_size, ratio=job.max_unpack_ratio, cap=job.max_unpacked_bytes)
    received: list[str] = []

    def vectors() -> Any:
        if queries is not None and job.queries_sha256 is not None:
            data, sha256 = queries, job.queries_sha256
        elif waited is not None:
            data, sha256 = waited()
        else:
            raise TaskFailure(FailureCode.INFRA, f"shard job {job.job_id}: no query vectors to search with")
        received.append(sha256)
        return unpack_vectors(data, sha256=sha256, rows=len(job.judged), max_bytes=job.max_query_bytes)

    with open_submission(upload, bounds) as folder:
        runner = _runner(folder, job, copy, depth=job.depth)
        if job.number < 0:
            atomic_write_bytes(output, encode_queries(runner, task, job.judged, spent=spent))
            return
        try:
            rank_shard(
                runner, task, job.number, vectors, shard_documents=job.shard_documents, search_memory=job.search_memory, target=output, spent=spent
            )
        except DimensionMismatch as mismatch:  # another worker's vectors: the model's fault only if it happens here too
            raise judge_mismatch(runner, task, job.judged, mismatch, received=received[-1]) from None


def _child_work(job: ShardJobMessage, upload: Path, inbox: _VectorsInbox | None, copy: Path, output: Path) -> Outcome:
    """In the child: (``output``, "", "", None) once the job's output is written whole there, or (None, failure code,
    message, suspect query vectors' sha256 or None); a participant's fault keeps its code, anything of ours is INFRA;
    with what the job's container used, when it ran."""
    from grader.grading.shard_cost import job_figures

    spent: list[RankCost] = []
    try:
        _compute(job, upload, None, copy, output, waited=None if inbox is None else inbox.wait, spent=spent)
        return output, "", "", None, job_figures(spent[-1]) if spent else None
    except GraderError as error:
        message = error.detail if isinstance(error, TaskFailure) else str(error)
        return None, failure_code(error).value, message, error.sha256 if isinstance(error, SuspectQueries) else None, None


def _in_child(job: ShardJobMessage, upload: Path, inbox: _VectorsInbox | None, work: Path, lost: Callable[[], bool]) -> Outcome | None:
    """Run the job in a stoppable forked child (:func:`grader.hosting.worker.child.run_in_child`); None when it went stale."""
    folder = environment().worker_data
    if not folder:
        return None, FailureCode.INFRA.value, "this worker has no data copy (set GRADER_WORKER_DATA)", None, None
    # Checked here, not in the child: the worker remembers its copy's digests; a child hashed the corpus every job.
    mismatch = copy_mismatch(Path(folder), {job.task: (job.judged, job.ranking_digest)}, split=job.split)
    if mismatch is not None:
        return None, FailureCode.INFRA.value, mismatch, None, None
    return run_in_child(
        partial(_child_work, job, upload, inbox, Path(folder), work / "output"),
        abandon=lost,
        ended=lambda status: (None, FailureCode.INFRA.value, f"the shard process ended without an output (exit status {status})", None, None),
        on_orphan=partial(shutil.rmtree, work, ignore_errors=True),
        name="grader-shard",
    )


class _VectorsInbox:
    """Where a shard job's query vectors arrive, in its scratch folder: the worker fetches them (:class:`_VectorsFetch`)
    while the child encodes the documents, and the child, once they are encoded, waits for them (:meth:`wait`).

    One file named by the vectors' sha256, written whole (an atomic rename), so the child never reads half of it.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir()

    def put(self, data: bytes, sha256: str) -> None:
        atomic_write_bytes(self.folder / "vectors", data)
        atomic_write_bytes(self.folder / "sha256", sha256.encode("ascii", "replace"))

    def wait(self) -> tuple[bytes, str]:
        """The vectors and their sha256, once in (the worker stops the child if the job goes stale meanwhile)."""
        named = self.folder / "sha256"
        while not named.is_file():
            time.sleep(INBOX_POLL_S)
        return (self.folder / "vectors").read_bytes(), named.read_text("ascii")


class _VectorsFetch(threading.Thread):
    """Fetches a shard job's query vectors into its inbox, asking again while its query job runs; sets ``lost`` when the
    server calls the try stale or released (the child is then stopped: the job goes on elsewhere or later)."""

    def __init__(self, api: ShardApi, job: ShardJobMessage, inbox: _VectorsInbox) -> None:
        super().__init__(daemon=True)
        self.api, self.job, self.inbox = api, job, inbox
        self.done, self.lost = threading.Event(), threading.Event()
        self.failure: TaskFailure | None = None

    def run(self) -> None:
        while not self.done.is_set():
            try:
                found = self.api.query_vectors(self.job)
            except httpx.HTTPError as error:  # the server's hiccup: ask again (the heartbeat tells when the try is lost)
                log.warning("shard job %s try %s: query vectors: %s", self.job.job_id, self.job.tries, error)
                found = PENDING
            except TaskFailure as failure:  # vectors over their cap: the job stops here, its lease lapses (as a failed fetch's)
                self.failure = failure
                found = None
            except WorkerProtocolMismatch as error:
                log.error("%s", error)
                found = None
            if found is None:
                self.lost.set()
                return
            if not isinstance(found, str):
                self.inbox.put(*found)
                return
            self.done.wait(VECTORS_POLL_S)


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
            except WorkerProtocolMismatch as error:  # a server of another version now: it takes nothing of this job
                log.error("%s", error)
                self.lost.set()
                return


def upload_for(api: ShardApi, job: ShardJobMessage, target: Path) -> bool | None:
    """The job's upload at ``target``: this worker's kept copy (:data:`~grader.hosting.worker.upload_cache.UPLOADS`)
    when it holds one that hashes to the job's sha256, else fetched and kept. True once it is there; False when what
    came does not hash to the job's sha256; None when the try is no longer this worker's."""
    if UPLOADS.place(job.upload_sha256, target):
        # The server counts a try used (a lapse of its lease then costs a try) once its holder fetches the upload or
        # renews the lease: with no fetch, a renewal says so before the submission runs, or a job whose container
        # took its worker down within the first heartbeat would run again and again uncharged.
        if not api.heartbeat(job):
            return None
        log.debug("shard job %s: upload %s from this worker's kept copy", job.job_id, job.upload_sha256[:12])
        return True
    if api.fetch_upload(job, target) != job.upload_sha256:
        return False
    UPLOADS.keep(job.upload_sha256, target)
    return True


def run_job(api: ShardApi, job: ShardJobMessage) -> str:
    """Run one claimed shard job and put its output or its failure; what happened, in a word."""
    beat = _Beat(api, job)
    beat.start()
    try:
        with tempfile.TemporaryDirectory(prefix="grader-shard-") as scratch:
            work = Path(scratch)
            upload = work / "upload.tar.gz"
            got = upload_for(api, job, upload)
            if got is None:
                return "stale"
            if not got:
                api.fail(job, FailureCode.INFRA, "upload digest mismatch in transfer")
                return "infra"
            inbox = fetcher = None
            if job.number >= 0:  # the vectors come while the documents are encoded (the query job may still run)
                inbox = _VectorsInbox(work / "queries")
                fetcher = _VectorsFetch(api, job, inbox)
                fetcher.start()
            lost = beat.lost.is_set if fetcher is None else (lambda: beat.lost.is_set() or fetcher.lost.is_set())
            try:
                ran = _in_child(job, upload, inbox, work, lost)
            finally:
                if fetcher is not None:
                    fetcher.done.set()
            if fetcher is not None and fetcher.failure is not None:
                raise fetcher.failure
            if ran is None:
                return "stale"  # stopped, its container removed; the server handed the job on
            output, code, message, suspect, cost = ran
            if output is None:
                failed = code_or_infra(code)  # what the child process handed back is read, not trusted
                api.fail(job, failed, message, suspect_queries=suspect if failed is FailureCode.INFRA else None)
                return "suspect query vectors" if suspect and failed is FailureCode.INFRA else failed.value
            # Only this worker's own output file, in its own scratch folder: the child's path is not followed elsewhere.
            return "done" if api.put_output(job, work / "output", cost) is not None else "stale"
    except (httpx.HTTPError, TaskFailure) as error:
        log.warning("shard job %s try %s: %s", job.job_id, job.tries, error)
        return "infra"  # its lease lapses and the reaper re-queues it alone
    except WorkerProtocolMismatch:
        raise  # a server of another version: the worker stops (grader.hosting.worker.loop)
    except Exception as error:  # any other fault of this one job is the platform's: report it and keep serving
        log.exception("shard job %s try %s failed unexpectedly", job.job_id, job.tries)
        _report_infra(api, job, unexpected(error))
        return "infra"
    finally:
        beat.done.set()


def unexpected(error: Exception) -> str:
    """The message of an INFRA failure nothing expected: its type and words, bounded (the traceback stays in this worker's log)."""
    return f"the worker failed unexpectedly: {type(error).__name__}: {error}"[:2000]


def _report_infra(api: ShardApi, job: ShardJobMessage, message: str) -> None:
    """Report the job failed INFRA (re-run alone) as best it can; unreported, its lease lapses and the reaper re-queues it alone."""
    try:
        api.fail(job, FailureCode.INFRA, message)
    except httpx.HTTPError as error:
        log.warning("shard job %s try %s: INFRA not reported: %s", job.job_id, job.tries, type(error).__name__)


def work_one(api: ShardApi, fingerprint: str, wait_s: float = 0.0) -> bool:
    """Claim and run one shard job if one is free and this machine's engine answers (:func:`engine_up`); whether there was one."""
    if not engine_up():
        return False  # a job claimed now would only fail INFRA: the coordinator keeps polling, the worker loop waits
    job = api.claim(fingerprint, wait_s)
    if job is None:
        return False
    started = time.monotonic()
    outcome = run_job(api, job)
    log.info(
        "shard job %s (%s %s shard %s) try %s: %s in %.1f s",
        job.job_id,
        job.submission_id,
        job.task,
        job.number,
        job.tries,
        outcome,
        time.monotonic() - started,
    )
    release_job_memory()  # the job's upload, query vectors and output (and the put's cycle): freed now, not kept job after job
    return True


def task_failures(status: ShardGradeStatus) -> dict[str, tuple[FailureCode, str]]:
    """The failed tasks of a finished sharded attempt, each with its code and message, as the server states them.

    Read, never trusted: a code no :class:`FailureCode` names (a server's older or damaged row) is INFRA, so the
    attempt is re-run rather than this worker failing on it; a missing message is empty.
    """
    return {name: (code_or_infra(entry[0] if entry else None), entry[1] if len(entry) > 1 else "") for name, entry in status.failures.items()}


def _facts(upload: Path, job: Job, status: ShardGradeStatus, started: datetime) -> dict[str, Any]:
    """What the coordinator states about the sharded grade (subject, sandbox, labels, times, task failures): no score."""
    from grader.submissions.digest import submission_digest

    folder = environment().worker_data
    if not folder:
        raise TaskFailure(FailureCode.INFRA, "this worker has no data copy (set GRADER_WORKER_DATA)")
    bounds = unpack_limits(upload.stat().st_size, ratio=job.max_unpack_ratio, cap=job.max_unpacked_bytes)
    with open_submission(upload, bounds) as unpacked:
        manifest = load_manifest(unpacked)
        subject = {"kind": "onnx", "name": manifest.name, "digest": {"sha256": submission_digest(unpacked)}}
        labels = manifest.training.as_labels()
        # The shard jobs ran in the runner image's sandbox, staged under the copy's key: the settings an unsharded grade states.
        sandbox = _runner(unpacked, job, Path(folder), depth=DEPTH).sandbox_facts()
    tasks: dict[str, Any] = {name: {"failure": None} for name in status.runs}
    for name, (code, message) in task_failures(status).items():
        tasks[name] = {"failure": Failure(code, message, None).as_json()}
    return {
        "subject": subject,
        "sandbox": sandbox,
        "labels": labels,
        "started_at": format_timestamp(started),
        "finished_at": format_timestamp(datetime.now(UTC)),
        "tasks": tasks,
    }


def coordinate(
    api: ShardApi, job: Job, upload: Path, lost: Callable[[], bool], work: Callable[[ShardApi, str], bool] = work_one
) -> WorkerResult | None:
    """Run shard jobs (``work``: claim and run one if one is free) until the claimed sharded attempt is done; its result
    (None when it went stale or was cancelled)."""
    started = datetime.now(UTC)
    fingerprint = fingerprint_digest()
    shown: dict[str, str] = {}
    while True:
        if lost():
            return None
        try:
            status = api.status(job.submission_id, job.attempt)
        except httpx.HTTPError as error:  # the server's hiccup or a slow answer: ask again (the heartbeat tells when the attempt is lost)
            log.warning("%s attempt %s: shard status: %s: %s", job.submission_id, job.attempt, type(error).__name__, error)
            time.sleep(POLL_S)
            continue
        for entry in status.progress:  # a line per task each time one of its shards is ranked, in a participant's words
            if shown.get(entry.task) != (words := task_words(entry)):
                shown[entry.task] = words
                log.info("%s attempt %s: task %s", job.submission_id, job.attempt, words)
        if status.state == "stale":
            return None
        if status.state == "done":
            break
        try:
            claimed = work(api, fingerprint)
        except ClaimThrottled as throttled:  # the server asks for a pause: not a fault of this grade
            wait_out(throttled)
            continue
        if not claimed:
            time.sleep(POLL_S)
    infra = [name for name, (code, _message) in task_failures(status).items() if code is FailureCode.INFRA]
    if infra:
        return WorkerResult(
            attempt=job.attempt, failure_code=FailureCode.INFRA, message=f"shard jobs of {', '.join(infra)} failed for a platform reason"
        )
    try:
        facts = {**_facts(upload, job, status, started), "fingerprint": worker_fingerprint()}
        if status.cost is not None:  # the shard jobs' figures the server merged: the workers' word, checked again at scoring
            facts["cost"] = status.cost
    except GraderError as error:  # no data copy, or the runner image unusable here: the platform's, the attempt is re-run
        return WorkerResult(attempt=job.attempt, failure_code=FailureCode.INFRA, message=f"the sharded grade's facts: {error}")
    return WorkerResult(attempt=job.attempt, facts=facts, runs=status.runs)
