"""Each competition's database: SQLite in its folder, or its own schema of the server's PostgreSQL database."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import SQLAlchemyError

from grader.hosting.db.session import DB_FILE, database_url
from grader.hosting.directory.layout import LEGACY_SCHEMA, Entry
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
    ensure_schema(database, entry.schema, what=f"competition {entry.name!r}")
    return with_schema(database, entry.schema)


@contextmanager
def _server_engine(database: str, doing: str) -> Iterator[Engine]:
    """A short-lived engine on ``database``; an error of the database becomes one line saying what it was ``doing``."""
    engine = create_engine(database_url(Path(), database))
    try:
        yield engine
    except SQLAlchemyError as error:
        raise HostingError(f"database: cannot {doing}: {str(error).splitlines()[0]}") from None
    finally:
        engine.dispose()


def ensure_schema(database: str, schema: str, *, what: str) -> None:
    """Create PostgreSQL schema ``schema`` in ``database`` if it is missing (``what`` it holds, for the error line)."""
    with _server_engine(database, f"create schema {schema} for {what}") as engine, engine.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))


def schema_exists(database: str, schema: str) -> bool:
    """Whether PostgreSQL schema ``schema`` is in ``database`` now (one line on a database that cannot be reached)."""
    with _server_engine(database, f"look for schema {schema}") as engine, engine.connect() as connection:
        return connection.scalar(text("SELECT count(*) FROM pg_namespace WHERE nspname = :schema"), {"schema": schema}) == 1


def drop_schema(database: str, schema: str) -> None:
    """Drop PostgreSQL schema ``schema`` and every table in it (a competition's that never started: nothing served is lost)."""
    with _server_engine(database, f"drop schema {schema}") as engine, engine.begin() as connection:
        connection.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))


def existing_database(entry: Entry, folder: Path, database: str | None) -> str | None:
    """The database URL of ``entry``'s competition (in ``folder``), refused in one line where it is not: a competition
    kept in PostgreSQL named without ``--database`` (an empty SQLite file must not stand in for it), or a SQLite file
    that is not there. For the commands that read a competition's rows whole (export, import's look at the others)."""
    if entry.schema is not None and database is None:
        raise HostingError(
            f"competition {entry.name!r} is kept in PostgreSQL (schema {entry.schema}): pass the server's --database URL (or GRADER_DATABASE)"
        )
    if entry.schema is None and not (folder / DB_FILE).is_file():
        raise HostingError(f"competition {entry.name!r}: no database in {folder} (never started?)")
    return competition_database(entry, database)
