"""``grader serve --competitions DIR``: one server, many competitions (docs/hosting.md, "Many competitions on one server").

Each competition is prepared exactly as a one-competition server prepares its own (:func:`grader.hosting.server.prepare`:
database migrated, pins checked, keys, log entry 0, the end held), in its own folder and database, and gets its own
reaper. The local workers are one pool that serves every competition (:class:`LocalPool`): each of them is registered
in every competition with the same token, and holds every competition's data copy (``STATE/worker-data/<name>``, a
link to the copy in the competition's folder). A watcher re-reads ``server.json`` every :data:`WATCH_S` seconds: a competition added by
``grader admin competition add`` is served from then on, a retired one is no longer served.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grader.errors import GraderError
from grader.hosting.allocator import return_large_buffers
from grader.hosting.api.app import create_app
from grader.hosting.api.server_app import COMPETITION_PAGES, Competitions, create_server_app
from grader.hosting.config import load_competition
from grader.hosting.context import SIGNUPS_PER_HOUR, ServerContext
from grader.hosting.db.session import Database, PoolSize
from grader.hosting.directory.databases import competition_database, drop_schema, schema_exists
from grader.hosting.directory.layout import Entry, ServerLayout, is_server_layout
from grader.hosting.directory.people import People, open_people
from grader.hosting.directory.upgrade import is_legacy
from grader.hosting.environment import WORKER_DATA, environment, with_worker_token
from grader.hosting.errors import HostingError
from grader.hosting.identity.ratelimit import FailureLimiter
from grader.hosting.keyring.files import KEYS_FOLDER
from grader.hosting.repeat_throttle import throttle_repeats
from grader.hosting.server import LocalWorkers, Reaper, ServeOptions, export_quietly, masked, prepare, shutdown
from grader.hosting.services import shared_workers
from grader.hosting.services.worker_copy import worker_copy
from grader.hosting.storage import PRIVATE_UMASK
from grader.text import MAX_ERROR_LINE, bounded

log = logging.getLogger("grader.hosting")

#: Seconds between two reads of server.json for competitions added or retired while the server runs.
WATCH_S = 2.0
#: Seconds before a competition that could not start is tried again.
RETRY_START_S = 60.0

#: The PostgreSQL connections the server's competitions hold together, at most (up to :data:`SHARED_UP_TO` of them):
#: PostgreSQL's default ``max_connections`` is 100, and the rest is left to admin commands, psql and its superusers.
SERVER_CONNECTIONS = 80
#: Below this share a competition still gets two connections: one for a long board computation, one for the rest.
MIN_CONNECTIONS = 2
SHARED_UP_TO = SERVER_CONNECTIONS // MIN_CONNECTIONS


def competition_pool(count: int) -> PoolSize:
    """The connection pool of each of ``count`` competitions: an equal share of :data:`SERVER_CONNECTIONS`, a quarter of it
    kept open once used, the rest opened while busy; never more than a one-competition server's default.

    Each competition has its own engine (its own schema, through its URL), so the pools cannot be one; their sum is what
    PostgreSQL sees: at most :data:`SERVER_CONNECTIONS` for up to :data:`SHARED_UP_TO` competitions, two per competition
    beyond (docs/hosting.md says when to raise ``max_connections``).
    """
    share = max(MIN_CONNECTIONS, SERVER_CONNECTIONS // max(count, 1))
    default = PoolSize()
    if share >= default.most:
        return default
    size = max(1, share // 4)
    return PoolSize(size, share - size)


def open_layout(state_dir: Path, competitions_dir: Path | None, *, postgres: bool) -> ServerLayout:
    """The server's directory, made or read; every competition file in ``competitions_dir`` not in it yet is added.

    A one-competition state folder is refused with the command that upgrades it (the upgrade moves files: the host
    runs it, knowingly, once).
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    if is_legacy(state_dir):
        raise HostingError(
            f"{state_dir}: the state folder of a one-competition server",
            hint=f"upgrade it first: grader admin --state {state_dir} upgrade-state (or serve it as before with --competition FILE)",
        )
    layout = ServerLayout(state_dir).load() if is_server_layout(state_dir) else ServerLayout(state_dir)
    changed = not is_server_layout(state_dir)
    for path in sorted(competitions_dir.glob("*.toml")) if competitions_dir is not None else []:
        competition = load_competition(path)
        known = layout.entries.get(competition.name)
        if known is None:
            layout.add(competition.name, path, postgres=postgres)
            changed = True
        elif Path(known.file) != path.resolve() and not known.retired:
            log.warning("competition %r: served from %s (recorded); %s names it too and is ignored", competition.name, known.file, path)
    if changed:
        layout.save()  # before any competition's folder is made: a folder without its entry would be an orphan
    return layout


@dataclass(frozen=True)
class ManyOptions:
    """What ``grader serve --competitions`` was asked to do."""

    state_dir: Path
    competitions_dir: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    #: Local worker processes, in all: each serves every competition.
    workers: int = 1
    database: str | None = None
    broker: str | None = None
    trusted_proxies: tuple[str, ...] = ()
    min_body_rate: float = 16 << 10
    body_grace_s: float = 20.0


def prepare_entry(
    layout: ServerLayout,
    entry: Entry,
    options: ManyOptions,
    people: People | None = None,
    *,
    signups: FailureLimiter | None = None,
    served_databases: Callable[[], list[tuple[str, Database]]] | None = None,
) -> ServerContext:
    """Prepare ``entry``'s competition as a one-competition server prepares its own, in its folder and database (its
    connection pool sized for as many competitions as the directory serves now: :func:`competition_pool`);
    ``people``: the server's, who get 404 (not 401) from a competition they are not registered in; ``signups``: the
    server's one limiter of sign-ups per address; ``served_databases``: the competitions served now (a person's token
    is rotated in each)."""
    competition_file = Path(entry.file)
    one = ServeOptions(
        load_competition(competition_file),
        layout.folder(entry.name),
        database=competition_database(entry, options.database),
        broker=options.broker,
        competition_file=competition_file,
        pool=competition_pool(len(layout.active())),
    )
    ctx, _db = prepare(one)
    ctx.people = people
    if signups is not None:
        ctx.signups = signups
    ctx.served_databases = served_databases
    return ctx


@dataclass
class Running:
    """What the server started for one competition."""

    ctx: ServerContext
    reaper: Reaper


class LocalPool(LocalWorkers):
    """``count`` local worker processes that serve every competition of the server (``grader worker --local-of``).

    Each claims at the server's claim of many competitions, for every competition it finds listed whose copy is
    in ``STATE/worker-data/`` (:meth:`link`): a competition added while the server runs is served once its copy
    is exported. Logs and pid files in ``STATE/run/``.
    """

    def __init__(self, root: Path, count: int, url: str, *, umask: int) -> None:
        threading.Thread.__init__(self, name="grader-local-workers", daemon=True)
        self.umask, self.count, self.url = umask, count, url
        self.stopping = threading.Event()
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.tokens = shared_workers.pool_tokens(count)
        self.data = root / "worker-data"
        self.logs = root / "run"
        #: the competitions whose copies are exported before the workers start (those served at the start)
        self.ready: list[ServerContext] = []

    def link(self, name: str, ctx: ServerContext) -> None:
        """Enroll the pool's workers in competition ``name`` and link its copy where they look for it."""
        shared_workers.enroll(ctx.db, self.tokens)
        self.data.mkdir(exist_ok=True)
        link = self.data / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(ctx.state.worker_data, target_is_directory=True)

    def _start(self, name: str) -> None:
        self.logs.mkdir(exist_ok=True)
        log_file = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        process = subprocess.Popen(
            [sys.executable, "-m", "grader", "worker", "--local-of", str(os.getpid()), "--server", self.url, "--name", name],
            env={**with_worker_token(self.tokens[name]), WORKER_DATA: str(self.data)},
            stdout=log_file,
            stderr=subprocess.STDOUT,
            umask=self.umask,
        )
        log_file.close()
        self.processes[name] = process
        (self.logs / f"{name}.pid").write_text(f"{process.pid}\n")

    def run(self) -> None:
        for ctx in self.ready:  # exported (or found current) before the workers that grade on them start
            try:
                worker_copy(ctx)
            except Exception:  # one competition's copy must not keep the others' grades from starting
                log.exception("competition %r: its workers' data copy could not be exported", ctx.competition.name)
        super().run_loop()


class ManyServer:
    """The competitions served, and what runs for each."""

    def __init__(self, layout: ServerLayout, options: ManyOptions, url: str, umask: int) -> None:
        self.layout, self.options, self.url, self.umask = layout, options, url, umask
        self.competitions = Competitions()
        self.people = People(open_people(layout.root, options.database))
        self.signups = FailureLimiter(max_failures=SIGNUPS_PER_HOUR, window_s=3600.0)
        self.running: dict[str, Running] = {}
        self.pool = LocalPool(layout.root, options.workers, url, umask=umask) if options.workers > 0 else None
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.watcher = threading.Thread(target=self._watch, name="grader-directory", daemon=True)
        #: competitions that could not start, and when the watcher tries each again
        self.retry_at: dict[str, float] = {}

    def served_databases(self) -> list[tuple[str, Database]]:
        """The databases of the competitions served now (one snapshot)."""
        return [(name, ctx.db) for name, (ctx, _app) in self.competitions.served.items()]

    def prepare_all(self) -> None:
        """Prepare every active competition (before serving: a competition that cannot start stops the server)."""
        for entry in self.layout.active():
            try:
                self._serve(entry, start=False)
            except GraderError as error:  # the line names which of the server's competitions stops it
                _naming(error, Path(entry.file), f"competition {entry.name!r} cannot start")
                raise

    def _serve(self, entry: Entry, *, start: bool) -> None:
        ctx = prepare_entry(self.layout, entry, self.options, self.people, signups=self.signups, served_databases=self.served_databases)
        app = create_app(
            ctx,
            min_body_rate=self.options.min_body_rate,
            body_grace_s=self.options.body_grace_s,
            shared_session=True,
        )
        if self.pool is not None:
            self.pool.link(entry.name, ctx)
            if not start:
                self.pool.ready.append(ctx)
        running = Running(ctx, Reaper(ctx))
        with self.lock:
            self.running[entry.name] = running
            self.competitions.add(entry.name, ctx, app)
        if start:
            self._start(running)

    @staticmethod
    def _start(running: Running) -> None:
        running.reaper.start()
        threading.Thread(target=export_quietly, args=(running.ctx,), name="grader-worker-copy", daemon=True).start()

    def start(self) -> None:
        for running in list(self.running.values()):
            self._start(running)
        if self.pool is not None:
            self.pool.start()
        self.watcher.start()

    def stop(self) -> None:
        self.stopping.set()
        if self.pool is not None:
            self.pool.stop()
        for name in list(self.running):
            self._retire(name)
        self.people.db.dispose()

    def _retire(self, name: str) -> None:
        with self.lock:
            self.competitions.remove(name)
            running = self.running.pop(name, None)
        if self.pool is not None:
            (self.pool.data / name).unlink(missing_ok=True)  # the pool's workers stop claiming its jobs at their next look
        if running is not None:
            shutdown(running.ctx, running.reaper, None)

    def _watch(self) -> None:
        """Serve the competitions added to server.json, stop serving the retired ones."""
        while not self.stopping.wait(WATCH_S):
            try:
                self.layout.load()
                active = {e.name: e for e in self.layout.active()}
                for name in sorted(set(self.running) - set(active)):
                    log.info("competition %r retired: no longer served", name)
                    self._retire(name)
                for name in sorted(set(active) - set(self.running)):
                    if time.monotonic() < self.retry_at.get(name, 0.0):
                        continue
                    try:
                        self._serve(active[name], start=True)
                    except Exception:  # one competition that cannot start must not stop the others, nor flood the log
                        self.retry_at[name] = time.monotonic() + RETRY_START_S
                        log.exception("competition %r cannot start; tried again in %g s", name, RETRY_START_S)
                        continue
                    self.retry_at.pop(name, None)
                    log.info("competition %r added: served under %s%s/", name, COMPETITION_PAGES, name)
            except Exception:  # the watcher must outlive a half-written file
                log.exception("server directory: re-reading %s failed; trying again", self.layout.file)


def serve_many(options: ManyOptions) -> None:
    """Run a server of many competitions until interrupted."""
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    variables = environment()
    log.info("%s", return_large_buffers(variables.allocator, variables.mmap_threshold))
    host_umask = os.umask(PRIVATE_UMASK)
    layout = open_layout(options.state_dir, options.competitions_dir, postgres=options.database is not None)
    url = f"http://{'127.0.0.1' if options.host in ('0.0.0.0', '::') else options.host}:{options.port}"
    server = ManyServer(layout, options, url, host_umask)
    server.prepare_all()
    app = create_server_app(
        server.competitions,
        session_keys=layout.root / KEYS_FOLDER,
        on_start=server.start,
        on_stop=server.stop,
        min_body_rate=options.min_body_rate,
        body_grace_s=options.body_grace_s,
    )
    names = ", ".join(e.name for e in layout.active()) or "none yet"
    database = masked(options.database) if options.database else "SQLite in each competition's folder"
    print(
        f"serving {len(layout.active())} competition(s) ({names}) on {url} (listing: {url}/; each under {url}/c/<name>/); "
        f"state in {layout.root}; database: {database}; local workers (serving every competition): {options.workers}",
        file=sys.stderr,
        flush=True,
    )
    config = uvicorn.Config(
        app,
        host=options.host,
        port=options.port,
        log_level="warning",
        timeout_graceful_shutdown=5,
        proxy_headers=bool(options.trusted_proxies),
        forwarded_allow_ips=list(options.trusted_proxies),
    )
    throttle_repeats()
    uvicorn.Server(config).run()


__all__ = ["ManyOptions", "ManyServer", "competition_pool", "open_layout", "prepare_entry", "serve_many"]


def add_competition(state_dir: Path, competition_file: Path, database: str | None) -> Entry:
    """``grader admin competition add``: record the competition and apply its start checks now (database, pins, keys,
    log entry 0, the end held): a competition that could not start is not added, and nothing of it is left (its folder
    and, on PostgreSQL, its schema are removed when this command made them). A running server serves it within
    :data:`WATCH_S` seconds."""
    if is_legacy(state_dir):
        raise HostingError(
            f"{state_dir}: the state folder of a one-competition server", hint=f"upgrade it first: grader admin --state {state_dir} upgrade-state"
        )
    layout = ServerLayout(state_dir).load() if is_server_layout(state_dir) else ServerLayout(state_dir)
    competition = load_competition(competition_file)
    if competition.name in layout.entries:
        state = "retired" if layout.entries[competition.name].retired else "served"
        raise HostingError(f"competition {competition.name!r} is already on this server ({state}); a name is never reused")
    entry = layout.add(competition.name, competition_file, postgres=database is not None)
    # The checks first, on a copy of the directory that names the new competition: a failure leaves server.json as it was.
    # A folder or schema there already (left by an earlier grader's failed add) is reused, and kept on failure.
    folder = layout.folder(entry.name)
    # the folders above it go too when this add made them: a competitions/ folder without server.json reads as an upgrade stopped
    made = [each for each in (layout.root, folder.parent) if not each.exists()]
    made_folder = not folder.exists()
    made_schema = database is not None and entry.schema is not None and not schema_exists(database, entry.schema)
    try:
        ctx = prepare_entry(layout, entry, ManyOptions(state_dir, database=database))
    except BaseException as error:
        # Its keys (a partition secret, a blinding key) and tables belong to no competition: a later add makes fresh ones.
        if made_folder:
            shutil.rmtree(folder, ignore_errors=True)
        for each in reversed(made):
            with contextlib.suppress(OSError):  # not empty: something not ours is there, and stays
                each.rmdir()
        if made_schema and database is not None and entry.schema is not None:
            with contextlib.suppress(HostingError):  # the refusal's line matters more; a schema left is reused by the next add
                drop_schema(database, entry.schema)
        if isinstance(error, GraderError):
            _naming(error, competition_file, f"competition {entry.name!r} not added")
        raise
    ctx.dispatcher.close()
    ctx.db.dispose()
    layout.save()
    return entry


def _naming(error: GraderError, competition_file: Path, what: str) -> None:
    """Begin ``error``'s line with the competition's file and ``what`` befell it (its class, hence its exit status, unchanged)."""
    said = error.message.removeprefix(f"{competition_file}: ")  # a line that names the file already names it once
    error.message = bounded(f"{competition_file}: {what}: {said}", MAX_ERROR_LINE)
    error.args = (error.message,)


def retire_competition(state_dir: Path, name: str) -> Entry:
    """``grader admin competition retire``: a running server stops serving ``name``; its folder and rows stay."""
    if not is_server_layout(state_dir):
        raise HostingError(f"{state_dir}: not the state folder of a server of many competitions")
    layout = ServerLayout(state_dir).load()
    entry = layout.retire(name)
    layout.save()
    return entry
