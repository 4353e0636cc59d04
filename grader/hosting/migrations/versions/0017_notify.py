"""notify: participants' notification settings and the outbox of deliveries

Revision ID: 0017_notify
Revises: 0016_training_sketch
Create Date: 2026-12-03

A participant may set a webhook (with its HMAC secret) and an e-mail address (``notify_settings``); each state and
board change of their submissions adds a row per address to ``notify_deliveries`` in the transaction of the change,
and the server's sender delivers them (docs/hosting.md, "Notifications"). New tables: nothing to fill.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_notify"
down_revision = "0016_training_sketch"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notify_settings",
        sa.Column("participant_id", sa.Integer, sa.ForeignKey("participants.id"), primary_key=True),
        sa.Column("webhook_url", sa.String(2048), nullable=True),
        sa.Column("webhook_secret", sa.String(80), nullable=True),
        sa.Column("email", sa.String(254), nullable=True),
        sa.Column("updated_at", sa.DateTime, nullable=False),
    )
    op.create_table(
        "notify_deliveries",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("participant_id", sa.Integer, sa.ForeignKey("participants.id"), nullable=False),
        sa.Column("channel", sa.String(8), nullable=False),
        sa.Column("address", sa.String(2048), nullable=False),
        sa.Column("facts", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("tries", sa.Integer, nullable=False),
        sa.Column("next_at", sa.DateTime, nullable=False),
        sa.Column("done_at", sa.DateTime, nullable=True),
        sa.Column("outcome", sa.String(200), nullable=False),
    )
    op.create_index("ix_notify_deliveries_participant_id", "notify_deliveries", ["participant_id"])
    op.create_index("ix_notify_deliveries_due", "notify_deliveries", ["done_at", "next_at"])


def downgrade() -> None:
    op.drop_index("ix_notify_deliveries_due", table_name="notify_deliveries")
    op.drop_index("ix_notify_deliveries_participant_id", table_name="notify_deliveries")
    op.drop_table("notify_deliveries")
    op.drop_table("notify_settings")
