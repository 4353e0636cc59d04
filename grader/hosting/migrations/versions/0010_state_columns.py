"""the remaining state columns as the enums: CHECK constraints on results.state, transitions.from_state/to_state, upload_reservations.track

Revision ID: 0010_state_columns
Revises: 0009_shard_jobs
Create Date: 2026-12-03

The values are written out here, not imported (see 0004): a migration describes the
schema of its day. The server only ever wrote these values, so existing rows pass
(transitions.from_state is NULL on a submission's first row, which a CHECK admits).
On SQLite each table is rebuilt (batch mode); grader.hosting.db.session.migrate turns
foreign-key enforcement off around the migration and checks every reference before it commits.
"""

from __future__ import annotations

from alembic import op

revision = "0010_state_columns"
down_revision = "0009_shard_jobs"
branch_labels = None
depends_on = None

STATES = ("received", "queued", "running", "replicating", "scored", "failed", "error", "cancelled")
TRACKS = ("hidden", "sample")

#: table -> (constraint name, column, allowed values)
CHECKS: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    "results": (("ck_result_state", "state", STATES),),
    "transitions": (("ck_transition_from_state", "from_state", STATES), ("ck_transition_to_state", "to_state", STATES)),
    "upload_reservations": (("ck_upload_reservation_track", "track", TRACKS),),
}


def _one_of(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(value) for value in values)})"


def upgrade() -> None:
    for table, checks in CHECKS.items():
        with op.batch_alter_table(table) as batch:
            for name, column, values in checks:
                batch.create_check_constraint(name, _one_of(column, values))


def downgrade() -> None:
    for table, checks in CHECKS.items():
        with op.batch_alter_table(table) as batch:
            for name, _, _ in reversed(checks):
                batch.drop_constraint(name, type_="check")
