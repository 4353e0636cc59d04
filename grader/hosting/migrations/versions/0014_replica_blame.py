"""replica blame: the worker a dissenting replica is charged to (replicas.blamed_worker_id)

Revision ID: 0014_replica_blame
Revises: 0013_fingerprint_binding
Create Date: 2026-12-03

A dissenting replica of a sharded grade is not always its coordinator's fault: the worker of the
first of its jobs whose output differs from the majority's while its inputs agree is blamed. A
dissent recorded before this revision was its coordinator's (the only worker recorded): the
upgrade says so.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_replica_blame"
down_revision = "0013_fingerprint_binding"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("replicas") as batch:
        batch.add_column(sa.Column("blamed_worker_id", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_replicas_blamed_worker_id_workers", "workers", ["blamed_worker_id"], ["id"])
        batch.create_index("ix_replicas_blamed_worker_id", ["blamed_worker_id"])
    op.execute("UPDATE replicas SET blamed_worker_id = worker_id WHERE verdict = 'dissent'")


def downgrade() -> None:
    with op.batch_alter_table("replicas") as batch:
        batch.drop_index("ix_replicas_blamed_worker_id")
        batch.drop_constraint("fk_replicas_blamed_worker_id_workers", type_="foreignkey")
        batch.drop_column("blamed_worker_id")
