"""The server's own tables (not a competition's): the people who hold a token on this server.

A person is a server-wide identity: one token, whichever competitions they are registered in. Registration is a
participant row in the competition's own database carrying the person's name and token digest, so that each
competition's code authenticates as it always did; revoking a person revokes every registration
(:mod:`grader.hosting.services.people`).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Integer, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from grader.hosting.db.models import UTCDateTime


class ServerBase(DeclarativeBase):
    """The server database's tables (their own Alembic history: grader/hosting/directory/migrations)."""


class Person(ServerBase):
    """A server-wide identity: a name and the SHA-256 of their token."""

    __tablename__ = "people"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
