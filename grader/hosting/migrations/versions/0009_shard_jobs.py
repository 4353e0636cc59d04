"""shard jobs: a sharded ONNX grade's query job and shards, each with its own lease and tries

Revision ID: 0009_shard_jobs
Revises: 0008_replica_grades
Create Date: 2026-12-02 (shard jobs; re-chained when merged)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_shard_jobs"
down_revision = "0008_replica_grades"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "shard_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.String(length=32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("task", sa.String(length=200), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.Integer(), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(), nullable=True),
        sa.Column("fingerprint", sa.String(length=64), nullable=True),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("failure_code", sa.String(length=32), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"]),
        sa.ForeignKeyConstraint(["worker_id"], ["workers.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("submission_id", "attempt", "task", "number", name="uq_shard_jobs_job"),
    )
    op.create_index("ix_shard_jobs_submission_id", "shard_jobs", ["submission_id"])
    op.create_index("ix_shard_jobs_state", "shard_jobs", ["state"])


def downgrade() -> None:
    op.drop_index("ix_shard_jobs_state", table_name="shard_jobs")
    op.drop_index("ix_shard_jobs_submission_id", table_name="shard_jobs")
    op.drop_table("shard_jobs")
