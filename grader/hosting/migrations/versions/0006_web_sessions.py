"""web sessions: a signed-in session is stored, so that signing out ends it on the server

Revision ID: 0006_web_sessions
Revises: 0005_upload_idempotency
Create Date: 2026-12-02 (sign-out left the cookie valid; re-chained when merged)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_web_sessions"
down_revision = "0005_upload_idempotency"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "web_sessions",
        sa.Column("id_sha256", sa.String(length=64), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["participant_id"], ["participants.id"]),
        sa.PrimaryKeyConstraint("id_sha256"),
    )
    op.create_index("ix_web_sessions_participant_id", "web_sessions", ["participant_id"])


def downgrade() -> None:
    op.drop_index("ix_web_sessions_participant_id", table_name="web_sessions")
    op.drop_table("web_sessions")
