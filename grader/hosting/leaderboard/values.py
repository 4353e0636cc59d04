"""The per-query values a board and its part scores are computed from, and the public/private split of them.

A signed hidden-split report carries, for each task, the per-query values of the
primary measure; the partition secret splits each task's queries into a public
and a private part (docs/statistics.md). Every part is scored with the
benchmark's own aggregation (task means, then groups).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from grader.errors import GraderError
from grader.hosting.leaderboard.caches import CompetitionCache, competition_of
from grader.hosting.visibility import Part
from grader.reports.model import Report
from grader.reports.verify import verify_envelope
from grader.stats.aggregate import ScoreTable
from grader.stats.partition import Partition, partition

#: The whole split's queries, then each part of them: the keys of a result's part scores.
PARTS: tuple[str, ...] = ("full", *Part)
PerQuery = dict[str, dict[str, float]]
#: What a board row or a participant's view says of a result whose signed report cannot be read.
UNAVAILABLE = "report unavailable"

log = logging.getLogger("grader.hosting")


@dataclass(frozen=True)
class SignedValues:
    """A report signed by this host and its per-query values of the primary measure."""

    report: dict[str, Any]
    measure: str
    groups: dict[str, list[str]]
    values: PerQuery


def values_of(report: Report) -> SignedValues:
    """The per-query values of the primary measure that ``report`` (already trusted: signed by this host) carries."""
    values = {name: dict(task.per_query.values) for name, task in report.tasks.items() if task.per_query is not None}
    groups = {group: list(members) for group, members in report.aggregate.group_members.items()}
    return SignedValues(dict(report.data), report.aggregate.measure, groups, values)


#: Verified reports, per competition: a board reads one per row, a participant's list one per scored submission. A
#: report with per-query values weighs up to a few MiB (CoIR's largest tasks), hence the overall bound.
_cache: CompetitionCache[str, SignedValues] = CompetitionCache(per_competition=512, overall=4096)


def signed_values(envelope_path: str | Path, public_key: Ed25519PublicKey) -> SignedValues:
    """The verified report at ``envelope_path`` (the server's own signature checked) and its per-query values; cached
    per competition (the host key's)."""
    key, competition = str(envelope_path), competition_of(public_key)
    found = _cache.get(competition, key)
    if found is not None:
        return found
    verified = verify_envelope(Path(envelope_path).read_bytes(), public_key, source=Path(envelope_path).name)
    found = values_of(Report.of_verified(verified.report))  # verify_envelope checked it against the schema
    _cache.put(competition, key, found)
    return found


def readable_values(envelope_path: str | Path, public_key: Ed25519PublicKey) -> SignedValues | None:
    """:func:`signed_values`, or None when the report is missing, unreadable or no longer verifies.

    Every number a board or a participant's view shows is derived from the signed report, so a result whose
    report is lost shows none: its row says :data:`UNAVAILABLE` rather than the board failing for everyone.
    The server's log names the file, for the operator to restore it from a backup.
    """
    try:
        return signed_values(envelope_path, public_key)
    except (OSError, GraderError) as error:
        log.error("report unavailable: %s: %s", envelope_path, error)
        return None


#: A result's part scores (a few numbers each), per competition: every scored submission of a participant's list.
_scored_cache: CompetitionCache[tuple[str, bytes, float], dict[str, dict[str, Any]]] = CompetitionCache(per_competition=8192, overall=65536)


def signed_part_scores(envelope_path: str | Path, public_key: Ed25519PublicKey, secret: bytes, fraction: float) -> dict[str, dict[str, Any]] | None:
    """:func:`score_parts` of the signed report at ``envelope_path`` (None: unavailable, see :func:`readable_values`); cached.

    What a participant's own view shows: computed from the report, never read from the database's copy of it.
    Cached by path like :func:`signed_values` (a result's folder is written once).
    """
    key, competition = (str(envelope_path), secret, fraction), competition_of(public_key)
    found = _scored_cache.get(competition, key)
    if found is not None:
        return found
    signed = readable_values(envelope_path, public_key)
    if signed is None:
        return None
    try:
        found = score_parts(signed, secret, fraction)
    except GraderError as error:  # acceptance scored it; a report that no longer scores shows nothing
        log.error("report unavailable: %s: %s", envelope_path, error)
        return None
    _scored_cache.put(competition, key, found)
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
