"""leaderboard: per-part scores of results, final choices, a submission's declared labels

Revision ID: 0002_leaderboard
Revises: 0001
Create Date: 2026-12-01 (public/private parts, final choices, labels)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_leaderboard"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "result_parts",
        sa.Column("result_id", sa.Integer(), nullable=False),
        sa.Column("full_score", sa.Float(), nullable=False),
        sa.Column("public_score", sa.Float(), nullable=False),
        sa.Column("private_score", sa.Float(), nullable=False),
        sa.Column("tasks", sa.JSON(), nullable=False),
        sa.Column("computed_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["result_id"], ["results.id"]),
        sa.PrimaryKeyConstraint("result_id"),
    )
    op.create_table(
        "final_choices",
        sa.Column("submission_id", sa.String(length=32), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("chosen_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["participant_id"], ["participants.id"]),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"]),
        sa.PrimaryKeyConstraint("submission_id"),
    )
    op.create_index("ix_final_choices_participant_id", "final_choices", ["participant_id"])
    with op.batch_alter_table("submissions") as batch:
        batch.add_column(sa.Column("labels", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.drop_column("labels")
    op.drop_index("ix_final_choices_participant_id", table_name="final_choices")
    op.drop_table("final_choices")
    op.drop_table("result_parts")
