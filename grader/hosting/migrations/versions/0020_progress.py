"""progress: attempts.progress and attempts.progress_at, where each task of a running grade is, as its worker last reported

Revision ID: 0020_progress
Revises: 0019_cost
Create Date: 2026-12-03

Since worker protocol 4 a heartbeat carries each task's progress (phase, documents encoded, shards ranked);
the server keeps the last report of the attempt, at most once a second, and shows it to the submission's
participant (docs/hosting.md, "Following a submission"). Attempts already there reported none: NULL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020_progress"
down_revision = "0019_cost"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("progress", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("progress_at", sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("progress_at")
        batch.drop_column("progress")
