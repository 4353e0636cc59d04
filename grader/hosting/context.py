"""The server's context: its settings and resources, built once by the server and handed to every service.

It holds facts and handles only; it opens no transaction and decides nothing (the
services do). The dispatcher is seen through the
:class:`~grader.hosting.queue.dispatch.Dispatcher` protocol, so this module depends on no service.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.hosting.config import Competition
from grader.hosting.db.session import Database
from grader.hosting.identity.ratelimit import FailureLimiter
from grader.hosting.presence import Presence
from grader.hosting.queue.dispatch import Dispatcher
from grader.hosting.storage import StateDir
from grader.hosting.transparency.host_log import HostLog
from grader.sandbox.blinding import BlindingKey


class TokenHolders(Protocol):
    """The server's people (a server of many competitions): their tokens and their one web session."""

    def holds(self, token: str) -> bool:
        """Whether ``token`` is an active person's."""

    def start_session(self, token: str) -> tuple[str, str] | None:
        """A web session of the person holding ``token``: its id and the token's fingerprint."""

    def end_session(self, session_id: str) -> None:
        """Sign-out, in every competition."""

    def signed_in(self, session_id: str, fingerprint: str) -> tuple[str, str] | None:
        """The name and token digest of the person a live session names."""


#: Sign-up attempts one client address (an IPv6 one's /64) may make per hour, across the server's competitions.
SIGNUPS_PER_HOUR = 5


@dataclass
class ServerContext:
    """The competition, its database, state folder, dispatcher and pinned facts."""

    competition: Competition
    db: Database
    state: StateDir
    dispatcher: Dispatcher
    pin_id: int
    signing_key: Ed25519PrivateKey
    benchmark_target: str
    tasks: list[str]
    split: str
    #: The public split of ``--sample`` runs; None: the competition has none, and its sample track is off.
    sample_split: str | None
    #: The partition secret (keys/partition.secret) and its published commitment; never served before the end.
    partition_secret: bytes = b""
    partition_commitment: str = ""
    #: The blinding key (keys/blinding.secret): it makes the pseudonymous copy workers grade and the scoring jobs read it; no job carries it; its id is public, the key only after the end.
    blinding_key: BlindingKey | None = None
    limiter: FailureLimiter = field(default_factory=FailureLimiter)
    #: The largest body a worker's result may have (:mod:`grader.hosting.results.result_size`).
    result_body_bytes: int = 8 << 20
    #: The largest compact run a worker may put, per (task, split) (:func:`grader.hosting.results.result_size.run_caps`).
    run_body_bytes: dict[tuple[str, str], int] = field(default_factory=dict)
    #: The transparency log (grader.hosting.transparency.host_log); None only in tests that build a context without one.
    log: HostLog | None = None
    #: On a server of many competitions, its people: a token of theirs not registered in this competition gets 404
    #: for everything of it (as another participant's submission does), not 401. None: a one-competition server.
    people: TokenHolders | None = None
    #: Sign-ups per client address (docs/hosting.md, "Sign-up"): a server of many competitions hands every
    #: competition the same one, so that an address's sign-ups are counted across them.
    signups: FailureLimiter = field(default_factory=lambda: FailureLimiter(max_failures=SIGNUPS_PER_HOUR, window_s=3600.0))
    #: On a server of many competitions, the databases of the competitions it serves now (name, database): a person's
    #: token rotated on the web is rotated in each. None: a one-competition server.
    served_databases: Callable[[], list[tuple[str, Database]]] | None = None
    #: The workers this server process heard from lately (claims, heartbeats): what a waiting grade's estimate counts on.
    presence: Presence = field(default_factory=Presence)
