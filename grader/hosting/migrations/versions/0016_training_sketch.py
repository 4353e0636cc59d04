"""training sketch: submissions.sketch_sha256, the digest of the training sketch a hidden-track upload carried

Revision ID: 0016_training_sketch
Revises: 0015_infra_backoff
Create Date: 2026-12-03

A hidden-track submission may carry ``training.sketch``; intake keeps it at ``uploads/<id>.sketch`` and records
its SHA-256 here, and the scoring process audits the kept file only while it has that digest (docs/hosting.md,
"Contamination audit: a sketch inside the submission"). Rows already there carried none: NULL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_training_sketch"
down_revision = "0015_infra_backoff"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.add_column(sa.Column("sketch_sha256", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.drop_column("sketch_sha256")
