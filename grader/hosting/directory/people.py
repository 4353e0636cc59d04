"""The server database (people): SQLite ``server.sqlite3`` in the server's state folder, or the PostgreSQL schema
``grader_server``; its own Alembic history (grader/hosting/directory/migrations)."""

from __future__ import annotations

import hmac
import secrets
from datetime import timedelta
from pathlib import Path

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from grader.hosting.clock import utcnow
from grader.hosting.db.session import Database, database_url, migrate
from grader.hosting.directory.databases import ensure_schema, with_schema
from grader.hosting.directory.models import Person, PersonSession
from grader.hosting.errors import HostingError
from grader.hosting.identity.auth import FINGERPRINT, MAX_TOKEN, SESSION_S, prune_sessions
from grader.hosting.identity.names import name_taken, skeleton_digests
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


def free_forms(session: Session, name: str) -> dict[str, str | None]:
    """The confusable forms of ``name`` a new person claims (:class:`Person`'s two columns): each form's digest, or
    None where another person holds it already (look-alikes the host adds, imports or upgrades keep their names)."""
    own, upper = skeleton_digests(name)
    return {
        "skeleton_sha256": None if session.scalar(select(Person.id).where(Person.skeleton_sha256 == own)) is not None else own,
        "upper_skeleton_sha256": None if session.scalar(select(Person.id).where(Person.upper_skeleton_sha256 == upper)) is not None else upper,
    }


class People:
    """The server's people: add, find by name or token, revoke."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, name: str, *, distinct: bool = False) -> tuple[Person, str]:
        """A new person ``name`` with a fresh token (returned once; only its digest is stored).

        The person claims their name's confusable forms (:class:`Person`), unique in the database. ``distinct`` (a
        sign-up): a name that reads like one held is refused, also when another process stores its look-alike at
        the same moment (the unique index decides; one line, as a refused name's). Otherwise (the host's own adds)
        the person claims the forms still free.
        """
        token, digest = new_token("gp")
        for _attempt in range(2):  # a host's add that lost a form to a concurrent sign-up asks again which are free
            try:
                with self.db.session() as session:
                    if session.scalar(select(Person.id).where(Person.name == name)) is not None:
                        raise HostingError(f"person {name!r} already exists on this server")
                    forms = free_forms(session, name)
                    if distinct and None in forms.values():
                        raise name_taken(name)
                    person = Person(name=name, token_sha256=digest, created_at=utcnow(), revoked_at=None, **forms)
                    session.add(person)
                return person, token
            except IntegrityError:
                if distinct:
                    raise name_taken(name) from None
        raise HostingError(f"person {name!r} already exists on this server")

    def named(self, name: str) -> Person | None:
        with self.db.session() as session:
            return session.scalar(select(Person).where(Person.name == name))

    def all(self) -> list[Person]:
        with self.db.session() as session:
            return list(session.scalars(select(Person).order_by(Person.name)).all())

    def names(self) -> list[str]:
        """Every name held on the server, revoked people's too (a name is never handed to someone else)."""
        with self.db.session() as session:
            return list(session.scalars(select(Person.name)).all())

    def forget(self, name: str) -> None:
        """Delete person ``name`` whose sign-up failed before anyone could use their token (no session can exist)."""
        with self.db.session() as session:
            person = session.scalar(select(Person).where(Person.name == name))
            if person is not None:
                session.execute(delete(PersonSession).where(PersonSession.person_id == person.id))
                session.delete(person)

    def set_digest(self, name: str, old: str, new: str) -> bool:
        """Replace person ``name``'s token digest ``old`` by ``new`` (compare and set: False when ``old`` is no longer
        theirs) and end every web session of theirs."""
        now = utcnow()
        with self.db.session() as session:
            person = session.scalar(select(Person).where(Person.name == name))
            if person is None or person.revoked_at is not None or not same_digest(person.token_sha256, old):
                return False
            person.token_sha256 = new
            session.execute(update(PersonSession).where(PersonSession.person_id == person.id, PersonSession.ended_at.is_(None)).values(ended_at=now))
        return True

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

    def holder(self, token: str) -> Person | None:
        """The active person holding ``token`` (constant-time on the digest), or None."""
        return self._active(token)

    def _active(self, token: str) -> Person | None:
        if not token or len(token) > MAX_TOKEN:
            return None
        digest = token_digest(token)
        with self.db.session() as session:
            person = session.scalar(select(Person).where(Person.token_sha256 == digest))
        if person is None or person.revoked_at is not None or not same_digest(person.token_sha256, digest):
            return None
        return person

    def start_session(self, token: str) -> tuple[str, str] | None:
        """A new web session of the person holding ``token``: its id (for the cookie) and the fingerprint of the
        person's token digest (a re-issued or revoked token ends it); None when no active person holds it.

        Expired sessions are pruned, and the person's beyond the newest few (as a participant's are).
        """
        person = self._active(token)
        if person is None:
            return None
        session_id = secrets.token_urlsafe(32)
        now = utcnow()
        with self.db.session() as session:
            prune_sessions(session, PersonSession, PersonSession.person_id, person.id, now)
            session.add(
                PersonSession(
                    id_sha256=token_digest(session_id),
                    person_id=person.id,
                    started_at=now,
                    expires_at=now + timedelta(seconds=SESSION_S),
                    ended_at=None,
                )
            )
        return session_id, person.token_sha256[:FINGERPRINT]

    def end_session(self, session_id: str) -> None:
        """Sign-out: the session ``session_id`` is refused from now on, in every competition."""
        if not session_id or len(session_id) > MAX_TOKEN:
            return
        with self.db.session() as session:
            session.execute(
                update(PersonSession)
                .where(PersonSession.id_sha256 == token_digest(session_id), PersonSession.ended_at.is_(None))
                .values(ended_at=utcnow())
            )

    def signed_in(self, session_id: str, fingerprint: str) -> tuple[str, str] | None:
        """The name and token digest of the person a live session names, while their token is still the one signed in
        with (a competition finds its participant by both)."""
        if not session_id or len(session_id) > MAX_TOKEN:
            return None
        with self.db.session() as session:
            live = session.get(PersonSession, token_digest(session_id))
            if live is None or live.ended_at is not None or live.expires_at <= utcnow():
                return None
            person = session.get(Person, live.person_id)
        if person is None or person.revoked_at is not None:
            return None
        # The cookie's fingerprint is the caller's text: compared as bytes, in constant time.
        if not hmac.compare_digest(person.token_sha256[:FINGERPRINT].encode(), fingerprint.encode("utf-8", "replace")):
            return None
        return person.name, person.token_sha256
