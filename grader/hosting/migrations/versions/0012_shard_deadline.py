"""shard deadline: a sharded attempt's deadline, and leases that lapsed unused (shard_jobs.deadline_at, used, unused)

Revision ID: 0012_shard_deadline
Revises: 0011_upload_arrival
Create Date: 2026-12-03

A job planned before the upgrade has no deadline (its attempt was planned without one;
the pin that lapses with its lease ends the wait that the deadline backs up). Its
current try counts as used, so a try already taken stays charged.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_shard_deadline"
down_revision = "0011_upload_arrival"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("shard_jobs") as batch:
        batch.add_column(sa.Column("deadline_at", sa.DateTime(), nullable=True))
        batch.add_column(sa.Column("used", sa.Boolean(), nullable=False, server_default=sa.true()))
        batch.add_column(sa.Column("unused", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("shard_jobs") as batch:  # the defaults filled the rows already there; the models set every new row's
        batch.alter_column("used", existing_type=sa.Boolean(), server_default=None)
        batch.alter_column("unused", existing_type=sa.Integer(), server_default=None)


def downgrade() -> None:
    with op.batch_alter_table("shard_jobs") as batch:
        batch.drop_column("unused")
        batch.drop_column("used")
        batch.drop_column("deadline_at")
