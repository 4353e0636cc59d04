"""upload arrival: when the copy holding an upload's reservation last showed progress (upload_reservations.arrived_at)

Revision ID: 0011_upload_arrival
Revises: 0010_state_columns
Create Date: 2026-12-03

A reservation already there gets its creation time: an upload that was in progress
across the upgrade is as old as it can be, so a retry under its key may take it
over at once (its copy died with the old server, or refreshes the mark when its
next bytes arrive).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_upload_arrival"
down_revision = "0010_state_columns"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("upload_reservations") as batch:
        batch.add_column(sa.Column("arrived_at", sa.DateTime(), nullable=True))
    op.execute("UPDATE upload_reservations SET arrived_at = created_at")
    with op.batch_alter_table("upload_reservations") as batch:
        batch.alter_column("arrived_at", existing_type=sa.DateTime(), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("upload_reservations") as batch:
        batch.drop_column("arrived_at")
