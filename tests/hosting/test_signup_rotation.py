"""A person's token rotated in every competition of the server, or in none (grader/hosting/services/signup.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from grader.hosting.db.models import Participant
from grader.hosting.db.session import Database, open_database
from grader.hosting.directory.people import People, open_people
from grader.hosting.identity import participants
from grader.hosting.identity.tokens import token_digest
from grader.hosting.services.signup import rotate_token


class Down:
    """A competition database that cannot be reached."""

    @contextmanager
    def session(self) -> Iterator[None]:
        raise OperationalError("connect", {}, Exception("connection refused"))
        yield


def _digest(db: Database, name: str) -> str:
    with db.session() as session:
        return str(session.scalar(select(Participant.token_sha256).where(Participant.name == name)))


def test_a_rotation_that_fails_part_way_changes_nothing_and_one_that_completes_changes_every_registration(tmp_path: Path) -> None:
    people = People(open_people(tmp_path, None))
    person, old_token = people.add("alice")
    old = person.token_sha256
    dbs = [open_database(tmp_path / name) for name in ("a", "b")]
    try:
        for db in dbs:
            with db.session() as session:
                participants.register_participant(session, "alice", old)
        session_id, fingerprint = people.start_session(old_token) or ("", "")
        broken: list[tuple[str, object]] = [("a", dbs[0]), ("down", Down()), ("b", dbs[1])]
        with pytest.raises(OperationalError):
            rotate_token(people, "alice", old, lambda: broken)  # type: ignore[arg-type,return-value]
        assert [_digest(db, "alice") for db in dbs] == [old, old]  # "a" was put back
        assert people.holds(old_token) and people.signed_in(session_id, fingerprint) is not None

        new_token = rotate_token(people, "alice", old, lambda: [("a", dbs[0]), ("b", dbs[1])])
        new = token_digest(new_token)
        assert [_digest(db, "alice") for db in dbs] == [new, new]
        assert people.holds(new_token) and not people.holds(old_token)
        assert people.signed_in(session_id, fingerprint) is None  # every web session of theirs ended
        with pytest.raises(Exception, match="changed meanwhile"):  # a second rotation from the old digest: compare and set
            rotate_token(people, "alice", old, lambda: [("a", dbs[0])])
        assert _digest(dbs[0], "alice") == new
    finally:
        for db in dbs:
            db.dispose()
        people.db.dispose()
