"""Every environment variable of the hosting layer: named here, read here, and nowhere else.

========================== ===================================================== =====================================
variable                   what                                                  read by
========================== ===================================================== =====================================
GRADER_SERVER              the competition server's URL                          ``grader submit/status/...``, ``worker``
GRADER_TOKEN               a participant's token                                 ``grader submit/status/submissions``
GRADER_WORKER_TOKEN        a worker's token (``grader admin add-worker``)        ``grader worker``
GRADER_WORKER_KEY_DIR      where a remote worker keeps its Ed25519 key pair      ``grader worker``
GRADER_WORKER_DATA         a worker's data copy (``admin export-worker-data``)   ``grader worker``
GRADER_BROKER              the Celery broker URL (``redis://...``)               ``grader serve``, ``grader worker``
GRADER_DATABASE            the database URL (default: SQLite in the state)       ``grader serve``
GRADER_HOST_KEY_PASSPHRASE encrypts the host's signing key at its first start    ``grader serve``
GRADER_FETCH_DEADLINE_S    seconds one client fetch may take in all (300)        client commands that fetch
GRADER_FETCH_MIN_RATE      bytes/s an answer averages after 10 s (2048)          client commands that fetch
GRADER_COMMAND_DEADLINE_S  seconds all of a command's fetches may take (3600)    client commands that fetch
GRADER_ALLOCATOR           ``default``: keep glibc's own malloc settings         ``grader serve``, ``grader worker``
GRADER_UPLOADS             where unfinished uploads keep archive and key         ``grader submit``
XDG_CACHE_HOME             the user's cache folder (GRADER_UPLOADS's default)    ``grader submit``
MALLOC_MMAP_THRESHOLD_     glibc's; when set, it is kept (not ours)              ``grader serve``, ``grader worker``
========================== ===================================================== =====================================

A command's option wins over its variable (the CLI passes the variable's name
to click, which reads it for the option); library code asks :func:`environment`.
docs/hosting.md lists the same table.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

SERVER = "GRADER_SERVER"
TOKEN = "GRADER_TOKEN"
WORKER_TOKEN = "GRADER_WORKER_TOKEN"
WORKER_KEY_DIR = "GRADER_WORKER_KEY_DIR"
WORKER_DATA = "GRADER_WORKER_DATA"
BROKER = "GRADER_BROKER"
DATABASE = "GRADER_DATABASE"
HOST_KEY_PASSPHRASE = "GRADER_HOST_KEY_PASSPHRASE"
FETCH_DEADLINE = "GRADER_FETCH_DEADLINE_S"
FETCH_MIN_RATE = "GRADER_FETCH_MIN_RATE"
COMMAND_DEADLINE = "GRADER_COMMAND_DEADLINE_S"
ALLOCATOR = "GRADER_ALLOCATOR"
UPLOADS = "GRADER_UPLOADS"
#: The XDG base directory of the user's caches: where ``grader submit`` keeps unfinished uploads by default
XDG_CACHE_HOME = "XDG_CACHE_HOME"
#: glibc's own variable (read by glibc at start): an operator's choice the server leaves alone
GLIBC_MMAP_THRESHOLD = "MALLOC_MMAP_THRESHOLD_"


@dataclass(frozen=True)
class Environment:
    """The hosting variables as this process sees them; an empty value counts as unset. Secrets stay out of ``repr``."""

    server: str | None = None
    token: str | None = field(default=None, repr=False)
    worker_token: str | None = field(default=None, repr=False)
    worker_key_dir: str | None = None
    worker_data: str | None = None
    broker: str | None = field(default=None, repr=False)  # a broker URL may carry its password
    database: str | None = field(default=None, repr=False)
    host_key_passphrase: str | None = field(default=None, repr=False)
    #: the client fetches' bounds (:mod:`grader.hosting.participant.fetch` parses them)
    fetch_deadline_s: str | None = None
    fetch_min_rate: str | None = None
    command_deadline_s: str | None = None
    #: ``default``: the server and the workers leave the C allocator's settings alone (:mod:`grader.hosting.allocator`)
    allocator: str | None = None
    mmap_threshold: str | None = None
    #: where ``grader submit`` keeps an unfinished upload's archive and key (:mod:`grader.hosting.participant.resume`)
    uploads: str | None = None
    cache_home: str | None = None


def environment(environ: Mapping[str, str] | None = None) -> Environment:
    """Read every hosting variable from ``environ`` (default: this process's environment)."""
    source = os.environ if environ is None else environ

    def value(name: str) -> str | None:
        return source.get(name) or None

    return Environment(
        server=value(SERVER),
        token=value(TOKEN),
        worker_token=value(WORKER_TOKEN),
        worker_key_dir=value(WORKER_KEY_DIR),
        worker_data=value(WORKER_DATA),
        broker=value(BROKER),
        database=value(DATABASE),
        host_key_passphrase=value(HOST_KEY_PASSPHRASE),
        fetch_deadline_s=value(FETCH_DEADLINE),
        fetch_min_rate=value(FETCH_MIN_RATE),
        command_deadline_s=value(COMMAND_DEADLINE),
        allocator=value(ALLOCATOR),
        mmap_threshold=value(GLIBC_MMAP_THRESHOLD),
        uploads=value(UPLOADS),
        cache_home=value(XDG_CACHE_HOME),
    )


def with_worker_token(token: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A child process's environment: ``environ`` (default: this process's) with :data:`WORKER_TOKEN` set to ``token``."""
    return {**(os.environ if environ is None else environ), WORKER_TOKEN: token}
