"""remote workers: the worker's signature stored with each accepted result

Revision ID: 0003_workers
Revises: 0002_leaderboard
Create Date: 2026-12-01 (workers on Celery; independent of 0002_leaderboard, re-chained when merged)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_workers"
down_revision = "0002_leaderboard"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("worker_signature", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("results") as batch:
        batch.drop_column("worker_signature")
