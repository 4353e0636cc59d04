"""Scores of a result on the full hidden split, its public part and its private part, computed on the server.

From the per-query values of the primary measure in the host-signed report and
the partition secret: every part is scored with the benchmark's own
aggregation (task means, then groups).

They are computed when a result is accepted (:class:`PartScorer`, called by
:func:`grader.hosting.services.results.accept_result`) and stored in the same
transaction that records the scored state, so a board never shows a scored
submission without its parts and no page view does grading math. Results
accepted before that (rows that predate it) are repaired at server start
(:func:`backfill_parts`), and :func:`ensure_parts` still fills a missing row
on first use, from the report verified with the host key.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.orm import Session as OwnSession

from grader.errors import GraderError
from grader.hosting.clock import utcnow
from grader.hosting.db.models import Result, ResultPart, Submission
from grader.hosting.db.session import Database
from grader.reports.verify import verify_envelope
from grader.stats.aggregate import ScoreTable
from grader.stats.partition import Partition, partition

if TYPE_CHECKING:
    from grader.hosting.context import ServerContext

PARTS = ("full", "public", "private")
PerQuery = dict[str, dict[str, float]]
log = logging.getLogger("grader.hosting")


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
    found = values_of(report)
    with _cache_lock:
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        _cache[key] = found
    return found


def values_of(report: dict[str, Any]) -> SignedValues:
    """The per-query values of the primary measure that ``report`` (already trusted: signed by this host) carries."""
    aggregate = report["aggregate"]
    values = {name: dict(task["per_query"]["values"]) for name, task in report["tasks"].items() if task.get("per_query")}
    return SignedValues(report, aggregate["measure"], {g: list(m) for g, m in aggregate.get("group_members", {}).items()}, values)


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


def part_columns(signed: SignedValues, secret: bytes, fraction: float) -> dict[str, Any] | None:
    """The columns of a :class:`ResultPart` row (all but ``result_id``); None when the report cannot be split into parts.

    That is a report without per-query values for every task (one from a grader before per-query values, or
    a malformed one): its parts cannot be scored, so it stays off the board rather than ranked on some tasks only.
    """
    tasks = signed.report.get("tasks") or {}
    if not signed.values or set(signed.values) != set(tasks):
        return None
    try:
        scored = score_parts(signed, secret, fraction)
    except GraderError as error:
        log.warning("part scores of %s: %s", signed.report.get("subject", {}).get("name", "?"), error)
        return None
    return {
        "full_score": scored["full"]["score"],
        "public_score": scored["public"]["score"],
        "private_score": scored["private"]["score"],
        "tasks": {part: scored[part]["tasks"] for part in PARTS},
        "computed_at": utcnow(),
    }


@dataclass(frozen=True)
class PartScorer:
    """Scores the parts of a hidden-split report at acceptance; the server holds the secret, workers never do.

    Called with the report the host has just signed (so it needs no verification); returns the
    :class:`ResultPart` columns that the acceptance stores in the transaction recording the scored state.
    """

    secret: bytes = field(repr=False)
    fraction: float

    def __call__(self, report: dict[str, Any]) -> dict[str, Any] | None:
        try:
            signed = values_of(report)
        except (KeyError, TypeError, AttributeError):  # a schema-valid report always has these; never fail an acceptance on it
            return None
        return part_columns(signed, self.secret, self.fraction)


def acceptance_scorer(ctx: ServerContext) -> PartScorer:
    """The scorer the server hands to the result acceptance: its partition secret and the competition's public fraction."""
    return PartScorer(ctx.partition_secret, ctx.competition.leaderboard.public_fraction)


_write_lock = threading.Lock()


def ensure_parts(session: Session, result: Result, public_key: Ed25519PublicKey, secret: bytes, fraction: float) -> ResultPart | None:
    """The result's part scores: the stored row, or (a row that predates scoring at acceptance) computed and stored now.

    None for a result without a signed, scored report with per-query values. A row is written in its own
    short transaction (under a lock, and tolerating a concurrent writer), so callers that only read never
    write and two requests computing the same row at once do not fail.
    """
    row = session.get(ResultPart, result.id)
    if row is not None:
        return row
    if result.state != "scored" or result.envelope_path is None:
        return None
    columns = part_columns(signed_values(result.envelope_path, public_key), secret, fraction)
    if columns is None:
        return None
    values = {"result_id": result.id, **columns}
    with _write_lock, OwnSession(session.get_bind()) as own:
        if own.get(ResultPart, result.id) is None:
            own.add(ResultPart(**values))
            try:
                own.commit()
            except IntegrityError:  # another server process wrote the same (deterministic) row first
                own.rollback()
    return ResultPart(**values)


def backfill_parts(db: Database, public_key: Ed25519PublicKey, secret: bytes, fraction: float) -> list[str]:
    """Repair at server start: store the parts of every scored hidden-split result that has none; the submissions repaired.

    Those are results accepted before part scores were computed at acceptance (or by a server without the hook).
    """
    with db.session() as session:
        missing = session.execute(
            select(Submission.id, Result)
            .join(Result, Result.id == Submission.result_id)
            .outerjoin(ResultPart, ResultPart.result_id == Result.id)
            .where(Submission.track == "hidden", Submission.state == "scored", ResultPart.result_id.is_(None))
            .order_by(Submission.id)
        ).all()
        return [sid for sid, result in missing if ensure_parts(session, result, public_key, secret, fraction) is not None]


def scored_hidden(session: Session) -> list[tuple[Submission, Result]]:
    """Every hidden-split submission in state ``scored`` with its current result."""
    rows = session.execute(
        select(Submission, Result)
        .join(Result, Result.id == Submission.result_id)
        .where(Submission.track == "hidden", Submission.state == "scored")
        .order_by(Submission.uploaded_at, Submission.id)
    ).all()
    return [(s, r) for s, r in rows]
