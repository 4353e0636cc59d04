"""The worker protocol's version: what ``grader serve`` and ``grader worker`` must agree on before anything else.

The worker protocol is every route under ``/api/v1/worker/`` with the bodies, jobs and runs
they carry (:mod:`grader.hosting.protocol.messages`, :mod:`grader.hosting.protocol.shard_messages`,
the compact run format). Every change to it bumps :data:`WORKER_PROTOCOL` and says so in
CHANGELOG.md; the grader's own version may change without it.

The version travels in a header, :data:`HEADER`, not in a body field: a header is read before
the body (a claim is refused before a byte of its body is read, so before any lease is taken),
and the protocol also has bodyless requests (an upload's ``GET``) and binary ones (a compact
run's ``PUT``) that have no JSON to put a field in. A worker sends it with every request; the
server names its own in every answer and refuses a worker request of another version, or of
none (a worker before 0.3.0), with one line naming both (:func:`server_refusal`). A job the
server hands out carries the version too (``Job.protocol``, ``ShardJobMessage.protocol``), and
the worker reads it before anything else in the job (:func:`job_refusal`).

History: 3 (issue 33): jobs name their competition (``Job.competition``), and a server of many
competitions takes claims at ``POST /api/v1/worker/claim`` naming the competitions a worker serves. A worker of
protocol 2 is refused (426) at its first request, with the line naming both versions.
4 (issue 34): a heartbeat carries each task's progress (``HeartbeatRequest.progress``: phase, documents encoded,
shards ranked; bounded in size, validated, stored at most once a second per attempt). A worker of protocol 3 is
refused (426) at its first request. The same version also carries a result's cost (issue 38): the facts a worker signs
may hold ``cost``, its ``grader-cost/v1`` block labelled ``"source": "worker"``, checked by the server
(:mod:`grader.grading.worker_cost`).
5 (issue 38): a shard job may be claimed while its task's query job runs (it encodes its documents meanwhile):
its message's ``queries_sha256`` is then null, and ``GET /api/v1/worker/shards/{id}/queries`` answers 202 until the
vectors are in, then the vectors with their sha256 in the ``Grader-Queries-Sha256`` header; a shard job whose query
job went back to the queue meanwhile is released (409, its try uncharged). A worker of protocol 4 is refused (426).
"""

from __future__ import annotations

from typing import Any

from grader import jsonio
from grader.hosting.errors import WorkerProtocolMismatch

#: The version of the worker protocol this grader speaks. Bump it with every change to what workers and server exchange.
WORKER_PROTOCOL = 5
#: The header that carries it, on every worker request and every answer of the server.
HEADER = "Grader-Worker-Protocol"
#: What a worker of a grader before 0.3.0, which sends no version, is called in a refusal.
NO_VERSION = "none (a grader before 0.3.0)"
REMEDY = "upgrade the worker or the server"


def _named(value: object) -> str:
    """A version as a refusal names it: the number, or a bounded quote of whatever else was sent."""
    if value is None:
        return NO_VERSION
    text = str(value)
    return text if text.isdigit() and len(text) <= 9 else repr(text[:20])


def server_refusal(sent: str | None) -> str | None:
    """The one line a server refuses a worker request with, whose header names ``sent`` (None: no header); None when it is ours."""
    if sent is not None and sent.strip() == str(WORKER_PROTOCOL):
        return None
    return f"worker protocol {_named(sent)} is not this server's {WORKER_PROTOCOL}: {REMEDY}"


def answer_refusal(status: int, named: str | None, server: str) -> str | None:
    """The one line a worker stops with, for an answer of ``server`` with ``status`` whose header names ``named``; None to go on.

    An answer that names another version stops the worker, whatever its status. One that names
    none stops it when it is a success or a 404 (a server before 0.3.0 answers without the header,
    and lacks the newer routes); any other answer without it may be a proxy's (nginx's 429 or 502
    while the server restarts) and is left to the usual handling.
    """
    if named is not None:
        if named.strip() == str(WORKER_PROTOCOL):
            return None
        return f"worker protocol {WORKER_PROTOCOL} is not the server's {_named(named)} ({server}): {REMEDY}"
    if 200 <= status < 300 or status == 404:
        return f"worker protocol {WORKER_PROTOCOL} is not the server's {NO_VERSION} ({server}): {REMEDY}"
    return None


def job_refusal(job: Any, server: str) -> str | None:
    """The one line a worker refuses a job (the decoded JSON the server handed out) with, unless it is of this protocol."""
    named = job.get("protocol") if isinstance(job, dict) else None
    if isinstance(named, int) and not isinstance(named, bool) and named == WORKER_PROTOCOL:
        return None
    return f"a job of worker protocol {_named(named)} is not this worker's {WORKER_PROTOCOL} ({server}): {REMEDY}"


def checked_job(raw: bytes, server: str) -> Any:
    """The decoded JSON of a job ``server`` handed out, once it is of this worker protocol (:class:`WorkerProtocolMismatch` otherwise)."""
    data = jsonio.loads(raw)
    why = job_refusal(data, server)
    if why is not None:
        raise WorkerProtocolMismatch(why)
    return data
