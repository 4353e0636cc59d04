"""The server's directory of competitions and its people, without a server: names, schemas, server.json's refusals,
the server database's migrations against its models, and a person's web sessions."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from grader.hosting.directory.databases import with_schema
from grader.hosting.directory.layout import MAX_SERVER_FILE, ServerLayout, competition_schema
from grader.hosting.directory.models import ServerBase
from grader.hosting.directory.people import People, open_people
from grader.hosting.errors import HostingError
from tests.hosting.support import write_competition


def test_names_are_addresses_and_unique_whatever_their_case(tmp_path: Path) -> None:
    layout = ServerLayout(tmp_path)
    file = write_competition(tmp_path / "a.toml", name="Alpha")
    layout.add("Alpha", file, postgres=False)
    with pytest.raises(HostingError, match="already has 'Alpha'"):
        layout.add("alpha", file, postgres=False)
    for bad in ("", "../x", "a/b", "-x", "x" * 65, "a b"):
        with pytest.raises(HostingError, match="not an address"):
            layout.add(bad, file, postgres=False)
    assert layout.entries["Alpha"].schema is None  # SQLite: a file in its folder


def test_schemas_differ_for_names_that_differ_only_in_case_or_punctuation() -> None:
    names = ["mini-cup", "mini_cup", "Mini-Cup", "mini.cup"]
    schemas = {competition_schema(name) for name in names}
    assert len(schemas) == len(names)
    assert all(s.startswith("c_mini_cup_") and len(s) <= 63 for s in schemas)  # PostgreSQL's identifier limit
    assert with_schema("postgresql://u@h/db?sslmode=disable&options=x", "c_s").endswith("sslmode=disable&options=-csearch_path%3Dc_s")


def test_server_json_is_read_bounded_and_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "server.json").write_text('{"layout": 3, "competitions": []}')
    with pytest.raises(HostingError, match="layout 3, this grader reads layout 2"):
        ServerLayout(tmp_path).load()
    (tmp_path / "server.json").write_text("x" * (MAX_SERVER_FILE + 1))
    with pytest.raises(HostingError, match="larger than"):
        ServerLayout(tmp_path).load()
    (tmp_path / "server.json").write_text('{"layout": 2, "competitions": [{"name": "a"}]}')
    with pytest.raises(HostingError, match="not a server directory this grader can read"):
        ServerLayout(tmp_path).load()


def test_pick_names_the_choices(tmp_path: Path) -> None:
    layout = ServerLayout(tmp_path)
    with pytest.raises(HostingError, match="holds 0 competitions"):
        layout.pick(None)
    layout.add("a", write_competition(tmp_path / "a.toml", name="a"), postgres=True)
    assert layout.pick(None).name == "a" and layout.entries["a"].schema == competition_schema("a")
    layout.add("b", write_competition(tmp_path / "b.toml", name="b"), postgres=True)
    with pytest.raises(HostingError, match=r"holds 2 competitions \(a, b\): name one with --in NAME"):
        layout.pick(None)
    layout.retire("b")
    assert layout.pick(None).name == "a"  # a retired competition is no choice
    with pytest.raises(HostingError, match="no competition 'c'"):
        layout.pick("c")


def test_the_server_databases_migrations_make_its_models(tmp_path: Path) -> None:
    db = open_people(tmp_path, None)
    with db.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True, "version_table": "server_alembic_version"})
        drift = compare_metadata(context, ServerBase.metadata)
    assert drift == [], f"the server's models and its migrations differ (add a migration): {drift}"
    db.dispose()


def test_a_persons_session_ends_with_sign_out_and_with_the_token(tmp_path: Path) -> None:
    people = People(open_people(tmp_path, None))
    person, token = people.add("dana")
    assert people.holds(token) and not people.holds(token + "x") and not people.holds("x" * 500)
    started = people.start_session(token)
    assert started is not None
    session_id, fingerprint = started
    assert people.signed_in(session_id, fingerprint) == ("dana", person.token_sha256)
    assert people.signed_in(session_id, "0" * len(fingerprint)) is None  # another token's fingerprint
    assert people.signed_in(session_id, "\u00e9" * 40) is None  # the cookie's text, not ours: refused, not a crash
    people.end_session(session_id)
    assert people.signed_in(session_id, fingerprint) is None  # a replayed cookie after sign-out
    again = people.start_session(token)
    assert again is not None
    people.revoke("dana")
    assert people.signed_in(*again) is None and people.start_session(token) is None and not people.holds(token)
    with pytest.raises(HostingError, match="already exists"):
        people.add("dana")
    people.db.dispose()


def test_a_person_keeps_the_newest_few_sessions(tmp_path: Path) -> None:
    people = People(open_people(tmp_path, None))
    _person, token = people.add("erin")
    sessions = [people.start_session(token) for _ in range(7)]
    live = [s for s in sessions if s is not None and people.signed_in(*s) is not None]
    assert live == sessions[-5:]
    people.db.dispose()
