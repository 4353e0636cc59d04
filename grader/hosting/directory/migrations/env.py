"""Alembic environment of the server database (people): run by :func:`grader.hosting.directory.people.open_people`."""

from __future__ import annotations

from alembic import context

from grader.hosting.directory.models import ServerBase

config = context.config
connection = config.attributes.get("connection")
if connection is None:  # pragma: no cover - the grader always passes a connection
    raise RuntimeError("run migrations through grader.hosting.directory.people.open_people")
context.configure(
    connection=connection,
    target_metadata=ServerBase.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
    version_table="server_alembic_version",
)
with context.begin_transaction():
    context.run_migrations()
