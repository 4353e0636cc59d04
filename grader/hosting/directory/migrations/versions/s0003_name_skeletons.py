"""People's names' confusable forms, UNIQUE: look-alike sign-ups refused by the database, whichever process races.

Revision ID: s0003_name_skeletons
Revises: s0002_person_sessions

Each person stores the digests of their name's two skeletons (:func:`grader.hosting.identity.names.skeleton_digests`)
under unique indexes. Existing people are backfilled oldest first; a person whose form an older one holds already
(look-alikes the host added: ``alice`` and ``Alice``) keeps None there, so the upgrade never fails on them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from grader.hosting.identity.names import skeleton_digests

revision = "s0003_name_skeletons"
down_revision = "s0002_person_sessions"
branch_labels = None
depends_on = None

COLUMNS = ("skeleton_sha256", "upper_skeleton_sha256")


def upgrade() -> None:
    with op.batch_alter_table("people") as batch:
        for column in COLUMNS:
            batch.add_column(sa.Column(column, sa.String(64), nullable=True))
    people = sa.table("people", sa.column("id", sa.Integer()), sa.column("name", sa.String()), *(sa.column(c, sa.String()) for c in COLUMNS))
    connection = op.get_bind()
    held: tuple[set[str], set[str]] = (set(), set())
    for person_id, name in connection.execute(sa.select(people.c.id, people.c.name).order_by(people.c.id)).all():
        values = {}
        for column, digest, seen in zip(COLUMNS, skeleton_digests(name), held, strict=True):
            if digest not in seen:
                seen.add(digest)
                values[column] = digest
        if values:
            connection.execute(sa.update(people).where(people.c.id == person_id).values(**values))
    with op.batch_alter_table("people") as batch:
        for column in COLUMNS:
            batch.create_index(f"ix_people_{column}", [column], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("people") as batch:
        for column in COLUMNS:
            batch.drop_index(f"ix_people_{column}")
            batch.drop_column(column)
