"""Part scores and the public-part report of a result, computed once: when the result is accepted.

:class:`PartitionScorer` (called by :func:`grader.hosting.results.recording.accept_result`)
scores the full hidden split, its public part and its private part from the
per-query values of the report the host has just signed, and derives the
public-part report (:mod:`grader.hosting.leaderboard.public_report`). The
acceptance signs that report next to the result and stores the scores in the
transaction that records the scored state, so a board never shows a scored
submission without its parts, and no read computes or writes anything.

A database from 0.2.0 signed public-part reports on their first download and
may hold results accepted without part scores: :func:`repair_accepted` fills
both in once, at server start, with the same scorer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.errors import GraderError, ReportError
from grader.hosting.clock import utcnow
from grader.hosting.db.models import Result, ResultPart, Submission
from grader.hosting.db.session import Database
from grader.hosting.keyring.host_key import sign_and_store
from grader.hosting.leaderboard.public_report import public_part_report
from grader.hosting.leaderboard.values import PARTS, SignedValues, score_parts, signed_values, values_of
from grader.hosting.states import State, Track
from grader.hosting.storage import StateDir
from grader.hosting.visibility import Part
from grader.reports.model import Report
from grader.reports.signing import ENVELOPE_NAME

if TYPE_CHECKING:
    from grader.hosting.context import ServerContext

log = logging.getLogger("grader.hosting")


def part_columns(signed: SignedValues, secret: bytes, fraction: float) -> dict[str, Any] | None:
    """The columns of a :class:`ResultPart` row (all but ``result_id``); None when the report cannot be split into parts.

    That is a report without per-query values for every task (one from a grader before per-query values, or
    a malformed one): its parts cannot be scored, so it stays off the board rather than ranked on some tasks only.
    """
    if not signed.values or set(signed.values) != set(signed.report["tasks"]):
        return None
    try:
        scored = score_parts(signed, secret, fraction)
    except GraderError as error:
        log.warning("part scores of %s: %s", signed.report["subject"]["name"], error)
        return None
    return {
        "full_score": scored["full"]["score"],
        "public_score": scored[Part.PUBLIC]["score"],
        "private_score": scored[Part.PRIVATE]["score"],
        "tasks": {part: scored[part]["tasks"] for part in PARTS},
        "computed_at": utcnow(),
    }


@dataclass(frozen=True)
class PartitionScorer:
    """Scores the parts of a hidden-split report at acceptance; the server holds the secret, workers never do.

    The server's :data:`grader.hosting.results.recording.PartScorer` (the callable type the acceptance takes).

    Called with the report the host has just signed (so it needs no verification); returns the
    :class:`ResultPart` columns and the public-part report (unsigned), or None for a report whose
    parts cannot be scored.
    """

    secret: bytes = field(repr=False)
    fraction: float
    commitment: str

    def __call__(self, report: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
        try:
            signed = values_of(Report.from_json(report))
        except ReportError:  # the acceptance has validated it already; never fail an acceptance on it
            return None
        columns = part_columns(signed, self.secret, self.fraction)
        if columns is None:
            return None
        return columns, public_part_report(signed, self.secret, self.fraction, self.commitment)


def acceptance_scorer(ctx: ServerContext) -> PartitionScorer:
    """The scorer the server hands to the result acceptance: its partition secret and commitment, the public fraction."""
    return PartitionScorer(ctx.partition_secret, ctx.competition.leaderboard.public_fraction, ctx.partition_commitment)


def repair_accepted(db: Database, state: StateDir, key: Ed25519PrivateKey, scorer: PartitionScorer) -> list[str]:
    """At server start: give every scored hidden-split result what acceptance now stores; the submissions repaired.

    A database from 0.2.0 lacks the public-part reports that were to be signed on first download, and may
    lack part scores (a result accepted without the scorer). Each is computed from the signed report
    (verified with the host key), as acceptance would have; a result whose parts cannot be scored is left as it is.
    """
    with db.session() as session:
        rows = session.execute(
            select(Submission.id, Result, ResultPart.result_id)
            .join(Result, Result.id == Submission.result_id)
            .outerjoin(ResultPart, ResultPart.result_id == Result.id)
            .where(Submission.track == Track.HIDDEN, Submission.state == State.SCORED, Result.envelope_path.is_not(None))
            .order_by(Submission.id)
        ).all()
        repaired = []
        for submission_id, result, stored in rows:
            assert result.envelope_path is not None  # selected so
            folder = state.public_part_of(result.envelope_path)
            if stored is not None and (folder / ENVELOPE_NAME).is_file():
                continue
            scored = scorer(signed_values(result.envelope_path, key.public_key()).report)
            if scored is None:
                continue
            columns, public_report = scored
            if stored is None:
                session.add(ResultPart(result_id=result.id, **columns))
            if not (folder / ENVELOPE_NAME).is_file():
                folder.mkdir(parents=True, exist_ok=True)
                sign_and_store(public_report, key, folder)
            repaired.append(submission_id)
        return repaired


def stored_parts(session: Session, result_id: int) -> ResultPart | None:
    """The part scores stored at acceptance for ``result_id`` (None: not a scored hidden-split result, or not scorable)."""
    return session.get(ResultPart, result_id)


@dataclass(frozen=True)
class GradedSubmission:
    """What a board reads of a scored submission's row."""

    id: str
    participant_id: int
    name: str
    kind: str
    labels: dict[str, Any] | None
    uploaded_at: datetime
    #: the team it was made for (None: its participant's own): a team's submissions form one row (docs/hosting.md, "Teams")
    team_id: int | None = None


@dataclass(frozen=True)
class CurrentResult:
    """What a board reads of a scored submission's current result: which it is, and where its signed report is."""

    id: int
    envelope_path: str | None


@dataclass(frozen=True)
class StoredParts:
    """The part scores stored at acceptance that choose a participant's row (every number shown comes from the report)."""

    public_score: float
    private_score: float
    #: over every query of the graded split (the full board of public test data)
    full_score: float = 0.0


def scored_hidden(session: Session) -> list[tuple[GradedSubmission, CurrentResult, StoredParts]]:
    """Every hidden-split submission in state ``scored`` with its current result and that result's part scores.

    Only the columns a board, the finals and the retention read, as plain values: every board request reads every
    graded submission of the competition, and building three ORM objects of each (their JSON columns parsed) took most
    of a board's time with a few thousand of them (bench/many_competitions.py).
    """
    rows = session.execute(
        select(
            Submission.id,
            Submission.participant_id,
            Submission.name,
            Submission.kind,
            Submission.labels,
            Submission.uploaded_at,
            Submission.team_id,
            Result.id,
            Result.envelope_path,
            ResultPart.public_score,
            ResultPart.private_score,
            ResultPart.full_score,
        )
        .join(Result, Result.id == Submission.result_id)
        .join(ResultPart, ResultPart.result_id == Result.id)
        .where(Submission.track == Track.HIDDEN, Submission.state == State.SCORED)
        .order_by(Submission.uploaded_at, Submission.id)
    ).all()
    return [
        (GradedSubmission(sid, pid, name, kind, labels, uploaded_at, team_id), CurrentResult(rid, envelope), StoredParts(public, private, full))
        for sid, pid, name, kind, labels, uploaded_at, team_id, rid, envelope, public, private, full in rows
    ]
