"""The server database (people): SQLite ``server.sqlite3`` in the server's state folder, or the PostgreSQL schema
``grader_server``; its own Alembic history (grader/hosting/directory/migrations)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from grader.hosting.clock import utcnow
from grader.hosting.db.session import Database, database_url, migrate
from grader.hosting.directory.databases import ensure_schema, with_schema
from grader.hosting.directory.models import Person
from grader.hosting.errors import HostingError
from grader.hosting.identity.auth import MAX_TOKEN
from grader.hosting.identity.tokens import new_token, same_digest, token_digest

SERVER_DB_FILE = "server.sqlite3"
SERVER_SCHEMA = "grader_server"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def open_people(root: Path, database: str | None) -> Database:
    """The server database of the server state folder ``root`` (made and migrated if new)."""
    if database is None:
        db = Database(f"sqlite:///{(root / SERVER_DB_FILE).resolve()}")
    else:
        ensure_schema(database, SERVER_SCHEMA, what="the server's people")
        db = Database(database_url(root, with_schema(database, SERVER_SCHEMA)))
    migrate(db.engine, scripts=MIGRATIONS)
    return db


class People:
    """The server's people: add, find by name or token, revoke."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, name: str) -> tuple[Person, str]:
        """A new person ``name`` with a fresh token (returned once; only its digest is stored)."""
        token, digest = new_token("gp")
        try:
            with self.db.session() as session:
                if session.scalar(select(Person).where(Person.name == name)) is not None:
                    raise HostingError(f"person {name!r} already exists on this server")
                person = Person(name=name, token_sha256=digest, created_at=utcnow(), revoked_at=None)
                session.add(person)
        except IntegrityError:
            raise HostingError(f"person {name!r} already exists on this server") from None
        return person, token

    def named(self, name: str) -> Person | None:
        with self.db.session() as session:
            return session.scalar(select(Person).where(Person.name == name))

    def all(self) -> list[Person]:
        with self.db.session() as session:
            return list(session.scalars(select(Person).order_by(Person.name)).all())

    def holds(self, token: str) -> bool:
        """Whether ``token`` is an active person's (constant-time on the digest)."""
        if not token or len(token) > MAX_TOKEN:
            return False
        digest = token_digest(token)
        with self.db.session() as session:
            person = session.scalar(select(Person).where(Person.token_sha256 == digest))
        return person is not None and person.revoked_at is None and same_digest(person.token_sha256, digest)

    def revoke(self, name: str) -> Person:
        with self.db.session() as session:
            person = session.scalar(select(Person).where(Person.name == name))
            if person is None:
                raise HostingError(f"no person named {name!r} on this server")
            if person.revoked_at is None:
                person.revoked_at = utcnow()
            return person
