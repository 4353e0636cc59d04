"""Teams in the database (docs/hosting.md, "Teams"): who is in which team, the invitation codes, the lock that
serialises every change of a team with its members' admissions, and the two scopes a team gives its members.

Two scopes, on purpose different:

- *charged* (quotas): the team's submissions and every submission a current member ever made (before joining, or
  in a team since left). Moving between teams or leaving therefore never frees quota: nothing already charged to
  someone stops counting against the team they are in.
- *visible* (reads): the team's submissions, and the caller's own made outside any team. A member who leaves loses
  the team's, their own made for it included: those stay the team's.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.orm import Session

from grader.hosting.db.models import Participant, Submission, Team, TeamMember
from grader.hosting.identity.tokens import token_digest

#: An invitation code's prefix: a participant who pastes one where a token goes (or the reverse) is told which is which.
CODE_PREFIX = "gti"


def team_of(session: Session, participant_id: int) -> int | None:
    """The id of ``participant_id``'s team, or None."""
    return session.scalar(select(TeamMember.team_id).where(TeamMember.participant_id == participant_id))


def member_ids(session: Session, team_id: int) -> list[int]:
    """The ids of ``team_id``'s members, in the order they joined."""
    return list(session.scalars(select(TeamMember.participant_id).where(TeamMember.team_id == team_id).order_by(TeamMember.joined_at)).all())


def lock_team_of(session: Session, participant_id: int, team_id: int | None = None) -> int | None:
    """Serialise, until ``session`` ends, the admissions and team changes of ``participant_id`` and of their team
    (``team_id`` when the caller knows the team it is about to join; else the one they are in, returned).

    Must be the session's first statement. PostgreSQL: the participant's row, then the team's row, ``FOR UPDATE``,
    always in that order (so two such transactions never wait on each other in a cycle). Two members' admissions, a
    join and an admission, two joins: each pair shares the team's row and runs one after the other, and each counts
    after the other committed (READ COMMITTED reads anew per statement). SQLite: ``BEGIN IMMEDIATE``, the database's
    write lock, taken before any count.
    """
    if session.get_bind().dialect.name == "sqlite":
        session.connection().exec_driver_sql("BEGIN IMMEDIATE")
        return team_id if team_id is not None else team_of(session, participant_id)
    session.execute(select(Participant.id).where(Participant.id == participant_id).with_for_update())
    team = team_id if team_id is not None else team_of(session, participant_id)
    if team is not None:
        session.execute(select(Team.id).where(Team.id == team).with_for_update())
    return team


def charged(session: Session, participant_id: int) -> tuple[ColumnElement[bool], list[int]]:
    """What counts against ``participant_id``'s quotas: a condition on :class:`Submission`, and whose reservations
    (uploads still arriving) count: the members', or the participant's alone."""
    team = team_of(session, participant_id)
    if team is None:
        return Submission.participant_id == participant_id, [participant_id]
    members = member_ids(session, team)
    return or_(Submission.team_id == team, Submission.participant_id.in_(members)), members


def visible(session: Session, participant_id: int) -> ColumnElement[bool]:
    """Which submissions ``participant_id`` may read: their team's, and their own made outside any team."""
    own = and_(Submission.participant_id == participant_id, Submission.team_id.is_(None))
    team = team_of(session, participant_id)
    return own if team is None else or_(own, Submission.team_id == team)


def code_digest(code: str) -> str:
    """The stored form of an invitation code: its SHA-256 (the code has 256 random bits: no salt needed)."""
    return token_digest(code)
