"""teams: a team, its members, its one-time invitation codes, and the team a submission was made for

Revision ID: 0021_teams
Revises: 0020_progress
Create Date: 2026-12-03

Teams (docs/hosting.md, "Teams") share quotas and see each other's submissions. A submission records the team its
maker belonged to at upload, so that it stays the team's when its maker leaves. Competitions before it had no teams:
empty tables, and every submission's ``team_id`` None.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021_teams"
down_revision = "0020_progress"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "teams",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(100), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "team_members",
        sa.Column("participant_id", sa.Integer(), sa.ForeignKey("participants.id"), primary_key=True),
        sa.Column("team_id", sa.Integer(), sa.ForeignKey("teams.id"), nullable=False, index=True),
        sa.Column("joined_at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "team_invites",
        sa.Column("code_sha256", sa.String(64), primary_key=True),
        sa.Column("team_id", sa.Integer(), sa.ForeignKey("teams.id"), nullable=False, index=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("used_at", sa.DateTime(), nullable=True),
    )
    with op.batch_alter_table("submissions") as batch:
        batch.add_column(sa.Column("team_id", sa.Integer(), sa.ForeignKey("teams.id", name="fk_submissions_team_id"), nullable=True))
        batch.create_index("ix_submissions_team_id", ["team_id"])


def downgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.drop_index("ix_submissions_team_id")
        batch.drop_column("team_id")
    op.drop_table("team_invites")
    op.drop_table("team_members")
    op.drop_table("teams")
