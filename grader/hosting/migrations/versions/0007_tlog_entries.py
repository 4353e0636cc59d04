"""transparency log: the log's entries, appended in the transactions of their events

Revision ID: 0007_tlog_entries
Revises: 0006_web_sessions
Create Date: 2026-12-02 (the transparency log; re-chained when merged)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_tlog_entries"
down_revision = "0006_web_sessions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "log_entries",
        sa.Column("idx", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("entry", sa.LargeBinary(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("submission_id", sa.String(length=32), nullable=True),
        sa.Column("envelope_sha256", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("idx"),
    )
    op.create_index("ix_log_entries_submission_id", "log_entries", ["submission_id"])
    op.create_index("ix_log_entries_envelope_sha256", "log_entries", ["envelope_sha256"])
    # The row every append locks first (grader/hosting/transparency/log_store.py): present from the start, so that two
    # servers starting at once on a new database never race to create it.
    op.execute("INSERT INTO settings (key, value) VALUES ('log_head', '')")


def downgrade() -> None:
    op.execute("DELETE FROM settings WHERE key = 'log_head'")
    op.drop_index("ix_log_entries_envelope_sha256", table_name="log_entries")
    op.drop_index("ix_log_entries_submission_id", table_name="log_entries")
    op.drop_table("log_entries")
