"""``grader worker --broker``: a Celery consumer that grades through the server's HTTP worker API.

Each Celery message is a wake-up. The task claims the oldest queued job (a
database lease) over HTTP, grades it with :func:`grader.hosting.worker.loop.grade_job`
(the code the embedded workers run), posts the signed result, and claims the
next one until the queue is empty. Why the message is acknowledged before the
claim, and the other settings: :mod:`grader.hosting.queue.celery_app`.
"""

from __future__ import annotations

import logging
import os
import socket
import warnings
from pathlib import Path

import httpx
from celery.exceptions import SecurityWarning, WorkerShutdown
from celery.worker import state as worker_state

from grader.hosting.errors import HostingError, WorkerProtocolMismatch
from grader.hosting.keyring.worker_signing import ensure_worker_key, worker_public_key_path
from grader.hosting.queue.celery_app import QUEUE, WAKE_TASK, make_celery
from grader.hosting.worker.claim_throttle import ClaimThrottled
from grader.hosting.worker.engine_gate import engine_up
from grader.hosting.worker.hygiene import free_bytes
from grader.hosting.worker.loop import WorkerApi, grade_job, preload_search, settle_allocator
from grader.hosting.worker.shard_loop import FingerprintUnbound

log = logging.getLogger("grader.worker")


def register_key(api: WorkerApi, key_dir: Path) -> None:
    """Tell the server this worker's public key (first use), or check that it is the one the host recorded."""
    pem = worker_public_key_path(key_dir).read_text(encoding="ascii")
    try:
        response = api.http.post("/api/v1/worker/key", json={"public_key": pem})
    except httpx.HTTPError as error:
        raise HostingError(f"cannot reach the server {api.http.base_url}: {type(error).__name__}") from None
    if response.status_code == 401:
        raise HostingError("the server does not know this worker token", hint="the host runs `grader admin add-worker NAME` and gives you its token")
    if response.status_code == 409:
        raise HostingError(
            f"the server holds another public key for this worker; use the key pair the host registered (not {key_dir})",
            hint="or ask the host to re-add the worker (`grader admin revoke-worker`, `add-worker`)",
        )
    if response.status_code != 200:
        raise HostingError(f"the server answered {response.status_code} when recording this worker's key")


def quiet_celery_root_advice() -> None:
    """Replace Celery's advice to pass ``--uid`` (an option ``grader worker`` does not have) with advice that applies."""
    # Celery warns from Worker.__init__ (celery.platforms.check_privileges) when run as root or in sudo/wheel.
    warnings.filterwarnings("ignore", category=SecurityWarning)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        log.warning(
            "running as root: a worker needs the Docker engine, not root; run `grader worker` as an unprivileged user "
            "in the docker group (for example `sudo -u grader --preserve-env=GRADER_BROKER,GRADER_WORKER_TOKEN grader worker ...`)"
        )


def run_celery_worker(broker: str, server: str, token: str, *, name: str, key_dir: Path, min_free_bytes: int) -> None:
    """Consume wake-ups from ``broker`` until a warm shutdown (SIGTERM: the current grading finishes first)."""
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {name} %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    settle_allocator()
    preload_search()
    key = ensure_worker_key(key_dir)
    api = WorkerApi(server, token, key)
    register_key(api, key_dir)
    app = make_celery(broker)
    unfit: list[str] = []

    def stopping() -> bool:
        return bool(worker_state.should_stop) or bool(worker_state.should_terminate)

    @app.task(name=WAKE_TASK, ignore_result=True)
    def wake(submission_id: str) -> int:
        """Grade queued jobs until none is left (``submission_id`` is only a hint: jobs go in upload order)."""
        try:
            return grade_until_empty(submission_id)
        except WorkerProtocolMismatch as error:
            # A server of another version (upgraded after this worker started) takes nothing from this worker.
            log.error("%s; stopping this worker", error)
            raise WorkerShutdown(1) from None
        except SystemExit as stop:  # the server refused this worker's fingerprint: claiming again would be refused again
            log.error("%s; stopping this worker", stop)
            raise WorkerShutdown(1) from None

    def grade_until_empty(submission_id: str) -> int:
        graded = 0
        while not stopping():
            free = free_bytes()
            if free < min_free_bytes:
                log.warning(
                    "only %d MB free for staging (floor %d MB): claiming nothing; the job waits for another worker", free >> 20, min_free_bytes >> 20
                )
                return graded
            if not engine_up():  # a job claimed now would only fail INFRA; the reaper re-sends the wake-up
                return graded
            try:
                job = api.claim(wait_s=0)
            except FingerprintUnbound:  # the host reset it; the next wake-up states it again (api.fingerprint is cleared)
                log.warning("the server holds no fingerprint bound to this worker (the host reset it): stating it at the next wake-up")
                return graded
            except (httpx.HTTPError, ClaimThrottled) as error:  # a 429 too: the wake-up comes again, no need to wait here
                log.warning("cannot claim (%s); the server's reaper re-sends the wake-up", type(error).__name__)
                return graded
            if job is None:
                return graded
            log.info("claimed %s attempt %s (wake-up for %s)", job.submission_id, job.attempt, submission_id)
            verdict = grade_job(api, job, key=key, on_data_mismatch=unfit.append)
            log.info("%s attempt %s: %s", job.submission_id, job.attempt, verdict)
            graded += 1
            if unfit:
                # Never grade on other data: stop this worker; the job is back in the queue for the others.
                log.error("benchmark data here does not match the competition's pin (%s); stopping this worker", unfit[0])
                raise WorkerShutdown(1)
        return graded

    quiet_celery_root_advice()
    worker = app.Worker(
        hostname=f"{name}@{socket.gethostname()}",
        pool="solo",
        concurrency=1,
        prefetch_multiplier=1,
        queues=[QUEUE],
        loglevel="INFO",
        without_gossip=True,
        without_mingle=True,
        without_heartbeat=True,
        optimization="fair",
    )
    worker.start()
    raise SystemExit(worker.exitcode or 0)
