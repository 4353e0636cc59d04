"""sign-up: registrations, a person's sign-up on the web and the host's decision

Revision ID: 0018_signup
Revises: 0017_notify
Create Date: 2026-12-03

A competition whose file says ``registration = "open"`` or ``"approval"`` takes sign-ups on the web (docs/hosting.md,
"Sign-up"); each is a row here: the name, the optional e-mail (the host's only), the digest of the rules accepted,
and the host's decision. Competitions before it had none: an empty table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_signup"
down_revision = "0017_notify"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "registrations",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(100), nullable=False, unique=True),
        sa.Column("email", sa.String(254), nullable=True),
        sa.Column("rules_sha256", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False, index=True),
        sa.Column("requested_at", sa.DateTime(), nullable=False),
        sa.Column("decided_at", sa.DateTime(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("registrations")
