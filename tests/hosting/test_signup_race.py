"""Look-alike sign-ups racing: the server database's unique confusable forms admit one (docs/hosting.md, "Sign-up").

Two :class:`People` on one database, each with its own engine and connection pool, stand for two ``grader serve``
processes: each reads the names held (the sign-up's check) and only then, both past the check, stores its name.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import select, text

from grader.hosting.db.session import Database, migrate
from grader.hosting.directory.models import Person
from grader.hosting.directory.people import MIGRATIONS, SERVER_DB_FILE, People, open_people
from grader.hosting.errors import HostingError
from grader.hosting.identity.names import check_new_name, skeleton_digests

pytestmark = pytest.mark.board


def test_two_processes_signing_up_look_alikes_at_once_admit_exactly_one(tmp_path: Path, database_url: str | None) -> None:
    servers = [People(open_people(tmp_path, database_url)) for _ in range(2)]
    both_checked = threading.Barrier(2, timeout=60)
    outcomes: dict[str, str] = {}

    def sign_up(people: People, name: str) -> None:
        try:
            check_new_name(name, people.names())  # both read before either stores: the race the database must decide
        except HostingError as error:
            both_checked.abort()  # the other thread stops waiting: its outcome names the broken barrier
            outcomes[name] = f"refused by the check: {error}"
            return
        try:
            both_checked.wait()
            people.add(name, distinct=True)
            outcomes[name] = "admitted"
        except (HostingError, threading.BrokenBarrierError) as error:
            outcomes[name] = str(error) or error.__class__.__name__

    try:
        for first, second in (("alice", "\u0430lice"), ("R00MY", "roomy")):  # Cyrillic a; zeros for O in upper case
            threads = [threading.Thread(target=sign_up, args=(people, name)) for people, name in zip(servers, (first, second), strict=True)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=120)
            assert sorted(outcomes[name] == "admitted" for name in (first, second)) == [False, True], outcomes
            loser = first if outcomes[second] == "admitted" else second
            assert outcomes[loser] == f"the name '{loser}' is taken or too like one taken; choose another"
            assert sorted(person.name for person in servers[0].all() if person.name in (first, second)) == [first if loser == second else second]
    finally:
        for people in servers:
            people.db.dispose()


def test_the_upgrade_backfills_the_forms_and_the_hosts_own_look_alikes_keep_their_names(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{(tmp_path / SERVER_DB_FILE).resolve()}")
    try:
        migrate(db.engine, "s0002_person_sessions", scripts=MIGRATIONS)
        with db.engine.begin() as connection:  # look-alikes a host added before the forms were stored
            for index, name in enumerate(("alice", "Alice", "bob")):
                connection.execute(
                    text("INSERT INTO people (name, token_sha256, created_at) VALUES (:name, :digest, '2026-12-01 00:00:00')"),
                    {"name": name, "digest": f"{index:064x}"},
                )
        migrate(db.engine, scripts=MIGRATIONS)
        with db.session() as session:
            forms = {p.name: (p.skeleton_sha256, p.upper_skeleton_sha256) for p in session.scalars(select(Person)).all()}
        assert forms == {"alice": skeleton_digests("alice"), "Alice": (None, None), "bob": skeleton_digests("bob")}
        people = People(db)
        with pytest.raises(HostingError, match="too like one taken"):
            people.add("ALICE", distinct=True)
        assert people.add("aLice")[0].skeleton_sha256 is None  # the host may still add a look-alike
    finally:
        db.dispose()
