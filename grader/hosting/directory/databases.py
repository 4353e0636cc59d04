"""Each competition's database: SQLite in its folder, or its own schema of the server's PostgreSQL database."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sqlalchemy import create_engine, text
from sqlalchemy.exc import SQLAlchemyError

from grader.hosting.db.session import database_url
from grader.hosting.directory.layout import Entry
from grader.hosting.directory.upgrade import LEGACY_SCHEMA
from grader.hosting.errors import HostingError


def with_schema(url: str, schema: str) -> str:
    """``url`` (PostgreSQL) whose connections use ``schema`` (libpq's ``options=-csearch_path=...``): every table of
    the competition, Alembic's version table included, lives there, and raw SQL needs no schema in its names."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "options"]
    query.append(("options", f"-csearch_path={schema}"))
    return urlunsplit(parts._replace(query=urlencode(query)))


def competition_database(entry: Entry, database: str | None) -> str | None:
    """The database URL of ``entry``'s competition, its schema created if missing; None: SQLite in its folder."""
    if database is None or entry.schema is None:
        return None
    if entry.schema == LEGACY_SCHEMA:
        return database
    url = database_url_of(database)
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{entry.schema}"'))
    except SQLAlchemyError as error:
        raise HostingError(f"database: cannot create schema {entry.schema} for competition {entry.name!r}: {str(error).splitlines()[0]}") from None
    finally:
        engine.dispose()
    return with_schema(database, entry.schema)


def database_url_of(database: str) -> str:
    """``database`` normalised as the engine takes it (psycopg 3 for ``postgresql://``)."""
    from pathlib import Path

    return database_url(Path("."), database)
