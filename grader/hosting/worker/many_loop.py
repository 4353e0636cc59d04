"""A worker of a server of many competitions: it serves the competitions whose data copy it holds, one job at a time.

The worker holds one pseudonymous copy per competition, in ``DATA/<name>/`` (each exported by the host with
``grader admin --in NAME export-worker-data``). It claims at the server's claim (``POST /api/v1/worker/claim``),
naming the competitions it serves; the server answers a job of one of them, in its fair order, and the job names
its competition. Everything else about that job (heartbeat, upload, runs, result, shard jobs) goes to the
competition's own routes, ``/c/<name>/api/v1/worker/…``, where the worker is registered (with the same token in
each) and has stated its fingerprint. A job is graded on its competition's copy alone: the grade reads
``GRADER_WORKER_DATA``, which names that copy while the job runs (one job at a time).

Named competitions (``grader worker --competition NAME``, repeatable) are served from the start, and a missing
copy stops the worker before it claims anything. Without names the worker serves every competition the server
lists whose copy it holds, and reads the listing again every :data:`REFRESH_S` seconds: a competition added later
is served once its copy is there (the local workers of ``grader serve --competitions`` run so).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import TypeAdapter, ValidationError

from grader.hosting.environment import WORKER_DATA
from grader.hosting.errors import HostingError, WorkerProtocolMismatch
from grader.hosting.protocol.messages import SERVER_CLAIM_PATH, CompetitionName, Job, ServerClaimRequest
from grader.hosting.protocol.version import checked_job
from grader.hosting.protocol.worker_data import MANIFEST
from grader.hosting.worker.claim_throttle import raise_if_throttled
from grader.hosting.worker.loop import (
    Backoff,
    ParentWatch,
    WorkerApi,
    claimed,
    grade_job,
    preload_search,
    ready_to_claim,
    settle_allocator,
    worker_client,
)
from grader.hosting.worker.shard_loop import ShardApi, check_claim, fingerprint_digest, work_one

log = logging.getLogger("grader.worker")

#: Seconds between two reads of the server's listing, for a worker that serves every competition listed.
REFRESH_S = 10.0
#: The listing a worker reads at most (bytes): a server's directory of competitions, not an unbounded answer.
LISTING_BYTES = 1 << 20
_NAMES = TypeAdapter(list[CompetitionName])


def holds_copy(data: Path, name: str) -> bool:
    """Whether ``data/<name>`` is an exported worker copy (its manifest is written last: a copy being exported is not one yet)."""
    return (data / name / MANIFEST).is_file()


def listed(http: httpx.Client) -> list[str]:
    """The names of the competitions the server lists (``GET /api/v1/competitions``), read bounded and validated."""
    with http.stream("GET", "/api/v1/competitions") as response:
        response.raise_for_status()
        raw = bytearray()
        for chunk in response.iter_bytes():
            raw += chunk
            if len(raw) > LISTING_BYTES:
                raise HostingError(f"the server's listing is over {LISTING_BYTES} bytes")
    entries = TypeAdapter(list[dict[str, object]]).validate_json(bytes(raw))
    return _NAMES.validate_python([entry.get("name") for entry in entries])


#: How long a starting worker tries to reach its server (a local worker starts while its server starts listening).
REACH_S = 60.0


def is_server_of_many(server: str) -> bool:
    """Whether ``server`` is a server of many competitions (its root lists them), rather than one competition's address."""
    deadline = time.monotonic() + REACH_S
    while True:
        try:
            answer = httpx.get(f"{server.rstrip('/')}/api/v1/competitions", timeout=httpx.Timeout(30.0, connect=5.0))
            break
        except httpx.TransportError as error:
            if time.monotonic() > deadline:
                raise HostingError(f"cannot reach the server {server}: {type(error).__name__}") from None
            time.sleep(0.5)
    return answer.status_code == 200 and answer.headers.get("content-type", "").startswith("application/json")


@dataclass
class Served:
    """One competition this worker serves: its own worker routes and its data copy here."""

    name: str
    api: WorkerApi
    data: Path


@contextmanager
def graded_on(data: Path) -> Iterator[None]:
    """``GRADER_WORKER_DATA`` names ``data`` while a job of its competition runs (the grade reads it there)."""
    before = os.environ.get(WORKER_DATA)
    os.environ[WORKER_DATA] = str(data)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(WORKER_DATA, None)
        else:
            os.environ[WORKER_DATA] = before


class ManyWorker:
    """The competitions a worker serves on one server, and the server's claim over them."""

    def __init__(
        self,
        server: str,
        token: str,
        data: Path,
        *,
        names: list[str] | None,
        key: Ed25519PrivateKey | None,
        on_new: Callable[[WorkerApi], None] | None = None,
    ) -> None:
        self.server, self.token, self.data, self.names, self.key = server.rstrip("/"), token, data, names, key
        #: told each competition's API when it is first served (a remote worker records its key there)
        self.on_new = on_new
        self.http = worker_client(self.server, token)
        self.served: dict[str, Served] = {}
        #: competitions this worker stopped serving for good: its copy there does not match the pin
        self.unfit: set[str] = set()
        self.read_at = float("-inf")

    def refresh(self) -> None:
        """Serve the competitions named (or listed, with a copy here), and no others; the listing is read at most every :data:`REFRESH_S`."""
        if self.names is not None and self.served:
            return  # named competitions are fixed at the start
        if time.monotonic() - self.read_at < REFRESH_S:
            return
        self.read_at = time.monotonic()
        wanted = self.names if self.names is not None else [n for n in listed(self.http) if holds_copy(self.data, n)]
        for name in wanted:
            if name not in self.served and name not in self.unfit:
                api = WorkerApi(f"{self.server}/c/{name}", self.token, self.key)
                if self.on_new is not None:
                    try:
                        self.on_new(api)
                    except HostingError as error:
                        if self.names is not None:
                            raise  # a competition named must be served: the worker stops with the line
                        # one listed competition this worker is not registered in must not keep it from the others
                        log.warning("competition %s: not served: %s", name, str(error)[:300])
                        api.http.close()
                        continue
                self.served[name] = Served(name, api, self.data / name)
                log.info("serving competition %s (data %s)", name, self.data / name)
        for name in set(self.served) - set(wanted):
            log.info("competition %s: no longer listed, or its copy is gone here: not served", name)
            del self.served[name]

    def fingerprint(self) -> str:
        """The digest of this machine's fingerprint, stated (once) in every competition served: a claim names it."""
        for one in self.served.values():
            one.api.bound_fingerprint()
        return fingerprint_digest()

    def forget_fingerprints(self) -> None:
        """A competition holds none bound (the host reset it): state it again everywhere (a bound one is found bound)."""
        for one in self.served.values():
            one.api.fingerprint = None

    def claim(self, fingerprint: str, wait_s: float) -> Job | None:
        """A job of one of the competitions served, from the server's claim; None when none came within ``wait_s``."""
        body = ServerClaimRequest(wait_s=wait_s, fingerprint=fingerprint, competitions=sorted(self.served))
        response = self.http.post(SERVER_CLAIM_PATH, json=body.model_dump(), timeout=wait_s + 30)
        if response.status_code == 204:
            return None
        raise_if_throttled(response)
        check_claim(response)
        if response.status_code == 404 and self.names is None:
            self.read_at = float("-inf")  # a competition retired since the listing was read: read it again
            return None
        if response.status_code in (401, 403, 404):  # not registered, no key, or not served: claiming again changes nothing
            raise SystemExit(f"the server refused this worker's claim: {_detail(response)}")
        response.raise_for_status()
        return Job.model_validate(checked_job(response.content, self.server))


def _detail(response: httpx.Response) -> str:
    """The one line of a refusal, bounded."""
    try:
        return str(response.json().get("detail", ""))[:500]
    except (ValueError, AttributeError):
        return response.text[:500]


def check_named(data: Path, names: list[str]) -> None:
    """Refuse, before anything is claimed, a competition named whose copy this worker does not hold."""
    missing = [name for name in names if not holds_copy(data, name)]
    if missing:
        raise HostingError(
            f"no data copy of competition {missing[0]!r} in {data / missing[0]}: a worker serves only competitions whose copy it holds",
            hint=f"the host exports it: grader admin --in {missing[0]} export-worker-data --out {data / missing[0]}",
        )


def run_many_worker(
    server: str,
    token: str,
    data: Path,
    *,
    names: list[str] | None = None,
    name: str = "worker",
    once: bool = False,
    parent: int | None = None,
    key: Ed25519PrivateKey | None = None,
    on_new: Callable[[WorkerApi], None] | None = None,
    min_free_bytes: int = 0,
) -> None:
    """Claim and grade jobs of the competitions served until SIGTERM (finishing the current job first), ``once`` after one, or ``parent`` is gone."""
    if parent is not None:
        ParentWatch(parent).start()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {name} %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    settle_allocator()
    preload_search()
    if names is not None:
        check_named(data, names)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    worker = ManyWorker(server, token, data, names=names, key=key, on_new=on_new)
    if names is not None:
        worker.refresh()  # each competition named is served from the start: a refusal (no registration there) stops the worker now
    backoff = Backoff()

    def claim() -> Job | None:
        fingerprint = worker.fingerprint()
        if _shard_job(worker, fingerprint):  # shard jobs of sharded grades first: their submissions are running
            return None
        return worker.claim(fingerprint, wait_s=5.0)

    while not stopping.is_set():
        try:
            worker.refresh()
        except (httpx.HTTPError, ValidationError, HostingError) as error:
            log.info("cannot read the server's listing or register here (%s); retrying", str(error)[:300] or type(error).__name__)
        if not worker.served:
            stopping.wait(1.0 if worker.names is None else REFRESH_S)
            continue
        if not ready_to_claim(stopping, min_free_bytes):
            continue
        job = claimed(claim, worker.forget_fingerprints, stopping, backoff)
        if job is None:
            continue
        _grade(worker, job)
        if once:
            return


def _shard_job(worker: ManyWorker, fingerprint: str) -> bool:
    """Run one free shard job of a competition served (each competition's own route), on its copy; whether there was one."""
    for one in list(worker.served.values()):
        with graded_on(one.data):
            if work_one(ShardApi(one.api.http), fingerprint):
                return True
    return False


def _grade(worker: ManyWorker, job: Job) -> None:
    """Grade ``job`` at its competition's routes, on its copy; a competition whose copy does not match its pin is served no more."""
    one = worker.served.get(job.competition)
    if one is None:  # never a competition this worker named: it takes nothing of it (the lease lapses, the job is re-queued)
        log.error("the server handed out a job of competition %r, which this worker does not serve: ignored", job.competition)
        return
    log.info("claimed %s attempt %s of %s", job.submission_id, job.attempt, job.competition)
    unfit: list[str] = []
    try:
        with graded_on(one.data):
            verdict = grade_job(one.api, job, key=worker.key, on_data_mismatch=unfit.append)
    except WorkerProtocolMismatch:
        raise
    except Exception:  # after the grade (signing, an unreadable verdict): the lease lapses and the job is re-run; keep serving
        log.exception("%s attempt %s: posting the result failed unexpectedly", job.submission_id, job.attempt)
        verdict = "unposted"
    log.info("%s attempt %s of %s: %s", job.submission_id, job.attempt, job.competition, verdict)
    if unfit:
        log.error("competition %s: the data copy here does not match its pin (%s): not served any more", job.competition, unfit[0])
        worker.unfit.add(job.competition)
        del worker.served[job.competition]
        if not worker.served and worker.names is not None:
            raise SystemExit(f"the data copies here do not match the competitions' pins ({unfit[0]}); stopping this worker")
