"""fingerprint binding: a worker's fingerprint is stated once and bound to it (workers.fingerprint_stated, fingerprint_signature,
fingerprint_refusals, fingerprint_refused)

Revision ID: 0013_fingerprint_binding
Revises: 0012_shard_deadline
Create Date: 2026-12-04

Before, ``workers.fingerprint`` held whatever the worker's last claim stated. It is now the
fingerprint bound to the worker, stated once on ``POST /api/v1/worker/fingerprint`` (signed by
a remote worker's key): a digest an older claim wrote is unsigned and would bind the worker to
a fingerprint it never stated as a statement, so it is cleared; every worker states its
fingerprint again at its next start (worker protocol 2). A downgrade keeps the digest bound.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_fingerprint_binding"
down_revision = "0012_shard_deadline"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("fingerprint_stated", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("fingerprint_signature", sa.Text(), nullable=True))
        batch.add_column(sa.Column("fingerprint_refusals", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("fingerprint_refused", sa.String(length=64), nullable=True))
    with op.batch_alter_table("workers") as batch:  # the default filled the rows already there; the model sets every new row's
        batch.alter_column("fingerprint_refusals", existing_type=sa.Integer(), server_default=None)
    op.execute(sa.text("UPDATE workers SET fingerprint = NULL"))  # stated by a claim, never bound: stated again at the next start


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("fingerprint_refused")
        batch.drop_column("fingerprint_refusals")
        batch.drop_column("fingerprint_signature")
        batch.drop_column("fingerprint_stated")
