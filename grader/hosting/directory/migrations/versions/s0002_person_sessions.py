"""Web sessions of people: one sign-in for every competition a person is registered in.

Revision ID: s0002_person_sessions
Revises: s0001_people
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "s0002_person_sessions"
down_revision = "s0001_people"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "person_sessions",
        sa.Column("id_sha256", sa.String(64), primary_key=True),
        sa.Column("person_id", sa.Integer(), sa.ForeignKey("people.id"), nullable=False, index=True),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("person_sessions")
