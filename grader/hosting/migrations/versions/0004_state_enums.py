"""state and track as enums: CHECK constraints on submissions.state and submissions.track

Revision ID: 0004_state_enums
Revises: 0003_workers
Create Date: 2026-12-02 (the state machine once, as data; grader/hosting/states.py)

The values are written out here, not imported: a migration describes the schema
of its day, whatever the enums become later (a new state is a new migration).
On SQLite a CHECK constraint can only be added by rebuilding the table (batch
mode); grader.hosting.db.session.migrate turns foreign-key enforcement off
around the migration and checks every reference before it commits.
"""

from __future__ import annotations

from alembic import op

revision = "0004_state_enums"
down_revision = "0003_workers"
branch_labels = None
depends_on = None

STATES = ("received", "queued", "running", "scored", "failed", "error", "cancelled")
TRACKS = ("hidden", "sample")


def _one_of(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(value) for value in values)})"


def upgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.create_check_constraint("ck_submission_track", _one_of("track", TRACKS))
        batch.create_check_constraint("ck_submission_state", _one_of("state", STATES))


def downgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.drop_constraint("ck_submission_state", type_="check")
        batch.drop_constraint("ck_submission_track", type_="check")
