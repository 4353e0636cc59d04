"""Workers that serve several competitions of one server: one token, registered in each competition it serves.

Each competition keeps its workers in its own database (its own fingerprint binding, key, replicas and refusals):
a worker of several competitions is a row in each, under the same token, so that one ``grader worker`` claims for
all of them at the server's claim. The host registers a remote one in a second competition with the token the
first printed (:func:`add_with_token`, ``grader admin --in NAME add-worker W --same-token``). The local workers of
``grader serve --competitions`` are one pool: each is registered in every competition under the same name
(``local-<n>``) and token, re-keyed at every start as a one-competition server re-keys its own
(:func:`grader.hosting.identity.participants.rekey_local_worker`).
"""

from __future__ import annotations

from sqlalchemy import select

from grader.hosting.db.models import Worker
from grader.hosting.db.session import Database
from grader.hosting.errors import HostingError
from grader.hosting.identity.participants import rekey_local_worker
from grader.hosting.identity.tokens import new_token, token_digest
from grader.hosting.identity.workers import create_worker

#: The prefix of a worker's token (grader.hosting.identity.workers.create_worker) and the longest token accepted.
TOKEN_PREFIX = "gw_"
MAX_TOKEN = 200


def pool_tokens(count: int) -> dict[str, str]:
    """Fresh tokens for the pool's workers ``local-1`` … ``local-<count>``."""
    return {f"local-{index}": new_token("gw")[0] for index in range(1, count + 1)}


def enroll(db: Database, tokens: dict[str, str]) -> None:
    """Register each of the pool's workers in the competition of ``db`` under its token (created, or re-keyed)."""
    with db.session() as session:
        for name, token in tokens.items():
            rekey_local_worker(session, name)  # created or re-keyed, its fingerprint unbound, as at a one-competition start
            worker = session.scalar(select(Worker).where(Worker.name == name))
            assert worker is not None
            worker.token_sha256 = token_digest(token)  # the pool's token, the same in every competition


def add_with_token(db: Database, name: str, public_key: str | None, token: str) -> None:
    """Register remote worker ``name`` in the competition of ``db`` under ``token``, a worker token it holds already.

    The checks of a new worker (its name, its key), and the token's shape: a worker's token, as ``add-worker``
    prints it. The token is no secret of this competition's making, yet no weaker: it has the same 256 bits.
    """
    if not token.startswith(TOKEN_PREFIX) or len(token) > MAX_TOKEN or len(token) < len(TOKEN_PREFIX) + 40:
        raise HostingError("--same-token: GRADER_WORKER_TOKEN does not hold a worker token (`grader admin add-worker` prints one)")
    digest = token_digest(token)
    with db.session() as session:
        if session.scalar(select(Worker).where(Worker.token_sha256 == digest)) is not None:
            raise HostingError("this token is registered in this competition already (under another name)")
        worker, _fresh = create_worker(session, name, public_key)
        worker.token_sha256 = digest
