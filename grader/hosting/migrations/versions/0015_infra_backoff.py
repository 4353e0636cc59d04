"""infra backoff: platform failures retried with backoff for a time (shard_jobs and submissions: retry_at, infra_since)

Revision ID: 0015_infra_backoff
Revises: 0014_replica_blame
Create Date: 2026-12-04

A platform failure (``INFRA``) of a shard job or of an attempt no longer goes back to the queue for
an immediate claim: the row waits until ``retry_at`` (a backoff doubling per failure), and its
platform failures are retried for ``[queue] infra_retry_s`` from the first (``infra_since``) before the
job fails its task or the submission ends ``error``. Rows already there have neither: claimable at
once, their tries counted as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_infra_backoff"
down_revision = "0014_replica_blame"
branch_labels = None
depends_on = None

TABLES = ("shard_jobs", "submissions")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("retry_at", sa.DateTime(), nullable=True))
            batch.add_column(sa.Column("infra_since", sa.DateTime(), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("infra_since")
            batch.drop_column("retry_at")
