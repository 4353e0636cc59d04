"""replicas: a replicated job's grades per worker, the workers' stated fingerprints, the state ``replicating``

Revision ID: 0008_replica_grades
Revises: 0007_tlog_entries
Create Date: 2026-12-02 (replicas; re-chained when merged)

The states are written out here, not imported (see 0004): the CHECK constraint on
submissions.state gains ``replicating``. On SQLite that rebuilds the table (batch mode).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_replica_grades"
down_revision = "0007_tlog_entries"
branch_labels = None
depends_on = None

BEFORE = ("received", "queued", "running", "scored", "failed", "error", "cancelled")
AFTER = ("received", "queued", "running", "replicating", "scored", "failed", "error", "cancelled")


def _one_of(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(value) for value in values)})"


def upgrade() -> None:
    op.create_table(
        "replicas",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.String(length=32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("pin_id", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("outcome", sa.String(length=64), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["pin_id"], ["pins.id"]),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"]),
        sa.ForeignKeyConstraint(["worker_id"], ["workers.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_replicas_submission_id", "replicas", ["submission_id"])
    op.create_index("ix_replicas_worker_id", "replicas", ["worker_id"])
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("fingerprint", sa.String(length=64), nullable=True))
    with op.batch_alter_table("submissions") as batch:
        batch.drop_constraint("ck_submission_state", type_="check")
        batch.create_check_constraint("ck_submission_state", _one_of("state", AFTER))


def downgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.drop_constraint("ck_submission_state", type_="check")
        batch.create_check_constraint("ck_submission_state", _one_of("state", BEFORE))
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("fingerprint")
    op.drop_index("ix_replicas_worker_id", table_name="replicas")
    op.drop_index("ix_replicas_submission_id", table_name="replicas")
    op.drop_table("replicas")
