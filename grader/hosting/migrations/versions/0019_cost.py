"""cost: results.cpu_s, the CPU seconds an accepted grade cost, charged to the CPU-minute quota

Revision ID: 0019_cost
Revises: 0018_signup
Create Date: 2026-12-03

A signed report's ``cost.total.cpu_s`` (docs/reports.md, "The cost block": the grading worker's word) is kept on
its result row so that admission sums a participant's CPU-minutes of the last 24 h without reading reports
(``quotas.cpu_minutes_per_day``, docs/hosting.md). Rows already there had no cost block: NULL, charged nothing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019_cost"
down_revision = "0018_signup"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("cpu_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("results") as batch:
        batch.drop_column("cpu_s")
