"""Fair quotas: what a participant may still submit, and when the next submission becomes possible.

Only what the participant caused counts (states in ``CHARGED_STATES``:
in flight, scored, or ``failed`` with a participant failure code). Platform
failures (``error``: INFRA, lost workers) and host cancellations never count.
Windows roll over the upload completion times, in UTC.

Admission is atomic at the database (:func:`lock_admission`), so any number of
server processes on one database never admit more than the quota. Uploads in
progress hold an :class:`UploadReservation` (grader.hosting.intake.uploads)
and count like submissions until they commit, fail or expire.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, func, or_, select
from sqlalchemy.orm import Session

from grader import jsonio
from grader.hosting.config import Competition
from grader.hosting.db.models import CHARGED_STATES, IN_FLIGHT_STATES, Result, Setting, State, Submission, UploadReservation
from grader.hosting.identity import teams
from grader.hosting.intake.refusals import QuotaStatus, count_refusal, load_refusal, phase_refusal, refusals_refusal, window_refusal
from grader.hosting.states import Track

DAY = timedelta(hours=24)
#: The idempotency key's prefix of a phase's re-grade (grader.hosting.services.phase_regrade, which imports this one).
REGRADE_KEY = "regrade:"
HOUR = timedelta(hours=1)
#: The settings row holding a participant's recent refusal times (a JSON list of ISO times, at most the limit + 1).
#: A row of the settings table, not a table of its own: no migration while the schema's others are in flight.
_REFUSALS_KEY = "refusals:{}"


def quota_status(session: Session, competition: Competition, participant_id: int, track: str, now: datetime) -> QuotaStatus:
    """Where ``participant_id`` stands on ``track`` (``hidden`` or ``sample``) at ``now``: with their team's, if in one
    (grader.hosting.identity.teams.charged: a team shares its quotas).

    With phases, the hidden track's quotas are the open phase's, and count only its submissions (uploaded since it
    opened); the sample track is phase-independent."""
    phase = competition.phase_at(now) if track == Track.HIDDEN else None
    quotas = competition.in_phase(phase).quotas
    since = () if phase is None else (Submission.uploaded_at >= phase.start,)
    # a phase's re-grade of an earlier entry (services/phase_regrade.py: its key says so) is never charged
    charged = or_(Submission.idempotency_key.is_(None), ~Submission.idempotency_key.startswith(REGRADE_KEY, autoescape=True))
    scope, holders = teams.charged(session, participant_id)
    mine = (scope, Submission.track == track, Submission.state.in_(CHARGED_STATES), charged, *since)
    window = session.scalars(select(Submission.uploaded_at).where(*mine, Submission.uploaded_at > now - DAY).order_by(Submission.uploaded_at)).all()
    in_flight = session.scalar(select(func.count()).select_from(Submission).where(scope, Submission.state.in_(IN_FLIGHT_STATES), charged)) or 0
    reserved = _reserved(session, holders, now)
    window = sorted([*window, *(r.created_at for r in reserved if r.track == track)])
    in_flight += len(reserved)
    per_day = quotas.per_day if track == Track.HIDDEN else quotas.sample_per_day
    total_used = (
        (session.scalar(select(func.count()).select_from(Submission).where(*mine)) or 0) + sum(r.track == track for r in reserved)
        if track == Track.HIDDEN
        else None
    )
    total = quotas.total if track == Track.HIDDEN else None
    next_at: datetime | None = None
    if len(window) >= per_day and per_day > 0:
        next_at = window[len(window) - per_day] + DAY
    elif per_day == 0:
        next_at = None
    # Uploads still arriving count at their declared length: concurrent uploads cannot together overrun the bound.
    stored = int(session.scalar(select(func.coalesce(func.sum(Submission.upload_bytes), 0)).where(scope)) or 0) + sum(
        r.declared_bytes for r in reserved
    )
    refused, errors = _refusals(session, participant_id, now)
    cpu_s, cpu_next_at = _cpu_spent(session, scope, now, quotas.cpu_minutes_per_day)
    return QuotaStatus(
        track,
        len(window),
        per_day,
        total_used,
        total,
        in_flight,
        quotas.concurrent,
        next_at,
        stored,
        quotas.stored_bytes,
        refused_last_hour=len(refused),
        errors_last_hour=errors,
        refusals_per_hour=quotas.refusals_per_hour,
        infra_per_hour=quotas.infra_per_hour,
        refusals_drop_at=(min(refused) + HOUR) if refused else now + HOUR,
        cpu_s_24h=cpu_s,
        cpu_minutes_per_day=quotas.cpu_minutes_per_day or None,
        cpu_next_at=cpu_next_at,
    )


def _cpu_spent(session: Session, scope: ColumnElement[bool], now: datetime, minutes: float) -> tuple[float, datetime | None]:
    """CPU seconds the grades of the last 24 h cost (both tracks) of the submissions ``scope`` charges (a participant's, with
    their team's), and, at or past ``minutes``, when enough drops out.

    Only a charged submission's current result counts: a retried attempt (a platform failure) leaves no result and a
    replica's grade is not the accepted one, so neither is ever charged; a re-scoring replaces the result, not adds one.
    A submission still in flight has no result yet: admission counts the minutes already spent.
    """
    rows = session.execute(
        select(Submission.uploaded_at, Result.cpu_s)
        .join(Result, Result.id == Submission.result_id)
        .where(scope, Submission.state.in_(CHARGED_STATES), Submission.uploaded_at > now - DAY)
        .order_by(Submission.uploaded_at)
    ).all()
    spent = math.fsum(cpu for _, cpu in rows if cpu is not None)
    if minutes <= 0 or spent < minutes * 60:
        return spent, None
    remaining = spent
    for uploaded_at, cpu in rows:  # the oldest grade drops out of the window first
        remaining -= cpu or 0.0
        if remaining < minutes * 60:
            return spent, uploaded_at + DAY
    return spent, now + DAY  # pragma: no cover - the loop ends below the bound


def _refusals(session: Session, participant_id: int, now: datetime) -> tuple[list[datetime], int]:
    """``participant_id``'s refused uploads in the last hour, and its submissions ended ``error`` (uncharged platform failures) then."""
    errors = (
        session.scalar(
            select(func.count())
            .select_from(Submission)
            .where(Submission.participant_id == participant_id, Submission.state == State.ERROR.value, Submission.updated_at > now - HOUR)
        )
        or 0
    )
    return _refusal_times(session, participant_id, now), errors


def _reserved(session: Session, participant_ids: list[int], now: datetime) -> list[UploadReservation]:
    """The live reservations of ``participant_ids`` (one, or a team's members): uploads admitted and still arriving
    (expired ones count no more)."""
    return list(
        session.scalars(
            select(UploadReservation).where(UploadReservation.participant_id.in_(participant_ids), UploadReservation.expires_at > now)
        ).all()
    )


def lock_admission(session: Session, participant_id: int) -> None:
    """Serialise the admissions of ``participant_id`` (and of their team's members) until ``session`` ends, across every
    process on the database.

    Must be the session's first statement. Counting and inserting are otherwise a
    race: two servers (or two requests) both count ``quota - 1`` and both admit.
    PostgreSQL: a row lock on the participant, then on their team (``SELECT ... FOR UPDATE``,
    grader.hosting.identity.teams.lock_team_of); a second admission of the same participant or team, or a join
    to the team, waits for the first to commit, and its count, a later statement under READ COMMITTED, then sees
    the first one's row. Other participants are not held up. SQLite has no row locks: ``BEGIN IMMEDIATE`` takes
    the database's write lock before the count (pysqlite would only open the
    transaction at the INSERT, after a count made outside it); other writers wait
    (``busy_timeout``), readers do not (WAL).
    """
    teams.lock_team_of(session, participant_id)


def check_quota(
    session: Session, competition: Competition, participant_id: int, track: str, now: datetime, ends_at: datetime | None, *, incoming_bytes: int = 0
) -> None:
    """Raise :class:`RefusedSubmission` (with the time the next submission is possible) if one more is not allowed now.

    ``incoming_bytes``: the size of the upload being admitted (0 before its body is read: then
    a participant whose stored uploads already reach the bound is refused before sending one). The words are
    :mod:`grader.hosting.intake.refusals`', which ``grader submit`` also uses to refuse before uploading.
    """
    refusal = (
        window_refusal(competition.start, ends_at, now)
        or phase_refusal(competition.phases, now)
        or count_refusal(status := quota_status(session, competition, participant_id, track, now))
    )
    if refusal is not None:
        raise refusal
    # refused uploads and free platform failures then cost the participant: no path they can trigger grades or
    # unpacks for free without bound (the quota answer carries the count, so `grader submit` refuses it too)
    refusal = refusals_refusal(status) or load_refusal(status, incoming_bytes=incoming_bytes)
    if refusal is not None:
        raise refusal


def _refusal_times(session: Session, participant_id: int, now: datetime) -> list[datetime]:
    row = session.get(Setting, _REFUSALS_KEY.format(participant_id))
    times = [datetime.fromisoformat(t) for t in jsonio.loads(row.value)] if row is not None else []
    return [t for t in times if t > now - HOUR]


def record_refusal(session: Session, competition: Competition, participant_id: int, now: datetime) -> None:
    """Count one refused upload of ``participant_id`` at ``now`` (call inside :func:`lock_admission`'s transaction).

    Kept in the settings table, pruned to the last hour and to one more than the limit, so that
    every server process on the database sees the same count and a restart forgets nothing.
    """
    times = [*_refusal_times(session, participant_id, now), now][-(competition.quotas.refusals_per_hour + 1) :]
    key = _REFUSALS_KEY.format(participant_id)
    value = jsonio.dumps([t.isoformat() for t in times])
    row = session.get(Setting, key)
    if row is None:
        session.add(Setting(key=key, value=value))
    else:
        row.value = value
