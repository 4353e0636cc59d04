"""Alembic environment: run by :func:`grader.hosting.db.session.migrate` on a connection it passes in."""

from __future__ import annotations

from alembic import context

from grader.hosting.db.models import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:  # pragma: no cover - the grader always passes a connection
    raise RuntimeError("run migrations through grader.hosting.db.session.migrate")
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=connection.dialect.name == "sqlite", compare_type=True)
with context.begin_transaction():
    context.run_migrations()
