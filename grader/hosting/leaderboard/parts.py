"""Scores of a result on the full hidden split, its public part and its private part, computed on the server.

From the per-query values of the primary measure in the host-signed report
(verified with the host key before use) and the partition secret: every part
is scored with the benchmark's own aggregation (task means, then groups).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.orm import Session as OwnSession

from grader.hosting.clock import utcnow
from grader.hosting.db.models import Result, ResultPart, Submission
from grader.reports.verify import verify_envelope
from grader.stats.aggregate import ScoreTable
from grader.stats.partition import Partition, partition

PARTS = ("full", "public", "private")
PerQuery = dict[str, dict[str, float]]


@dataclass(frozen=True)
class SignedValues:
    """A verified report and its per-query values of the primary measure."""

    report: dict[str, Any]
    measure: str
    groups: dict[str, list[str]]
    values: PerQuery


_cache: dict[str, SignedValues] = {}
_cache_lock = threading.Lock()
_CACHE_MAX = 512


def signed_values(envelope_path: str | Path, public_key: Ed25519PublicKey) -> SignedValues:
    """The verified report at ``envelope_path`` (the server's own signature checked) and its per-query values; cached."""
    key = str(envelope_path)
    with _cache_lock:
        found = _cache.get(key)
    if found is not None:
        return found
    report = verify_envelope(Path(envelope_path).read_bytes(), public_key, source=Path(envelope_path).name).report
    aggregate = report["aggregate"]
    values = {name: dict(task["per_query"]["values"]) for name, task in report["tasks"].items() if task.get("per_query")}
    found = SignedValues(report, aggregate["measure"], {g: list(m) for g, m in aggregate.get("group_members", {}).items()}, values)
    with _cache_lock:
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        _cache[key] = found
    return found


@lru_cache(maxsize=1024)
def _partition(secret: bytes, task: str, query_ids: tuple[str, ...], fraction: float) -> Partition:
    return partition(secret, task, query_ids, fraction)


def partitions(secret: bytes, values: PerQuery, fraction: float) -> dict[str, Partition]:
    """Each task's public/private partition of the queries ``values`` covers (cached: every entry has the same queries)."""
    return {task: _partition(secret, task, tuple(sorted(per_query)), fraction) for task, per_query in values.items()}


def part_values(values: PerQuery, parts: dict[str, Partition], part: str) -> PerQuery:
    """The per-query values of one part (``full``, ``public`` or ``private``)."""
    if part == "full":
        return values
    return {task: {q: per_query[q] for q in getattr(parts[task], part)} for task, per_query in values.items()}


def score_parts(signed: SignedValues, secret: bytes, fraction: float) -> dict[str, dict[str, Any]]:
    """``{part: {"score": s, "tasks": {task: mean}}}`` for the three parts, by the benchmark's aggregation."""
    parts = partitions(secret, signed.values, fraction)
    scored: dict[str, dict[str, Any]] = {}
    for part in PARTS:
        table = ScoreTable.from_values(["entry"], signed.measure, [part_values(signed.values, parts, part)], signed.groups)
        scored[part] = {"score": table.score(0), "tasks": table.leaf_means(0)}
    return scored


_write_lock = threading.Lock()


def ensure_parts(session: Session, result: Result, public_key: Ed25519PublicKey, secret: bytes, fraction: float) -> ResultPart | None:
    """The result's part scores, computed and stored on first use; None for a result without a signed, scored report.

    The row is written in its own short transaction (under a lock, and tolerating a concurrent writer), so
    callers that only read never write and two requests computing the same row at once do not fail.
    """
    row = session.get(ResultPart, result.id)
    if row is not None:
        return row
    if result.state != "scored" or result.envelope_path is None:
        return None
    scored = score_parts(signed_values(result.envelope_path, public_key), secret, fraction)
    values = dict(
        result_id=result.id,
        full_score=scored["full"]["score"],
        public_score=scored["public"]["score"],
        private_score=scored["private"]["score"],
        tasks={part: scored[part]["tasks"] for part in PARTS},
        computed_at=utcnow(),
    )
    with _write_lock, OwnSession(session.get_bind()) as own:
        if own.get(ResultPart, result.id) is None:
            own.add(ResultPart(**values))
            try:
                own.commit()
            except IntegrityError:  # another server process wrote the same (deterministic) row first
                own.rollback()
    return ResultPart(**values)


def scored_hidden(session: Session) -> list[tuple[Submission, Result]]:
    """Every hidden-split submission in state ``scored`` with its current result."""
    rows = session.execute(
        select(Submission, Result)
        .join(Result, Result.id == Submission.result_id)
        .where(Submission.track == "hidden", Submission.state == "scored")
        .order_by(Submission.uploaded_at, Submission.id)
    ).all()
    return [(s, r) for s, r in rows]
