"""The worker loop, over HTTP only (no database credentials): state the fingerprint, claim, fetch, grade with heartbeats, put the runs, post.

A worker states its machine's fingerprint once (:meth:`WorkerApi.state_fingerprint`, signed with its key
when it has one); the server binds it, and every claim names it. A claim the server refuses because none
is bound (the host reset it) makes the worker state it again; one refused because another is bound stops
the worker with the server's line.

A worker returns rankings, never scores: each ranked task's compact run is put apart
(:meth:`WorkerApi.put_run`), and the result names their digests (the server scores them).

A worker that dies mid-grade simply stops heartbeating; the server's reaper
re-queues the job. A heartbeat answered "stale or cancelled" stops the grade
at once (it runs in a child process: :mod:`grader.hosting.worker.child`) and
nothing is posted. A result the server calls stale (409) is dropped. Posting
is retried with back-off for three lease lengths: a server that was unreachable
for longer has re-queued the job, and then refuses the late result anyway.

Every request names this worker's protocol version and every answer is checked for the
server's (:mod:`grader.hosting.protocol.version`): a server of another version stops the
worker with one line naming both (:class:`WorkerProtocolMismatch`), before it claims anything.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import ValidationError

from grader.failures import FailureCode
from grader.hosting.allocator import release_job_memory, return_large_buffers
from grader.hosting.environment import environment
from grader.hosting.errors import WorkerProtocolMismatch
from grader.hosting.keyring.worker_signing import sign_fingerprint, sign_result
from grader.hosting.protocol.messages import (
    FINGERPRINT_PATH,
    ClaimRequest,
    FingerprintBinding,
    FingerprintStatement,
    HeartbeatRequest,
    Job,
    RunStored,
    TaskProgress,
    Verdict,
    WorkerResult,
)
from grader.hosting.protocol.version import HEADER, WORKER_PROTOCOL, answer_refusal, checked_job
from grader.hosting.protocol.worker_data import copy_key
from grader.hosting.results.grade_progress import PROGRESS_FILE, read_progress
from grader.hosting.results.grading_adapter import GradeOutcome, GradeRequest, limits_from_json
from grader.hosting.worker.child import grade_in_child
from grader.hosting.worker.claim_throttle import ClaimThrottled, raise_if_throttled, wait_out
from grader.hosting.worker.engine_gate import DOWN_WAIT_S, engine_up
from grader.hosting.worker.fingerprint import worker_fingerprint
from grader.hosting.worker.hygiene import data_mismatch, free_bytes, remove_submission_image
from grader.hosting.worker.shard_loop import FingerprintUnbound, ShardApi, check_claim, coordinate, fingerprint_digest, unexpected, work_one
from grader.hosting.worker.upload_cache import UPLOADS

log = logging.getLogger("grader.worker")


def worker_client(server: str, token: str) -> httpx.Client:
    """An HTTP client of ``server``'s worker API: this worker's token and protocol on every request, the server's checked on every answer.

    An answer of a server of another worker protocol raises :class:`WorkerProtocolMismatch` from the
    request that got it (:func:`grader.hosting.protocol.version.answer_refusal`), whatever the caller expected.
    """
    server = server.rstrip("/")

    def check_answer(response: httpx.Response) -> None:
        why = answer_refusal(response.status_code, response.headers.get(HEADER), server)
        if why is not None:
            raise WorkerProtocolMismatch(why)

    return httpx.Client(
        base_url=server,
        headers={"Authorization": f"Bearer {token}", HEADER: str(WORKER_PROTOCOL)},
        timeout=httpx.Timeout(60.0, connect=5.0),
        event_hooks={"response": [check_answer]},
    )


class WorkerApi:
    """The worker API of one server, for a worker signing with ``key`` (a remote worker) or none (a local one)."""

    def __init__(self, server: str, token: str, key: Ed25519PrivateKey | None = None) -> None:
        self.http = worker_client(server, token)
        self.key = key
        #: The digest of the fingerprint the server holds bound to this worker; None until stated (again, after a host's reset).
        self.fingerprint: str | None = None

    def state_fingerprint(self) -> str:
        """State this machine's fingerprint (signed with the key, if any) and return its digest, which every claim names.

        The first statement binds it to this worker; later ones find it bound. A refusal stops the worker with the
        server's line (SystemExit): another fingerprint is bound (a host's reset is the remedy), or the key did not sign it.
        """
        answer = self.http.get(FINGERPRINT_PATH)
        answer.raise_for_status()
        binding = FingerprintBinding.model_validate_json(answer.content)  # what to sign over: this worker's name, the competition's
        stated = worker_fingerprint()
        signature = None
        if self.key is not None:
            signature = sign_fingerprint(self.key, worker=binding.worker, competition=binding.competition, fingerprint=stated)
        response = self.http.post(FINGERPRINT_PATH, json=FingerprintStatement(fingerprint=stated, signature=signature).model_dump())
        if response.status_code in (403, 409):
            raise SystemExit(f"the server refused this worker's fingerprint: {response.json().get('detail', '')}"[:600])
        response.raise_for_status()
        self.fingerprint = fingerprint_digest()
        return self.fingerprint

    def bound_fingerprint(self) -> str:
        """The digest of the fingerprint bound to this worker, stated first when the server holds none for it."""
        return self.fingerprint or self.state_fingerprint()

    def claim(self, wait_s: float) -> Job | None:
        # The claim names the bound fingerprint: a replica of a job goes only to a worker of equal fingerprint.
        request = ClaimRequest(wait_s=wait_s, fingerprint=self.bound_fingerprint())
        response = self.http.post("/api/v1/worker/claim", json=request.model_dump(), timeout=wait_s + 30)
        if response.status_code == 204:
            return None
        raise_if_throttled(response)
        try:
            check_claim(response)
        except FingerprintUnbound:
            self.fingerprint = None  # the host reset it: the next claim states it again
            raise
        response.raise_for_status()
        return Job.model_validate(checked_job(response.content, str(self.http.base_url).rstrip("/")))

    def heartbeat(self, submission_id: str, attempt: int, progress: list[TaskProgress] | None = None) -> bool:
        """Renew the lease, reporting each task's ``progress``; False when the server calls the attempt stale or cancelled."""
        beat = HeartbeatRequest(attempt=attempt, progress=progress or [])
        response = self.http.post(f"/api/v1/worker/jobs/{submission_id}/heartbeat", json=beat.model_dump(mode="json", exclude_none=True))
        if response.status_code == 409:
            return False
        response.raise_for_status()
        return True

    def download(self, submission_id: str, attempt: int, target: Path) -> str:
        digest = hashlib.sha256()
        with self.http.stream("GET", f"/api/v1/worker/jobs/{submission_id}/upload", params={"attempt": attempt}) as response:
            response.raise_for_status()
            with open(target, "wb") as out:
                for chunk in response.iter_bytes(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
        return digest.hexdigest()

    def put_run(self, submission_id: str, attempt: int, task: str, path: Path) -> str | None:
        """Stream one task's compact run to the server; its sha256 as the server stored it, None when stale."""
        size = path.stat().st_size

        def chunks() -> Iterator[bytes]:
            with open(path, "rb") as handle:
                yield from iter(lambda: handle.read(1 << 20), b"")

        response = self.http.put(
            f"/api/v1/worker/jobs/{submission_id}/runs/{task}",
            params={"attempt": attempt},
            content=chunks(),
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
        )
        if response.status_code == 409:
            return None
        response.raise_for_status()
        return RunStored.model_validate_json(response.content).sha256

    def post_result(self, submission_id: str, result: WorkerResult) -> str:
        # The server scores the runs before it answers (grader.grading.score_process: at most 600 s). The timeout is the
        # plain (connect, read, write, pool) tuple, not an httpx.Timeout: a client of another httpx build (starlette's
        # TestClient is an httpx2.Client) refuses a foreign Timeout object.
        response = self.http.post(f"/api/v1/worker/jobs/{submission_id}/result", json=result.model_dump(), timeout=RESULT_TIMEOUT)
        if response.status_code == 409:
            return "stale"
        if response.status_code == 403:
            return "refused"
        response.raise_for_status()
        return Verdict.model_validate_json(response.content).status


#: A result post's timeouts, (connect, read, write, pool) in seconds: the server answers once it has scored the runs.
RESULT_TIMEOUT = (5.0, 900.0, 900.0, 900.0)

#: The least time between two heartbeats: one comes sooner than the lease's period only to report new progress.
PROGRESS_BEAT_S = 2.0


class Heartbeat(threading.Thread):
    """Renews the lease every ``period`` seconds, and sooner (at most every :data:`PROGRESS_BEAT_S`) when the grade's
    progress changed (:attr:`progress_file`, written by the grading child); sets ``lost`` when the server calls the attempt stale."""

    def __init__(self, api: WorkerApi, submission_id: str, attempt: int, period: float) -> None:
        super().__init__(daemon=True)
        self.api, self.submission_id, self.attempt, self.period = api, submission_id, attempt, period
        self.done = threading.Event()
        self.lost = threading.Event()
        #: the grade's progress file (grader.hosting.results.grade_progress), once its work folder exists
        self.progress_file: Path | None = None
        self._sent: list[TaskProgress] = []

    def _due(self, since: float) -> list[TaskProgress] | None:
        """The progress to send now, or None when no beat is due (neither the period passed nor the progress changed)."""
        progress = read_progress(self.progress_file) if self.progress_file is not None else []
        if time.monotonic() - since >= self.period or (progress and progress != self._sent):
            return progress
        return None

    def run(self) -> None:
        since = time.monotonic()
        while not self.done.wait(min(self.period, PROGRESS_BEAT_S)):
            progress = self._due(since)
            if progress is None:
                continue
            since = time.monotonic()
            try:
                if not self.api.heartbeat(self.submission_id, self.attempt, progress):
                    self.lost.set()
                    return
                self._sent = progress
            except httpx.HTTPError:
                continue  # transient; the lease is longer than a few missed beats
            except WorkerProtocolMismatch as error:
                # The server was replaced by one of another version mid-grade: it will take nothing of this
                # grade, so stop it; the worker stops at its next request, with this line.
                log.error("%s", error)
                self.lost.set()
                return


def _post_with_retry(api: WorkerApi, submission_id: str, payload: WorkerResult, give_up_after: float) -> str:
    delay = 0.5
    deadline = time.monotonic() + give_up_after
    while True:
        try:
            return api.post_result(submission_id, payload)
        except httpx.HTTPError as error:
            if time.monotonic() > deadline:
                log.error("giving up posting %s: %s (the lease expires and the job is re-attempted)", submission_id, error)
                return "unposted"
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


def _download(api: WorkerApi, submission_id: str, attempt: int, target: Path) -> str | None:
    """The upload's sha256 once fetched; None when the server could not be reached (the attempt then fails INFRA)."""
    try:
        return api.download(submission_id, attempt, target)
    except httpx.HTTPError as error:
        log.warning("cannot fetch the upload of %s: %s", submission_id, type(error).__name__)
        return None


def _deliver(api: WorkerApi, submission_id: str, attempt: int, outcome: GradeOutcome) -> WorkerResult:
    """Put each ranked task's compact run, then return the result that names their digests (no score: the server scores)."""
    message, logs = outcome.message[-20000:], outcome.logs
    if outcome.facts is None:
        return WorkerResult(attempt=attempt, failure_code=outcome.failure_code, message=message, logs=logs)
    runs: dict[str, str] = {}
    for task, path in sorted(outcome.runs.items()):
        with open(path, "rb") as handle:
            local = hashlib.file_digest(handle, "sha256").hexdigest()
        try:
            stored = api.put_run(submission_id, attempt, task, path)
        except httpx.HTTPError as error:
            return WorkerResult(
                attempt=attempt, failure_code=FailureCode.INFRA, message=f"run of {task} not delivered: {type(error).__name__}", logs=logs
            )
        if stored != local:
            return WorkerResult(
                attempt=attempt, failure_code=FailureCode.INFRA, message=f"run of {task} not stored as sent (stale attempt?)", logs=logs
            )
        runs[task] = local
    # The machine is named with its grade: ONNX vectors may differ between CPU families.
    facts = {**outcome.facts, "fingerprint": worker_fingerprint()}
    return WorkerResult(attempt=attempt, facts=facts, runs=runs, message=message, logs=logs)


def _graded(api: WorkerApi, job: Job, beat: Heartbeat, on_data_mismatch: Callable[[str], None] | None) -> WorkerResult | None:
    """Grade one claimed job (:func:`grade_job`): the result to post, or None when the attempt went stale or was cancelled."""
    submission_id, attempt = job.submission_id, job.attempt
    lost = beat.lost.is_set
    with tempfile.TemporaryDirectory(prefix="grader-worker-") as scratch:
        work = Path(scratch)
        beat.progress_file = work / PROGRESS_FILE  # the grading child writes it; the heartbeat sends what it says
        upload = work / "upload.tar.gz"
        # The pseudonymous copy the server exported: the worker never sees the real ids or the key.
        folder = environment().worker_data
        data = Path(folder) if folder else None
        mismatch = data_mismatch(job, data)
        if mismatch is not None:
            if on_data_mismatch is not None:
                on_data_mismatch(mismatch)
            return WorkerResult(
                attempt=attempt, failure_code=FailureCode.INFRA, message=f"benchmark data on this worker does not match the pin: {mismatch}"
            )
        if (fetched := _download(api, submission_id, attempt, upload)) != job.upload_sha256:
            return WorkerResult(
                attempt=attempt,
                failure_code=FailureCode.INFRA,
                message="upload not fetched" if fetched is None else "upload digest mismatch in transfer",
            )
        if job.sharded:
            # A sharded ONNX grade: run shard jobs until all are in; the server merged their runs. Its jobs take
            # the upload from this worker's kept copy rather than fetching it again each.
            UPLOADS.keep(job.upload_sha256, upload)
            coordinated = coordinate(ShardApi(api.http), job, upload, lost)
            if coordinated is None:
                log.warning("%s attempt %s is stale or cancelled: coordination stopped, no result posted", submission_id, attempt)
            return coordinated
        assert data is not None  # data_mismatch says so otherwise
        request = GradeRequest(
            benchmark=str(data),
            tasks=list(job.tasks),
            split=job.split,
            limits=limits_from_json(job.limits),
            blinding_key=copy_key(data),
            max_unpack_ratio=job.max_unpack_ratio,
            max_unpacked_bytes=job.max_unpacked_bytes,
            judged={name: list(ids) for name, ids in job.judged.items()},
        )
        try:
            outcome = grade_in_child(upload, request, work, abandon=lost)
        finally:
            remove_submission_image(upload)
        if outcome is None:
            # Stale or cancelled: the grade was stopped (containers and staging removed); nothing to post.
            log.warning("%s attempt %s is stale or cancelled: grade stopped, no result posted", submission_id, attempt)
            return None
        return _deliver(api, submission_id, attempt, outcome)


def grade_job(api: WorkerApi, job: Job, *, key: Ed25519PrivateKey | None = None, on_data_mismatch: Callable[[str], None] | None = None) -> str:
    """Grade one claimed job and post its result (signed with ``key`` if given); return the server's verdict.

    The worker's benchmark data must have the digests the competition pins: otherwise the
    attempt fails INFRA (back to the queue, for a worker with the right data) and
    ``on_data_mismatch`` is told, so that this worker stops claiming. Staging and a
    submission's loaded image are removed afterwards (shared workers run out of disk otherwise).
    Any other exception of the grade (a malformed job, a fault nothing expected) is posted as
    INFRA, so the job is re-run and this worker keeps serving; only a server of another worker
    protocol stops it.
    """
    submission_id, attempt = job.submission_id, job.attempt
    beat = Heartbeat(api, submission_id, attempt, job.heartbeat_s)
    beat.start()
    try:
        try:
            graded = _graded(api, job, beat, on_data_mismatch)
        except WorkerProtocolMismatch:
            raise  # a server of another version takes nothing: the worker stops with the line
        except Exception as error:  # any other fault of this one grade is the platform's: post INFRA, keep serving
            log.exception("%s attempt %s: the grade failed unexpectedly", submission_id, attempt)
            graded = WorkerResult(attempt=attempt, failure_code=FailureCode.INFRA, message=unexpected(error))
        if graded is None:
            return "abandoned"
        payload = graded
        # The lease is renewed until the server answers: it scores the runs before it accepts them.
        if key is not None:
            payload.signature = sign_result(
                key,
                submission_id=submission_id,
                attempt=attempt,
                upload_sha256=job.upload_sha256,
                facts=payload.facts,
                runs=payload.runs,
                failure_code=payload.failure_code,
                message=payload.message,
            )
        if beat.lost.is_set():
            log.warning("%s attempt %s went stale after grading; posting anyway (the server decides)", submission_id, attempt)
        return _post_with_retry(api, submission_id, payload, give_up_after=3 * job.lease_s)
    finally:
        beat.done.set()
        release_job_memory()  # the job's runs, results and upload (and the posts' cycles): freed now, not kept job after job


def settle_allocator() -> None:
    """Make this worker's C allocator give large buffers back when freed (:func:`grader.hosting.allocator.return_large_buffers`,
    as ``grader serve`` does; ``GRADER_ALLOCATOR=default`` leaves glibc's settings) and log what was done.

    A worker holds each job's bytes for a moment (a shard's run handed back by its child and put, a grade's runs posted,
    an upload and query vectors fetched: 1-50 MiB each); with glibc's dynamic mmap threshold those came from its heaps
    after the first job and stayed there, so a long-lived worker grew job after job (docs/scale.md).
    """
    variables = environment()
    log.info("%s", return_large_buffers(variables.allocator, variables.mmap_threshold))


def preload_search() -> None:
    """Load what every forked job child would load again for its search (numba's CPU target: about 0.35 CPU-seconds a
    job), once, in this process, before any fork (:func:`grader.retrieval.exact.load_cpu_target`: no thread started)."""
    from grader.retrieval.exact import load_cpu_target

    load_cpu_target()


class Backoff:
    """The pause after an unreachable server or an unreadable answer: 0.2 s, doubling, at most 5 s; reset by an answer."""

    def __init__(self) -> None:
        self.seconds = 0.2

    def wait(self) -> None:
        time.sleep(self.seconds)
        self.seconds = min(self.seconds * 2, 5.0)

    def reset(self) -> None:
        self.seconds = 0.2


def ready_to_claim(stopping: threading.Event, min_free_bytes: int) -> bool:
    """Whether this machine can take a job now; otherwise waits a while and says no.

    Claiming nothing without staging space, nor while the engine is down: every job needs it, and claimed now it would
    only fail INFRA (grader.hosting.worker.engine_gate).
    """
    if min_free_bytes and free_bytes() < min_free_bytes:
        log.warning("less than %d MB free for staging: claiming nothing for now", min_free_bytes >> 20)
        stopping.wait(10)
        return False
    if not engine_up():
        stopping.wait(DOWN_WAIT_S)
        return False
    return True


def claimed(claim: Callable[[], Job | None], forget_fingerprint: Callable[[], None], stopping: threading.Event, backoff: Backoff) -> Job | None:
    """``claim()``'s job, or None after handling what the server answered instead (both loops: one competition, many).

    A server that asks for a pause is reachable: wait what it says, no back-off. A fingerprint the host reset is
    stated again. An unreachable server or an unreadable job (its lease lapses and the server re-queues it): back off.
    """
    try:
        job = claim()
    except ClaimThrottled as throttled:
        wait_out(throttled, stopping.wait)
        return None
    except FingerprintUnbound:
        log.warning("no fingerprint is bound to this worker (the host reset it): stating it again")
        forget_fingerprint()
        return None
    except httpx.HTTPError as error:
        log.info("server not reachable (%s); retrying", type(error).__name__)
        backoff.wait()
        return None
    except ValidationError as error:
        log.error("unreadable job from the server (%d error(s)); retrying", error.error_count())
        backoff.wait()
        return None
    backoff.reset()
    return job


class ParentWatch(threading.Thread):
    """Ends a local worker whose server (process ``parent``) died (kill -9 leaves no one to stop it); its lease then expires.

    The server names itself: a worker that was orphaned while it still started up would otherwise take its new parent for the server.
    """

    def __init__(self, parent: int) -> None:
        super().__init__(daemon=True)
        self.parent = parent

    def run(self) -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != self.parent:
                os._exit(3)


def run_worker(
    server: str,
    token: str,
    *,
    name: str = "worker",
    once: bool = False,
    parent: int | None = None,
    key: Ed25519PrivateKey | None = None,
    min_free_bytes: int = 0,
) -> None:
    """Claim and grade jobs until SIGTERM (finishing the current job first), with ``once`` after one, or when process ``parent`` is gone."""
    if parent is not None:
        ParentWatch(parent).start()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {name} %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    settle_allocator()
    preload_search()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    api = WorkerApi(server, token, key)
    backoff = Backoff()

    def claim() -> Job | None:
        # Stated once (again after a host's reset); a refused statement or claim stops the worker (SystemExit).
        fingerprint = api.bound_fingerprint()
        if work_one(ShardApi(api.http), fingerprint):  # shard jobs of sharded grades first: their submissions are running
            return None
        return api.claim(wait_s=5.0)

    def forget() -> None:
        api.fingerprint = None

    while not stopping.is_set():
        if not ready_to_claim(stopping, min_free_bytes):
            continue
        job = claimed(claim, forget, stopping, backoff)
        if job is None:
            continue
        log.info("claimed %s attempt %s", job.submission_id, job.attempt)
        unfit: list[str] = []
        try:
            verdict = grade_job(api, job, key=key, on_data_mismatch=unfit.append)
        except WorkerProtocolMismatch:
            raise
        except Exception:  # after the grade (signing, an unreadable verdict): the lease lapses and the job is re-run; keep serving
            log.exception("%s attempt %s: posting the result failed unexpectedly", job.submission_id, job.attempt)
            verdict = "unposted"
        log.info("%s attempt %s: %s", job.submission_id, job.attempt, verdict)
        if unfit:
            raise SystemExit(f"benchmark data here does not match the competition's pin ({unfit[0]}); stopping this worker")
        if once:
            return
