"""The rule that keeps ``pytest -m 'not slow'`` a fast loop: a test that starts a server, a container or a process is slow.

Enforced while the tests run (:func:`guarded`, around the setup and the call of each test: hooks in
tests/conftest.py), not by reading their source, so a helper function or a fixture that starts something is
caught as well as the test itself, and so is a module- or session-scoped fixture set up for a test not marked slow:

* a test not marked ``@pytest.mark.slow`` that asks for a fixture of :data:`SLOW_FIXTURES`, or carries the
  ``docker`` mark, fails at once, naming them;
* during a test not marked slow, starting a process (``subprocess``, ``multiprocessing``, ``os.fork``,
  ``os.posix_spawn``), listening on a socket (any server: uvicorn, an asyncio server, a TCP proxy) or
  creating a container through the Docker SDK raises :class:`SlowOnly`, which fails the test with the reason.

Teardown is not guarded: stopping what a slow test's shared fixture started may take a process (``pg_ctl stop``).
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import pytest

#: Fixtures that start a server, a container or a process (directly or through the Docker engine).
SLOW_FIXTURES = frozenset({"docker_engine", "guard", "postgres_cluster", "private_postgres_cluster", "redis_server"})

WHY = "every test that starts a server, a container or a subprocess is marked @pytest.mark.slow (tests/slow_rule.py)"


class SlowOnly(Exception):
    """Something only a slow test may do was done by a test not marked slow."""


def is_slow(item: pytest.Item) -> bool:
    """Whether ``item`` carries the ``slow`` mark (on itself, its class, its module or a parameter)."""
    return item.get_closest_marker("slow") is not None


def misuses(item: pytest.Item) -> list[str]:
    """What marks ``item`` as slow-only (fixtures of :data:`SLOW_FIXTURES`, the docker mark) although it is not slow."""
    if is_slow(item):
        return []
    found = sorted(SLOW_FIXTURES & set(getattr(item, "fixturenames", ())))
    if item.get_closest_marker("docker") is not None:
        found.append("the docker mark")
    return found


def _refuse(what: str) -> Any:
    def refused(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise SlowOnly(f"this test {what} but is not marked slow: {WHY}")

    return refused


def forbid_slow_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make starting a process, listening on a socket or creating a container raise :class:`SlowOnly` (undone with ``monkeypatch``)."""
    starts_process = _refuse("starts a process")
    monkeypatch.setattr(subprocess, "_fork_exec", starts_process)
    import _posixsubprocess  # multiprocessing's spawn and forkserver start their processes through it

    monkeypatch.setattr(_posixsubprocess, "fork_exec", starts_process)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, starts_process)
    monkeypatch.setattr(socket.socket, "listen", _refuse("listens on a socket (starts a server)"))
    try:
        from docker.api.container import ContainerApiMixin
    except ImportError:  # pragma: no cover - docker is a runtime dependency
        return
    monkeypatch.setattr(ContainerApiMixin, "create_container", _refuse("creates a container"))


@contextmanager
def guarded(item: pytest.Item) -> Iterator[None]:
    """The rule around one phase (setup, call) of ``item``: nothing for a slow test; otherwise its checks and the guard."""
    if is_slow(item):
        yield
        return
    found = misuses(item)
    if found:
        pytest.fail(f"{item.nodeid} uses {', '.join(found)} but is not marked slow: {WHY}", pytrace=False)
    patch = pytest.MonkeyPatch()
    try:
        forbid_slow_work(patch)
        yield
    finally:
        patch.undo()
