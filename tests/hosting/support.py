"""Helpers of the hosting tests: a real `grader serve` in a subprocess, competition files, admin commands."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tarfile
import time
import zlib
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.cli.main import cli
from grader.hosting.participant.client import HostingClient
from grader.hosting.protocol.version import HEADER, WORKER_PROTOCOL

REPO = Path(__file__).resolve().parents[2]


def worker_headers(token: str) -> dict[str, str]:
    """What every request of a worker carries: its bearer token and this grader's worker protocol version."""
    return {"Authorization": f"Bearer {token}", HEADER: str(WORKER_PROTOCOL)}


def stated_fingerprint(url: str, token: str, key: Ed25519PrivateKey | None = None) -> str:
    """State this machine's fingerprint for the worker of ``token`` as ``grader worker`` does at its start (signed with ``key``:
    a remote worker's); the digest bound, which every claim must name (worker protocol 2)."""
    from grader.hosting.worker.loop import WorkerApi

    api = WorkerApi(url, token, key)
    try:
        return api.state_fingerprint()
    finally:
        api.http.close()


def claim_body(fingerprint: str, wait_s: float = 0) -> dict[str, Any]:
    """A claim's body (``/claim`` or ``/shards/claim``) naming the worker's bound fingerprint."""
    return {"wait_s": wait_s, "fingerprint": fingerprint}


#: Short leases and a fast reaper, so fault tests end in seconds; a platform failure re-queued at once and bounded by
#: ``max_attempts`` alone (no backoff, no retry time), so a test that posts INFRA ends ``error`` in seconds. The tests of
#: the backoff set their own (tests/hosting/test_infra_backoff.py, tests/hosting/test_engine_outage_served.py).
FAST_QUEUE = {"lease_s": 4, "heartbeat_s": 1, "redispatch_s": 3, "reap_every_s": 0.5, "infra_backoff_s": 0, "infra_retry_s": 0}


def free_port() -> int:
    """A loopback port free right now, for a server in another process to bind (it may be taken meanwhile: see below).

    The kernel hands the same range to outgoing connections, so until the server binds it, a client socket of
    any process can take it. The servers of these tests therefore retry on a fresh port when the bind fails
    (:class:`Server`, tests/hosting/redis.py, tests/hosting/postgres.py); in-process listeners bind port 0 themselves.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: How many fresh ports a server's first start tries before the test fails.
BIND_ATTEMPTS = 5
#: What a server that lost its port race says (uvicorn, redis-server, PostgreSQL).
ADDRESS_IN_USE = ("address already in use", "could not bind ipv4 address", "could not create any tcp/ip sockets")


class PortTaken(Exception):
    """The server could not bind its port (someone took it after :func:`free_port` chose it)."""


def listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on 127.0.0.1:``port`` or 0.0.0.0:``port`` (from /proc/net/tcp)."""
    found = set()
    wanted = {f"0100007F:{port:04X}", f"00000000:{port:04X}"}
    with open("/proc/net/tcp", encoding="ascii") as table:
        next(table, None)
        for row in table:
            fields = row.split()
            if len(fields) > 9 and fields[1] in wanted and fields[3] == "0A":  # 0A: LISTEN
                found.add(fields[9])
    return found


def owns_listener(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds the socket listening on ``port`` (not some other server that took the port)."""
    inodes = {f"socket:[{inode}]" for inode in listening_inodes(port)}
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd) in inodes:
                return True
        except OSError:
            continue
    return False


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(value)


def write_competition(path: Path, *, tables: dict[str, dict[str, Any]] | None = None, **top: Any) -> Path:
    """A competition file on mini (overridable; a key given as None is left out), with fast queue timings and small limits."""
    values: dict[str, Any] = {
        "name": "test-comp",
        "benchmark": "mini",
        "split": "test",
        "sample_split": "dev",
        "start": "2020-01-01T00:00:00Z",
        "end": "2099-01-01T00:00:00Z",
        "max_attempts": 3,
    }
    values.update(top)
    sections: dict[str, dict[str, Any]] = {
        "queue": dict(FAST_QUEUE),
        "limits": {"time_limit_s": 60, "memory": "2g", "cpus": 1},
        "quotas": {"per_day": 5, "total": 20, "concurrent": 2, "sample_per_day": 5},
    }
    for name, table in (tables or {}).items():
        sections.setdefault(name, {}).update(table)
    lines = []
    for key, value in values.items():
        if value is None:
            continue
        lines.append(f"{key} = {value}" if key in ("start", "end") else f"{key} = {toml_value(value)}")
    for name, table in sections.items():
        lines.append(f"[{name}]")
        lines.extend(f"{key} = {toml_value(value)}" for key, value in table.items())
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def admin(state: Path, *args: str, database: str | None = None) -> str:
    """Run `grader admin --state STATE ARGS...` in-process; return stdout; fail on a non-zero exit."""
    extra = ["--database", database] if database else []
    result = CliRunner().invoke(cli, ["admin", "--state", str(state), *extra, *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def grader_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run the real `grader` command in a subprocess."""
    return subprocess.run(
        [sys.executable, "-c", "from grader.cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        cwd=REPO,
    )


class Server:
    """`grader serve` in a subprocess on a free loopback port."""

    #: The Python program the subprocess runs (the `grader` command); a subclass may prepare the process first.
    PROGRAM = "from grader.cli.main import main; main()"

    def __init__(self, competition: Path, state: Path, *, workers: int = 1, database: str | None = None) -> None:
        self.competition, self.state, self.workers, self.database = competition, state, workers, database
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log = state.parent / f"{state.name}-server.log"
        self._started = False
        self._log_offset = 0

    def serve_args(self) -> list[str]:
        """The `grader serve` arguments of this server."""
        args = ["serve", "--competition", str(self.competition), "--state", str(self.state), "--port", str(self.port), "--workers", str(self.workers)]
        if self.database:
            args += ["--database", self.database]
        return args

    def start(self, *, expect_ok: bool = True) -> Server:
        """Start (or restart) the server; with ``expect_ok``, wait until it answers.

        A first start whose port was taken meanwhile moves to a fresh port; a restart keeps its port (clients
        and workers know it) and tries it again.
        """
        first = not self._started
        for attempt in range(BIND_ATTEMPTS):
            self._log_offset = self.log.stat().st_size if self.log.exists() else 0
            with open(self.log, "ab") as log:
                self.process = subprocess.Popen(
                    [sys.executable, "-c", self.PROGRAM, *self.serve_args()],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=REPO,
                    preexec_fn=self.in_child,
                )
            if not expect_ok:
                return self
            try:
                self.wait_ready()
            except PortTaken:
                if attempt == BIND_ATTEMPTS - 1:
                    raise AssertionError(f"no free port after {BIND_ATTEMPTS} tries: {self.log.read_text()[-2000:]}") from None
                if first:
                    self.port = free_port()
                    self.url = f"http://127.0.0.1:{self.port}"
                else:
                    time.sleep(1)
                continue
            self._started = True
            return self
        raise AssertionError("unreachable")  # pragma: no cover

    def in_child(self) -> None:
        """Run in the server's process before it starts (a limit of its own, say); nothing by default."""

    def wait_ready(self, timeout: float = 180) -> None:
        """Wait until this server's own process answers /healthz (a generous bound: migrations and imports on a loaded machine)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                output = self.log.read_bytes()[self._log_offset :].decode("utf-8", "replace")
                if any(words in output.lower() for words in ADDRESS_IN_USE):
                    raise PortTaken(self.port)
                raise AssertionError(f"server exited {self.process.returncode}: {output[-2000:]}")
            try:
                # Ours, not another server that took the port first (ours then exits, above).
                if httpx.get(f"{self.url}/healthz", timeout=5).status_code == 200 and owns_listener(self.process.pid, self.port):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"server did not start within {timeout:g} s: {self.log.read_text()[-2000:]}")

    def worker_pids(self) -> list[int]:
        return [int(p.read_text()) for p in sorted((self.state / "run").glob("local-*.pid"))]

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        for pid in self.worker_pids():  # workers end with their parent; make sure
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def wait_for(predicate, timeout: float = 120, interval: float = 0.2, what: str = "condition"):  # type: ignore[no-untyped-def]
    """Poll ``predicate`` until it returns a truthy value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


class ManyServer(Server):
    """`grader serve --competitions DIR` (a server of many competitions) in a subprocess on a free loopback port."""

    def __init__(self, competitions: Path, state: Path, *, workers: int = 1, database: str | None = None) -> None:
        super().__init__(competitions, state, workers=workers, database=database)

    def serve_args(self) -> list[str]:
        args = [
            "serve",
            "--competitions",
            str(self.competition),
            "--state",
            str(self.state),
            "--port",
            str(self.port),
            "--workers",
            str(self.workers),
        ]
        if self.database:
            args += ["--database", self.database]
        return args

    def base(self, name: str) -> str:
        """Competition ``name``'s address: its pages, log and (for the CLI's --server) API."""
        return f"{self.url}/c/{name}"

    def worker_pids(self) -> list[int]:
        """The local workers' pids: one pool for every competition, in the server's run folder."""
        return [int(p.read_text()) for p in sorted(self.state.glob("run/local-*.pid"))]


def gzip_bomb(unpacked: int = 64 << 20) -> bytes:
    """A valid .tar.gz of one file of ``unpacked`` zero bytes: about a thousand times its size once unpacked."""
    header = tarfile.TarInfo("weights.bin")
    header.size = unpacked
    head = header.tobuf(format=tarfile.PAX_FORMAT)
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip container
    out = io.BytesIO()
    out.write(packer.compress(head))
    zeros = b"\0" * (1 << 20)
    for _ in range(unpacked >> 20):
        out.write(packer.compress(zeros))
    out.write(packer.compress(b"\0" * 1024))  # the end-of-archive blocks
    out.write(packer.flush())
    return out.getvalue()


def log_audit(server: Server, vkey: str, home: Path) -> subprocess.CompletedProcess[str]:
    """``grader log audit`` of ``server``'s one-competition log with the host checks, its checkpoints kept under ``home``."""
    return grader_cli("log", "audit", f"{server.url}/log", "--log-key", vkey, "--host", env={"XDG_STATE_HOME": str(home)}, timeout=120)


def served_entries(server: Server) -> list[bytes]:
    """The log entries ``server`` serves now (read from its SQLite database)."""
    with sqlite3.connect(server.state / "grader.sqlite3") as connection:
        rows = connection.execute("SELECT entry FROM log_entries ORDER BY idx").fetchall()
    connection.close()
    return [bytes(row[0]) for row in rows]


def queue_only_server(root: Path) -> Server:
    """A started ``grader serve --workers 0`` on mini in ``root``, whose quotas let participants queue many submissions:
    for the benchmarks of what waiting grades cost (``bench/progress_watches.py``, ``bench/wait_cost.py``)."""
    quotas = {"quotas": {"per_day": 50, "total": 100, "concurrent": 50}}
    return Server(write_competition(root / "c.toml", tables=quotas), root / "state", workers=0).start()


def queued_participants(server: Server, count: int, submission: Path) -> list[tuple[str, HostingClient, str]]:
    """``count`` new participants of ``server`` (``p0``, ``p1``, ...), each with ``submission`` uploaded and queued:
    (token, client, submission id) each."""
    queued = []
    for index in range(count):
        token = admin(server.state, "add-participant", f"p{index}").strip()
        client = HostingClient(server.url, token)
        queued.append((token, client, str(client.submit(submission)["id"])))
    return queued
