"""upload idempotency: a submission's idempotency key (unique per participant), reservations of uploads in progress

Revision ID: 0005_upload_idempotency
Revises: 0004_state_enums
Create Date: 2026-12-02 (idempotent uploads; admission before the body is read;
written beside 0004_state_enums and re-chained after it when merged)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_upload_idempotency"
down_revision = "0004_state_enums"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.add_column(sa.Column("idempotency_key", sa.String(length=64), nullable=True))
        batch.create_unique_constraint("uq_submissions_participant_key", ["participant_id", "idempotency_key"])
    op.create_table(
        "upload_reservations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=64), nullable=False),
        sa.Column("track", sa.String(length=16), nullable=False),
        sa.Column("body_sha256", sa.String(length=64), nullable=False),
        sa.Column("declared_bytes", sa.BigInteger(), nullable=False),
        sa.Column("holder", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["participant_id"], ["participants.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("participant_id", "idempotency_key", name="uq_upload_reservations_participant_key"),
    )
    op.create_index("ix_upload_reservations_expires_at", "upload_reservations", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_upload_reservations_expires_at", table_name="upload_reservations")
    op.drop_table("upload_reservations")
    with op.batch_alter_table("submissions") as batch:
        batch.drop_constraint("uq_submissions_participant_key", type_="unique")
        batch.drop_column("idempotency_key")
