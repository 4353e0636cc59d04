"""Teams (docs/hosting.md, "Teams"): create one, invite with a one-time code, join, leave, and what a member sees of
theirs. Each call is one transaction, serialised with the admissions of the participant and of the team
(grader.hosting.identity.teams.lock_team_of), so that no interleaving of joins and uploads on any number of server
processes passes a quota or the team's size.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from grader.hosting.clock import iso, utcnow
from grader.hosting.config import TeamPolicy
from grader.hosting.context import ServerContext
from grader.hosting.db.models import Participant, Team, TeamInvite, TeamMember
from grader.hosting.errors import TeamNotFound, TeamRefused
from grader.hosting.identity import teams
from grader.hosting.identity.participants import MAX_NAME
from grader.hosting.intake.quotas import quota_status
from grader.hosting.intake.refusals import QuotaStatus
from grader.hosting.schedule import ends_at
from grader.hosting.states import Track
from grader.hosting.transparency.log_events import log_team
from grader.text import first_unprintable

#: Live (unused, unexpired) invitation codes a team may hold at once: each is a row, and a team needs few.
LIVE_INVITES = 20
#: One answer for a code never issued, already taken or expired: telling them apart would tell a guesser which codes exist.
UNKNOWN_CODE = "no team has this invitation code (codes are single-use and expire)"


def _policy(ctx: ServerContext) -> TeamPolicy:
    if ctx.competition.teams is None:
        raise TeamNotFound("this competition has no teams")
    return ctx.competition.teams


def _open_until(ctx: ServerContext) -> datetime | None:
    """Membership may change until the merge deadline, and never after the end (the host may end it early); None: a
    standing leaderboard without a merge deadline, whose membership never locks."""
    known = [moment for moment in (ctx.competition.merge_deadline(), ends_at(ctx.db, ctx.competition)) if moment is not None]
    return min(known) if known else None


def _check_open(ctx: ServerContext, now: datetime) -> None:
    until = _open_until(ctx)
    if until is not None and now >= until:
        raise TeamRefused(f"team membership is locked since the merge deadline, {iso(until)}")


def create(ctx: ServerContext, participant_id: int, name: str) -> dict[str, Any]:
    """A new team named ``name`` with ``participant_id`` its first member; what :func:`show` answers."""
    _policy(ctx)
    if not name.strip() or len(name) > MAX_NAME or first_unprintable(name):
        raise TeamRefused(f"a team name is 1-{MAX_NAME} printable characters (no control, bidi or zero-width character)")
    now = utcnow()
    _check_open(ctx, now)
    try:
        with ctx.db.session() as session:
            if teams.lock_team_of(session, participant_id) is not None:
                raise TeamRefused("you are in a team already: leave it first")
            # nor a participant's name: a team's board row would pass for that participant's
            if session.scalar(select(Team.id).where(Team.name == name)) is not None or session.scalar(
                select(Participant.id).where(Participant.name == name)
            ):
                raise TeamRefused(f"a team or participant is named {name!r} already")
            team = Team(name=name, created_at=now)
            session.add(team)
            session.flush()
            session.add(TeamMember(participant_id=participant_id, team_id=team.id, joined_at=now))
            _log(session, ctx, participant_id, team.id, "create")
    except IntegrityError:  # the same name created at once by another process: the unique index decided
        raise TeamRefused(f"a team or participant is named {name!r} already") from None
    return show(ctx, participant_id)


def invite(ctx: ServerContext, participant_id: int) -> tuple[str, datetime]:
    """A new one-time invitation code to the caller's team, and when it expires (only its digest is kept)."""
    policy = _policy(ctx)
    now = utcnow()
    _check_open(ctx, now)
    code = f"{teams.CODE_PREFIX}_{secrets.token_urlsafe(32)}"
    expires = now + timedelta(seconds=policy.invite_ttl_s)
    with ctx.db.session() as session:
        team = teams.team_of(session, participant_id)
        if team is None:
            raise TeamNotFound("you are in no team")
        live = (TeamInvite.team_id == team, TeamInvite.used_at.is_(None), TeamInvite.expires_at > now)
        if (session.scalar(select(func.count()).select_from(TeamInvite).where(*live)) or 0) >= LIVE_INVITES:
            raise TeamRefused(f"your team holds {LIVE_INVITES} unused invitation codes already: use them, or wait until they expire")
        session.add(TeamInvite(code_sha256=teams.code_digest(code), team_id=team, created_at=now, expires_at=expires))
    return code, expires


def join(ctx: ServerContext, participant_id: int, code: str) -> dict[str, Any]:
    """Join the team of invitation ``code``, taking the code; what :func:`show` answers.

    Refused (nothing changes, the code stays valid) when the caller is in a team, the team is full, or the team
    and the caller, counted as one, already pass a quota (docs/hosting.md, "Teams").
    """
    policy = _policy(ctx)
    now = utcnow()
    _check_open(ctx, now)
    digest = teams.code_digest(code)
    # the code's team, read in a transaction of its own: an invitation's team never changes, and the locked
    # transaction's first statement must be its lock (participant first, then this team)
    with ctx.db.session() as session:
        team = session.scalar(select(TeamInvite.team_id).where(TeamInvite.code_sha256 == digest))
    if team is None:
        raise TeamNotFound(UNKNOWN_CODE)
    with ctx.db.session() as session:
        teams.lock_team_of(session, participant_id, team)
        if teams.team_of(session, participant_id) is not None:
            raise TeamRefused("you are in a team already: leave it first")
        taken = session.execute(
            update(TeamInvite).where(TeamInvite.code_sha256 == digest, TeamInvite.used_at.is_(None), TeamInvite.expires_at > now).values(used_at=now)
        )
        if taken.rowcount != 1:  # type: ignore[attr-defined]
            raise TeamNotFound(UNKNOWN_CODE)
        size = session.scalar(select(func.count()).select_from(TeamMember).where(TeamMember.team_id == team)) or 0
        if size >= policy.max_size:
            raise TeamRefused(f"the team is full ({policy.max_size} members at most)")
        session.add(TeamMember(participant_id=participant_id, team_id=team, joined_at=now))
        session.flush()
        _refuse_over_quota(session, ctx, participant_id, now)
        _log(session, ctx, participant_id, team, "join")
    return show(ctx, participant_id)


def _refuse_over_quota(session: Session, ctx: ServerContext, participant_id: int, now: datetime) -> None:
    """Counted as one team (the new member's row is flushed), do the members already pass a quota? Then the join is
    refused and its transaction rolls back: a team never holds more than one participant's quota."""
    for track in (Track.HIDDEN, Track.SAMPLE):
        if (over := _over(quota_status(session, ctx.competition, participant_id, track, now))) is not None:
            raise TeamRefused(f"joining would pass the team's quota: {over} ({track.value} track)")


def _over(status: QuotaStatus) -> str | None:
    """The first bound ``status`` passes (reaching one is allowed: the team then waits like any participant)."""
    if status.per_day >= 0 and status.used_24h > status.per_day:
        return f"{status.used_24h} submissions in 24 hours, {status.per_day} allowed"
    if status.total is not None and status.used_total is not None and status.used_total > status.total:
        return f"{status.used_total} submissions in all, {status.total} allowed"
    if status.in_flight > status.concurrent:
        return f"{status.in_flight} submissions in flight, {status.concurrent} allowed"
    if status.stored_limit is not None and status.stored_bytes > status.stored_limit:
        return f"{status.stored_bytes} bytes of uploads stored, {status.stored_limit} allowed"
    return None


def leave(ctx: ServerContext, participant_id: int) -> None:
    """Leave the caller's team: its submissions, theirs among them, stay the team's, and they read them no more."""
    _policy(ctx)
    now = utcnow()
    _check_open(ctx, now)
    with ctx.db.session() as session:
        team = teams.lock_team_of(session, participant_id)
        if team is None:
            raise TeamNotFound("you are in no team")
        session.execute(delete(TeamMember).where(TeamMember.participant_id == participant_id))
        _log(session, ctx, participant_id, team, "leave")


def _log(session: Session, ctx: ServerContext, participant_id: int, team_id: int, action: str) -> None:
    """The change's ``team`` log entry, in its transaction: names committed, as a receipt's (docs/transparency.md)."""
    if ctx.log is None:
        return
    name = session.scalar(select(Participant.name).where(Participant.id == participant_id))
    team = session.scalar(select(Team.name).where(Team.id == team_id))
    assert name is not None and team is not None, "called inside the change's transaction, on rows it holds"
    log_team(session, ctx.log, name=name, team=team, action=action)


def page_view(ctx: ServerContext, participant_id: int) -> dict[str, Any] | None:
    """What the /me page shows of teams: None in a competition without teams; else the caller's team (None when
    in none) and whether membership may still change."""
    if ctx.competition.teams is None:
        return None
    try:
        team: dict[str, Any] | None = show(ctx, participant_id)
    except TeamNotFound:
        team = None
    until = _open_until(ctx)
    return {"team": team, "open": until is None or utcnow() < until, "max_size": ctx.competition.teams.max_size}


def show(ctx: ServerContext, participant_id: int) -> dict[str, Any]:
    """The caller's team: its name, its members' names, its size bound and when membership locks."""
    policy = _policy(ctx)
    with ctx.db.session() as session:
        team_id = teams.team_of(session, participant_id)
        if team_id is None:
            raise TeamNotFound("you are in no team")
        team = session.get(Team, team_id)
        names = session.scalars(
            select(Participant.name)
            .join(TeamMember, TeamMember.participant_id == Participant.id)
            .where(TeamMember.team_id == team_id)
            .order_by(TeamMember.joined_at, Participant.name)
        ).all()
    until = _open_until(ctx)
    return {
        "name": team.name if team is not None else "",
        "members": list(names),
        "max_size": policy.max_size,
        "merge_deadline": None if until is None else iso(until),
        "locked": until is not None and utcnow() >= until,
    }
