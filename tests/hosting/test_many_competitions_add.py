"""`grader admin competition add FILE` applies the start checks a competition gets at start, and an ended competition of
a server of many stays ended.

Through the real CLI on a real server's state folder: a file that fails a check (its schema, its benchmark's data, a
phase's split) is refused in one line naming the file and the key, with exit status 2, and leaves server.json as it
was and no folder (on PostgreSQL no schema) behind. A competition whose end the log holds, its file's ``end`` moved
later: adding it again is refused (a name is never reused), the server refuses to start, in one line naming it, and
importing it into another server is refused.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from grader.cli.exits import EXIT_USAGE
from grader.cli.main import cli
from grader.hosting.directory.layout import competition_schema
from grader.transparency import entries
from tests.hosting.support import ManyServer, admin, wait_for, write_competition


def add(state: Path, file: Path, database: str | None = None) -> tuple[int, str]:
    """``grader admin --state STATE competition add FILE``: its exit status and what it wrote to stderr."""
    extra = ["--database", database] if database else []
    result = CliRunner().invoke(cli, ["admin", "--state", str(state), *extra, "competition", "add", str(file)])
    return result.exit_code, result.stderr


def phase_split_file(path: Path, name: str) -> Path:
    """A valid competition file one of whose phases grades a split no worker holds: refused by the last start check,
    after the keys, the database and log entry 0 are made."""
    file = write_competition(path, name=name, start=None, end=None)
    phase = '[[phases]]\nname = "one"\nsplit = "train"\nstart = 2020-01-01T00:00:00Z\nend = 2099-01-01T00:00:00Z\n'
    file.write_text(file.read_text() + phase)
    return file


def refusals(root: Path) -> list[tuple[Path, str, str]]:
    """Files that each fail one start check: the start of the line each is refused with (after ``error: FILE: ``),
    and what the line says of the key."""
    return [
        (write_competition(root / "schema.toml", name="beta", max_attempts="three"), "max_attempts: ", "'three' is not of type 'integer'"),
        # the benchmark's data is checked as its pin is made: its task has no split of that name
        (write_competition(root / "data.toml", name="gamma", split="nosuch"), "competition 'gamma' not added: ", "has no split 'nosuch'"),
        (phase_split_file(root / "phase.toml", "delta"), "competition 'delta' not added: phases.0.split: ", "'train' is not the competition's split"),
    ]


@pytest.mark.slow  # nothing started, but five adds (each migrating a database, making keys): seconds, not the fast loop
def test_a_file_that_fails_a_start_check_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    # the first add of a server refused: no state folder (a competitions/ folder alone would read as an upgrade stopped)
    status, stderr = add(state, phase_split_file(tmp_path / "first.toml", "first"))
    assert status == EXIT_USAGE and "competition 'first' not added: " in stderr, stderr
    assert not state.exists()
    assert "added competition 'alpha'" in admin(state, "competition", "add", str(write_competition(tmp_path / "alpha.toml", name="alpha")))
    directory = (state / "server.json").read_bytes()
    for file, start, why in refusals(tmp_path):
        status, stderr = add(state, file)
        assert status == EXIT_USAGE, stderr
        first = stderr.splitlines()[0]
        assert first.startswith(f"error: {file}: {start}") and why in first, first
        assert (state / "server.json").read_bytes() == directory, file
        assert sorted(p.name for p in (state / "competitions").iterdir()) == ["alpha"], file
    # the file put right, the name is free: added, with keys of its own made now
    fixed = write_competition(tmp_path / "delta.toml", name="delta")
    assert "added competition 'delta'" in admin(state, "competition", "add", str(fixed))
    assert (state / "competitions" / "delta" / "keys" / "partition.secret").is_file()


@pytest.mark.slow
def test_on_postgresql_a_refused_add_leaves_no_schema(tmp_path: Path, postgres_cluster) -> None:  # type: ignore[no-untyped-def]
    url = postgres_cluster.new_database()
    state = tmp_path / "state"
    admin(state, "competition", "add", str(write_competition(tmp_path / "alpha.toml", name="alpha")), database=url)
    directory = (state / "server.json").read_bytes()
    status, stderr = add(state, phase_split_file(tmp_path / "phase.toml", "delta"), url)
    assert status == EXIT_USAGE and "competition 'delta' not added: phases.0.split: " in stderr, stderr
    assert (state / "server.json").read_bytes() == directory
    with psycopg.connect(url, autocommit=True) as conn:
        schemas = {name for (name,) in conn.execute("SELECT schema_name FROM information_schema.schemata").fetchall()}
    assert competition_schema("alpha") in schemas and competition_schema("delta") not in schemas
    assert sorted(p.name for p in (state / "competitions").iterdir()) == ["alpha"]


def logged_kinds(folder: Path) -> list[str]:
    """The kinds of the log entries in a competition's SQLite database, in order."""
    with sqlite3.connect(folder / "grader.sqlite3") as connection:
        rows = connection.execute("SELECT entry FROM log_entries ORDER BY idx").fetchall()
    connection.close()
    return [entries.decode_entry(bytes(row[0]))["kind"] for row in rows]


def move_end(file: Path, end: str) -> None:
    file.write_text("\n".join(f"end = {end}" if line.startswith("end = ") else line for line in file.read_text().splitlines()) + "\n")


@pytest.mark.slow
def test_an_ended_competition_of_a_server_of_many_stays_ended(tmp_path: Path) -> None:
    files = tmp_path / "competitions"
    files.mkdir()
    write_competition(files / "alpha.toml", name="alpha")
    closed = write_competition(files / "closed.toml", name="closed", end="2020-06-01T00:00:00Z")
    server = ManyServer(files, tmp_path / "state", workers=0).start()
    try:
        # the file's end has passed: the server's reaper logs it (nothing is in flight: the reveal follows)
        wait_for(lambda: "end" in logged_kinds(server.state / "competitions" / "closed"), timeout=120, what="closed's end logged")
        server.stop()
        directory = (server.state / "server.json").read_bytes()
        move_end(closed, "2099-01-01T00:00:00Z")
        # added again, its end moved later: refused (a name is never reused), nothing written
        status, stderr = add(server.state, closed)
        assert status == EXIT_USAGE and "competition 'closed' is already on this server (served)" in stderr, stderr
        assert (server.state / "server.json").read_bytes() == directory
        # served again with its end moved later: the server refuses to start, in one line naming the competition
        refused = server.start(expect_ok=False)
        assert refused.process is not None and refused.process.wait(120) != 0
        said = server.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1]
        assert said.startswith(f"error: {closed}: competition 'closed' cannot start: the log holds the competition's end at 2020-06-01T00:00:00Z"), (
            said
        )
        assert "now says it ends at 2099-01-01T00:00:00Z" in said, said
        assert (server.state / "server.json").read_bytes() == directory
        # the file's end put back: served again, ended
        move_end(closed, "2020-06-01T00:00:00Z")
        server.start()
    finally:
        server.stop()
    # moved to another server (retired, exported, imported) with its end moved later: the import is refused, nothing written
    admin(server.state, "competition", "retire", "closed")
    bundle = tmp_path / "closed.bundle"
    admin(server.state, "competition", "export", "closed", "--out", str(bundle))
    target = tmp_path / "target"
    move_end(closed, "2099-01-01T00:00:00Z")
    result = CliRunner().invoke(cli, ["admin", "--state", str(target), "competition", "import", str(bundle), "--competition", str(closed)])
    assert result.exit_code == EXIT_USAGE, result.output
    said = result.stderr.splitlines()[0]
    assert said.startswith(f"error: {closed}: competition 'closed' not imported: the log holds the competition's end at 2020-06-01T00:00:00Z"), said
    assert not target.exists()
    move_end(closed, "2020-06-01T00:00:00Z")
    assert "imported competition 'closed'" in admin(target, "competition", "import", str(bundle), "--competition", str(closed))
