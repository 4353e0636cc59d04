"""The server's own tables (not a competition's): the people who hold a token on this server.

A person is a server-wide identity: one token, whichever competitions they are registered in. Registration is a
participant row in the competition's own database carrying the person's name and token digest, so that each
competition's code authenticates as it always did; revoking a person revokes every registration
(:mod:`grader.hosting.services.people`).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from grader.hosting.db.models import UTCDateTime


class ServerBase(DeclarativeBase):
    """The server database's tables (their own Alembic history: grader/hosting/directory/migrations)."""


class Person(ServerBase):
    """A server-wide identity: a name and the SHA-256 of their token.

    ``skeleton_sha256`` and ``upper_skeleton_sha256`` are the digests of the name's two confusable forms
    (:func:`grader.hosting.identity.names.skeleton_digests`), each UNIQUE: the database, not a read before the insert,
    refuses a second look-alike name, so two server processes cannot both admit ``alice`` and ``\u0430lice``. None where
    an earlier person holds that form already (look-alikes the host added, which sign-up never makes).
    """

    __tablename__ = "people"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    skeleton_sha256: Mapped[str | None] = mapped_column(String(64), unique=True, index=True, nullable=True)
    upper_skeleton_sha256: Mapped[str | None] = mapped_column(String(64), unique=True, index=True, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class PersonSession(ServerBase):
    """A person's web session (the cookie holds its id; only the id's SHA-256 is stored): one sign-in, every
    competition the person is registered in."""

    __tablename__ = "person_sessions"
    id_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    person_id: Mapped[int] = mapped_column(ForeignKey("people.id"), index=True)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
