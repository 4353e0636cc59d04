"""``grader serve``: open the state, pin, start the reaper and the local workers, serve HTTP."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from grader.hosting.allocator import return_large_buffers
from grader.hosting.api.app import create_app
from grader.hosting.config import RETAIN_ALL, Competition
from grader.hosting.context import ServerContext
from grader.hosting.db.session import Database, PoolSize, open_database
from grader.hosting.environment import WORKER_DATA, environment, with_worker_token
from grader.hosting.errors import CompetitionFileError
from grader.hosting.keyring.blinding_key import ensure_competition_blinding_key
from grader.hosting.keyring.log_key import ensure_log_key, log_origin
from grader.hosting.keyring.partition_secret import ensure_partition_secret
from grader.hosting.leaderboard.board import BoardInputs
from grader.hosting.leaderboard.parts import acceptance_scorer, repair_accepted
from grader.hosting.notify.sender import Sender
from grader.hosting.queue import shard_jobs
from grader.hosting.queue.dispatch import Dispatcher, LocalDispatcher
from grader.hosting.queue.lifecycle import reap
from grader.hosting.repeat_throttle import throttle_repeats
from grader.hosting.results.pins import grading_splits, served_splits
from grader.hosting.results.result_size import job_result_cap, run_caps
from grader.hosting.services.admin import reveal_when_due
from grader.hosting.services.phase_close import log_phase_boards_when_due, log_phase_ends_if_due
from grader.hosting.services.phase_regrade import regrade_opened_phases
from grader.hosting.services.retention import prune
from grader.hosting.services.startup import hold_the_end, local_worker_tokens, open_competition
from grader.hosting.services.worker_copy import worker_copy
from grader.hosting.storage import PRIVATE_UMASK, StateDir, record_competition_file
from grader.hosting.transparency.host_log import LOG_DIR, HostLog, identifier_key
from grader.hosting.transparency.log_events import log_end_if_due
from grader.hosting.transparency.log_store import competition_entry, open_log

log = logging.getLogger("grader.hosting")


@dataclass(frozen=True)
class ServeOptions:
    """What ``grader serve`` was asked to do."""

    competition: Competition
    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    database: str | None = None
    #: Celery broker URL: dispatch through Celery too (remote ``grader worker --broker``); None: local workers only.
    broker: str | None = None
    #: Addresses (or networks) of reverse proxies whose X-Forwarded-For/-Proto are believed; none by default.
    trusted_proxies: tuple[str, ...] = ()
    #: A request body must arrive at this many bytes/s on average once ``body_grace_s`` have passed (0: no minimum).
    min_body_rate: float = 16 << 10
    body_grace_s: float = 20.0
    #: The file ``competition`` was read from: noted in the state folder for the admin commands.
    competition_file: Path | None = None
    #: The PostgreSQL connection pool (None: the default; a server of many competitions gives each its share).
    pool: PoolSize | None = None


def check_phase_splits(competition: Competition, split: str, sample: str | None) -> None:
    """Each phase grades the competition's split or its sample split: the two the pins, the workers' data copies and the
    result caps cover (a third would be graded on data no worker holds). One line naming the key otherwise."""
    for index, phase in enumerate(competition.phases):
        if phase.split is not None and phase.split not in (split, sample):
            allowed = f"the competition's split {split!r}" + (f" or its sample split {sample!r}" if sample else "")
            raise CompetitionFileError(f"{phase.split!r} is not {allowed}", path=competition.path, field=f"phases.{index}.split")


def prepare(options: ServeOptions) -> tuple[ServerContext, Database]:
    """Everything before serving: database (migrated), pin check, host key, clean-up of half uploads."""
    state = StateDir(options.state_dir)
    signing_key = state.ensure_host_key()
    secret = ensure_partition_secret(state.keys)
    blinding_key = ensure_competition_blinding_key(state.keys)
    db = open_database(state.root, options.database, pool=options.pool)
    competition = options.competition
    opened = open_competition(db, competition, secret, blinding_key)
    hold_the_end(db, competition)  # before the log is opened: a moved file would otherwise be logged as a repin first
    host_log = HostLog(ensure_log_key(state.keys, log_origin(competition.name)), identifier_key(secret), state.root / LOG_DIR)
    first_entry = competition_entry(
        host_log,
        competition_file=options.competition_file or competition.path,
        partition_commitment=opened.commitment,
        blinding_secret=blinding_key.secret,
        pin_digests=opened.pin_digests,
        host_public_key=signing_key.public_key().public_bytes_raw(),
    )
    open_log(db, host_log, first_entry)  # refuses a database older than, or inconsistent with, the published checkpoint
    state.clean_tmp()
    if options.competition_file is not None:
        record_competition_file(state.root, options.competition_file)
    state.clean_orphans(set(opened.known))
    state.make_private()
    benchmark, tasks, split, sample = grading_splits(competition)
    check_phase_splits(competition, split, sample)
    dispatcher = LocalDispatcher() if options.broker is None else _celery_dispatcher(options.broker)
    ctx = ServerContext(
        competition=competition,
        db=db,
        state=state,
        dispatcher=dispatcher,
        pin_id=opened.pin_id,
        signing_key=signing_key,
        benchmark_target=competition.benchmark_target(),
        tasks=tasks,
        split=split,
        sample_split=sample,
        partition_secret=secret,
        partition_commitment=opened.commitment,
        blinding_key=blinding_key,
        result_body_bytes=job_result_cap(benchmark, tasks, served_splits(split, sample)),
        run_body_bytes=run_caps(benchmark, tasks, served_splits(split, sample)),
        log=host_log,
    )
    # Repair, once: what a 0.2.0 database lacks (public-part reports signed on first view, rows without part
    # scores) is made now as acceptance makes it, so that no read ever writes.
    repaired = repair_accepted(db, state, signing_key, acceptance_scorer(ctx))
    if repaired:
        log.info("leaderboard: part scores and public-part reports stored for %d result(s) accepted without them", len(repaired))
    return ctx, db


def export_quietly(ctx: ServerContext) -> None:
    """:func:`worker_copy` off the request path; a failure is logged (the first claim then tries again, and says why)."""
    try:
        worker_copy(ctx)
    except Exception:
        log.exception("the workers' data copy could not be exported")


def _celery_dispatcher(broker: str) -> Dispatcher:
    from grader.hosting.queue.celery_dispatch import CeleryDispatcher

    return CeleryDispatcher(broker)


def masked(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for logs and the start line)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port is not None else "")
    return urlunsplit(parts._replace(netloc=netloc))


def start_line(options: ServeOptions, url: str, state: Path) -> str:
    """What ``grader serve`` says when it starts: where, with which database and broker (passwords masked), how many local workers."""
    database = masked(options.database) if options.database else f"SQLite in {state}"
    broker = masked(options.broker) if options.broker else "none (local workers poll the database)"
    return (
        f"serving competition {options.competition.name!r} on {url} (API docs: {url}/docs; host key: {url}/host-key.pub); state in {state}; "
        f"database: {database}; broker: {broker}; local workers: {options.workers}"
        + (f" (their logs: {state / 'run'}/local-N.log)" if options.workers else "")
    )


#: Seconds between two prunings of the runs after the end (each walks state/runs/ and reads the boards' rows).
PRUNE_EVERY_S = 60.0
#: Seconds before a reveal that failed (not one that is merely not due) is tried again: each try reads both final boards.
REVEAL_RETRY_S = 60.0


class Reaper(threading.Thread):
    """Returns expired leases to the queue and re-dispatches forgotten jobs, every ``reap_every_s``; logs the end at the
    file's ``end`` and then the reveal, once no submission received before the end is in flight. Its competition's
    notification sender (:mod:`grader.hosting.notify.sender`) starts and stops with it."""

    def __init__(self, ctx: ServerContext) -> None:
        super().__init__(name="grader-reaper", daemon=True)
        self.ctx = ctx
        self.stopping = threading.Event()
        self.next_prune = 0.0
        self.next_reveal = 0.0
        self.next_phase_boards = 0.0
        self.sender = Sender(ctx.db, ctx.competition.name, ctx.competition.notify)

    def start(self) -> None:
        super().start()
        self.sender.start()

    def run(self) -> None:
        queue = self.ctx.competition.queue
        while not self.stopping.wait(queue.reap_every_s):
            try:
                done = reap(self.ctx.db, self.ctx.dispatcher, redispatch_s=queue.redispatch_s, host_log=self.ctx.log, retry=queue)
                if shard_jobs.reap(self.ctx.db, max_tries=self.ctx.competition.max_attempts, retry=queue):
                    log.warning("reaper: shard jobs whose lease expired re-queued alone (or failed at the try limit)")
                if self.ctx.log is not None and self.ctx.competition.phases:
                    log_phase_ends_if_due(self.ctx.db, self.ctx.log, self.ctx.competition)  # before the competition's end
                    self._phase_boards()
                if self.ctx.log is not None and log_end_if_due(self.ctx.db, self.ctx.log, self.ctx.competition):
                    log.info("transparency log: the competition's end (and the finals) logged")
                self._reveal()
                if self.ctx.competition.phases and (made := regrade_opened_phases(self.ctx)):
                    log.info("reaper: a phase opened: %s graded again, not charged", ", ".join(made))
                self._prune_runs()
                for what, ids in (
                    ("lease expired, re-queued", done.requeued),
                    ("lease expired, attempt limit reached: error/INFRA", done.errored),
                    ("left received, queued", done.queued_received),
                ):
                    if ids:
                        log.warning("reaper: %s: %s", what, ", ".join(ids))
                log_waiting(done.redispatched, done.running)
            except Exception:  # the reaper must outlive a database hiccup
                log.exception("reaper pass failed; retrying")

    def _reveal(self) -> None:
        """After the end, once nothing received before it is in flight: log the reveal (docs/hosting.md#the-end-the-final-standings-the-reveal).

        A failure is logged and tried again after :data:`REVEAL_RETRY_S` (``grader admin log-reveal`` is the host's way
        meanwhile); the pass itself goes on.
        """
        if time.monotonic() < self.next_reveal:
            return
        try:
            index = reveal_when_due(self.ctx.db, self.ctx.log, self.ctx.state.root, self.ctx.competition)
        except Exception:
            self.next_reveal = time.monotonic() + REVEAL_RETRY_S
            log.exception("the reveal could not be logged; tried again in %g s (or run `grader admin log-reveal`)", REVEAL_RETRY_S)
            return
        if index is not None:
            log.info("transparency log: the reveal logged as entry %d", index)

    def _phase_boards(self) -> None:
        """A closed phase's final boards, once its grades are done (:mod:`grader.hosting.services.phase_close`). A
        failure is logged and tried again after :data:`REVEAL_RETRY_S`; the pass goes on (the competition's end must
        not wait for an earlier phase's boards)."""
        if time.monotonic() < self.next_phase_boards:
            return
        try:
            log_phase_boards_when_due(self.ctx)
        except Exception:
            self.next_phase_boards = time.monotonic() + REVEAL_RETRY_S
            log.exception("a closed phase's final boards could not be logged; tried again in %g s", REVEAL_RETRY_S)

    def _prune_runs(self) -> None:
        """After the end, every :data:`PRUNE_EVERY_S`: remove the runs the retention policy does not keep (docs/hosting.md#retention)."""
        if self.ctx.competition.retention.runs == RETAIN_ALL or time.monotonic() < self.next_prune:
            return
        self.next_prune = time.monotonic() + PRUNE_EVERY_S
        board = BoardInputs.of(self.ctx.competition, self.ctx.signing_key.public_key(), self.ctx.partition_secret)
        done = prune(self.ctx.db, self.ctx.state, self.ctx.competition, board)
        if done.remove:
            log.info("retention: %s", done.summary())


def log_waiting(redispatched: list[str], running: int) -> None:
    """Say that jobs wait unclaimed: a warning only when no worker is grading, since busy workers are no fault.

    An idle live worker claims within a poll, so jobs that waited a whole re-dispatch period while
    nothing runs mean that no worker is alive (or none can claim); while some run, waiting is a queue.
    """
    if not redispatched:
        return
    if running:
        log.debug("reaper: %d job(s) queued while %d run; re-dispatched: %s", len(redispatched), running, ", ".join(redispatched))
    else:
        log.warning(
            "reaper: %d job(s) waiting unclaimed and no worker is grading (is any worker running and able to claim?); re-dispatched: %s",
            len(redispatched),
            ", ".join(redispatched),
        )


class LocalWorkers(threading.Thread):
    """Keeps ``count`` worker processes alive; they talk to this server over loopback HTTP."""

    def __init__(self, ctx: ServerContext, count: int, url: str, *, umask: int = 0o022) -> None:
        super().__init__(name="grader-local-workers", daemon=True)
        self.ctx = ctx
        #: the workers' umask: the one the host started the server with (they grade outside the state folder)
        self.umask = umask
        self.count = count
        self.url = url
        self.stopping = threading.Event()
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.tokens = local_worker_tokens(ctx.db, count)

    def _start(self, name: str) -> None:
        log_file = open(self.ctx.state.run / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        process = subprocess.Popen(
            [sys.executable, "-m", "grader", "worker", "--local-of", str(os.getpid()), "--server", self.url, "--name", name],
            # The token never on the command line, where `ps` shows it; the data: the state's pseudonymous copy.
            env={**with_worker_token(self.tokens[name]), WORKER_DATA: str(self.ctx.state.worker_data)},
            stdout=log_file,
            stderr=subprocess.STDOUT,
            umask=self.umask,
        )
        log_file.close()
        self.processes[name] = process
        (self.ctx.state.run / f"{name}.pid").write_text(f"{process.pid}\n")

    def run(self) -> None:
        worker_copy(self.ctx)  # exported (or found current) before the workers that grade on it start
        self.run_loop()

    def run_loop(self) -> None:
        """Start the workers, and restart any that exits until :meth:`stop`."""
        for name in self.tokens:
            self._start(name)
        while not self.stopping.wait(0.5):
            for name, process in list(self.processes.items()):
                if process.poll() is not None:  # a lost worker: its lease expires and the reaper re-queues its job
                    log.warning("worker %s exited with %s; restarting", name, process.returncode)
                    self._start(name)

    def stop(self) -> None:
        self.stopping.set()
        for process in self.processes.values():
            process.terminate()
        deadline = time.monotonic() + 5
        for process in self.processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()


def shutdown(ctx: ServerContext, reaper: Reaper, workers: LocalWorkers | None) -> None:
    """Stop what :func:`serve` started, in order: the reaper and its notification sender, the local workers, the dispatcher (a Celery one
    publishes what is pending, then its thread ends), the database's connections."""
    reaper.stopping.set()
    reaper.sender.stop()
    if workers is not None:
        workers.stop()
    ctx.dispatcher.close()
    ctx.db.dispose()


def serve(options: ServeOptions) -> None:
    """Run the server until interrupted."""
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # Before any thread starts: a grade's large buffers then go back to the system when freed, not kept in the
    # threads' heaps grade after grade (grader/hosting/allocator.py).
    variables = environment()
    log.info("%s", return_large_buffers(variables.allocator, variables.mmap_threshold))
    host_umask = os.umask(PRIVATE_UMASK)  # what the server creates in the state folder is the host's alone
    ctx, _db = prepare(options)
    reaper = Reaper(ctx)
    url = f"http://{'127.0.0.1' if options.host in ('0.0.0.0', '::') else options.host}:{options.port}"
    workers = LocalWorkers(ctx, options.workers, url, umask=host_umask) if options.workers > 0 else None

    def on_start() -> None:
        reaper.start()
        # The workers' data copy, exported (or found current) in the background now rather than by the first
        # claim, which would hold a long-poll (and the lease it grants) for as long as a large corpus takes.
        threading.Thread(target=export_quietly, args=(ctx,), name="grader-worker-copy", daemon=True).start()
        if workers is not None:
            workers.start()

    def on_stop() -> None:
        shutdown(ctx, reaper, workers)

    app = create_app(ctx, on_start=on_start, on_stop=on_stop, min_body_rate=options.min_body_rate, body_grace_s=options.body_grace_s)
    print(start_line(options, url, ctx.state.root), file=sys.stderr, flush=True)
    # uvicorn believes loopback's forwarded headers unless told otherwise: only the named proxies are.
    config = uvicorn.Config(
        app,
        host=options.host,
        port=options.port,
        log_level="warning",
        timeout_graceful_shutdown=5,
        proxy_headers=bool(options.trusted_proxies),
        forwarded_allow_ips=list(options.trusted_proxies),
    )
    throttle_repeats()  # after uvicorn configured its loggers: an accept loop failing at the descriptor limit logs a few lines a minute
    uvicorn.Server(config).run()
