"""A throw-away PostgreSQL cluster for the hosting tests (Debian's server binaries; scripts/setup-postgres.sh).

initdb refuses to run as root, so as root the cluster is created and run as the
``postgres`` user (``runuser``); it listens on 127.0.0.1 only, on a free port,
with its socket in its own folder, and is stopped (``pg_ctl -m immediate``) at the end.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.hosting.support import ADDRESS_IN_USE, BIND_ATTEMPTS, free_port


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _as_postgres(command: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *command]
    return command


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _stat_fields(pid: int) -> list[str]:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return []
    return stat[stat.rfind(")") + 2 :].split()  # after the command name, which may hold spaces


def _parent(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if len(fields) > 1 else None


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie does not: it only waits to be reaped)."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] != "Z"


class Cluster:
    """A running cluster; :meth:`new_database` gives each test its own empty database."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="grader-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self.user = "postgres" if os.geteuid() == 0 else os.environ.get("USER", "postgres")
        subprocess.run(
            _as_postgres([str(bin_dir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", self.user, "--no-sync", "-E", "UTF8"]),
            check=True,
            capture_output=True,
        )
        self.start(first=True)

    def start(self, *, first: bool = False) -> None:
        """Start the server (again: after a crash it runs its recovery first); wait until it accepts connections.

        At the first start the port may be taken between free_port() and the server's bind (by any process's client
        socket): then a fresh one. A restart keeps its port (the servers under test hold URLs naming it).
        """
        for attempt in range(BIND_ATTEMPTS if first else 1):
            log = self.root / "log"
            offset = log.stat().st_size if log.exists() else 0
            options = f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c max_connections=200"
            started = subprocess.run(
                _as_postgres([str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(log), "-w", "-t", "180", "start"]),
                capture_output=True,
            )
            if started.returncode == 0:
                return
            said = log.read_bytes()[offset:].decode("utf-8", "replace") if log.exists() else ""
            if not first or attempt == BIND_ATTEMPTS - 1 or not any(words in said.lower() for words in ADDRESS_IN_USE):
                raise AssertionError(f"PostgreSQL did not start: {started.stderr!r} {said[-1500:]}")
            self.port = free_port()

    def kill9(self) -> list[int]:
        """SIGKILL the postmaster and every process it started (backends, checkpointer, WAL writer...) at once, as a crash
        of the database server would; return the pids killed. Nothing is shut down cleanly; the next start recovers from the WAL."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        family = [postmaster] + [pid for pid in _pids() if _parent(pid) == postmaster]
        for pid in family:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(pid) for pid in family):
            time.sleep(0.05)
        return family

    def new_database(self) -> str:
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        subprocess.run(_as_postgres([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"]), capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


def _required_bin_dir() -> Path:
    bin_dir = _bin_dir()
    if bin_dir is None:
        if os.environ.get("GRADER_REQUIRE_POSTGRES") == "1" or os.environ.get("CI", "").lower() == "true":
            pytest.fail("PostgreSQL server binaries missing (run scripts/setup-postgres.sh)")
        pytest.skip("PostgreSQL server binaries missing (scripts/setup-postgres.sh installs them)")
    return bin_dir


@pytest.fixture(scope="session")
def postgres_cluster():  # type: ignore[no-untyped-def]
    """A PostgreSQL cluster, or a skip (a failure under GRADER_REQUIRE_POSTGRES=1 or CI=true)."""
    cluster = Cluster(_required_bin_dir())
    yield cluster
    cluster.stop()


@pytest.fixture
def private_postgres_cluster():  # type: ignore[no-untyped-def]
    """A cluster of the test's own, for tests that crash it (the session's cluster stays out of harm's way)."""
    cluster = Cluster(_required_bin_dir())
    yield cluster
    cluster.stop()
