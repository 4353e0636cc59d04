"""A throw-away redis-server for the distributed hosting tests (Debian's package; scripts/setup-redis.sh).

It listens on 127.0.0.1 only, on a free port, with its own folder, a password
(as docs/deploy.md asks of a real one) and no persistence; it can be stopped
and started again on the same port (the broker-restart fault test).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.hosting.support import ADDRESS_IN_USE, BIND_ATTEMPTS, PortTaken, free_port


class RedisServer:
    """One redis-server process; ``url`` is the broker URL with its password."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.root = Path(tempfile.mkdtemp(prefix="grader-redis-"))
        self.port = free_port()
        self.password = os.urandom(12).hex()
        self.url = f"redis://:{self.password}@127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None
        self._started = False
        self.start()

    def start(self) -> None:
        """Start (or restart) it. A first start whose port was taken meanwhile moves to a fresh port; a restart keeps its port."""
        for attempt in range(BIND_ATTEMPTS):
            try:
                self._start_once()
            except PortTaken:
                if attempt == BIND_ATTEMPTS - 1:
                    raise AssertionError(f"redis-server found no free port in {BIND_ATTEMPTS} tries") from None
                if self._started:
                    time.sleep(1)
                else:
                    self.port = free_port()
                    self.url = f"redis://:{self.password}@127.0.0.1:{self.port}/0"
                continue
            self._started = True
            return

    def _start_once(self) -> None:
        log = self.root / "redis.log"
        offset = log.stat().st_size if log.exists() else 0
        args = [
            self.binary,
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.root),
            "--save",
            "",
            "--appendonly",
            "no",
            "--requirepass",
            self.password,
            "--protected-mode",
            "yes",
            "--daemonize",
            "no",
            "--logfile",
            str(self.root / "redis.log"),
        ]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        import redis

        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                said = log.read_bytes()[offset:].decode("utf-8", "replace") if log.exists() else ""
                if any(words in said.lower() for words in ADDRESS_IN_USE):
                    raise PortTaken(self.port)
                raise AssertionError(f"redis-server exited {self.process.returncode}: {said[-1000:]}")
            try:
                # Our password: another server that took the port would refuse it.
                if redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=1).ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)
        raise AssertionError(f"redis-server did not start: {log.read_text()[-1000:] if log.exists() else ''}")

    def stop(self) -> None:
        """Kill it (SIGKILL: a crash; queued messages are lost, as they would be without persistence)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def _binary() -> str | None:
    return shutil.which("redis-server") or (("/usr/bin/redis-server") if os.path.exists("/usr/bin/redis-server") else None)


@pytest.fixture
def redis_server():  # type: ignore[no-untyped-def]
    """A fresh redis-server, or a skip (a failure under GRADER_REQUIRE_REDIS=1 or CI=true)."""
    binary = _binary()
    if binary is None:
        if os.environ.get("GRADER_REQUIRE_REDIS") == "1" or os.environ.get("CI", "").lower() == "true":
            pytest.fail("redis-server missing (run scripts/setup-redis.sh)")
        pytest.skip("redis-server missing (scripts/setup-redis.sh installs it)")
    server = RedisServer(binary)
    yield server
    server.close()
