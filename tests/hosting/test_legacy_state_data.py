"""The legacy state folders of tests/data/legacy_state_v0_3 are there and agree with their manifests, read with today's code.

They are real state folders of the single-competition `grader serve` (0.3.0, before issue 33), made by
scripts/make-legacy-state.sh: one on SQLite (state/) and one on PostgreSQL (postgres/dump.sql and postgres/state/).
The upgrade to a many-competition server starts from them; so CI fails here when they are missing, changed by
hand, or no longer what their manifest says. Regenerate them with the script, never by hand.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from grader.cli.main import cli
from grader.hosting.identity.tokens import token_digest

DATA = Path(__file__).resolve().parents[1] / "data" / "legacy_state_v0_3"
VERSIONS = Path(__file__).resolve().parents[2] / "grader" / "hosting" / "migrations" / "versions"
#: The whole folder stays small: it is in the repository for good.
MAX_BYTES = 2 * 1024 * 1024


def _manifest(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _sqlite_rows(sql: str) -> list[tuple[Any, ...]]:
    # immutable: no lock, no -wal/-shm written next to the checked-in file
    connection = sqlite3.connect(f"file:{DATA / 'state' / 'grader.sqlite3'}?mode=ro&immutable=1", uri=True)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


def _verified(report: Path, key: Path) -> None:
    result = CliRunner().invoke(cli, ["verify", str(report), "--key", str(key)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "verified: signed by key" in result.output


def test_the_data_is_there_whole_and_small() -> None:
    for path in (
        "competition.toml",
        "manifest.json",
        "state/grader.sqlite3",
        "state/keys/grader.key",
        "state/keys/grader.pub",
        "state/keys/log.key",
        "state/keys/log.vkey",
        "state/keys/partition.secret",
        "state/keys/blinding.secret",
        "state/log/checkpoint",
        "postgres/dump.sql",
        "postgres/manifest.json",
        "postgres/state/keys/grader.pub",
        "postgres/state/log/checkpoint",
    ):
        assert (DATA / path).is_file(), f"{path} missing: regenerate with scripts/make-legacy-state.sh"
    files = [p for p in DATA.rglob("*") if p.is_file()]
    assert not [p for p in files if p.name.endswith(("-wal", "-shm", "-journal"))], "the SQLite database must be checkpointed"
    assert not (DATA / "postgres" / "state" / "grader.sqlite3").exists()
    assert sum(p.stat().st_size for p in files) < MAX_BYTES


@pytest.mark.parametrize("name", ["manifest.json", "postgres/manifest.json"])
def test_the_manifest_matches_its_state_folder(name: str) -> None:
    manifest = _manifest(name)
    base = (DATA / name).parent
    state = base / "state"
    assert manifest["grader_version"] == "0.3.0" and re.fullmatch("[0-9a-f]{40}", manifest["main_commit"])
    assert (base / manifest["competition_file"]).resolve() == DATA / "competition.toml"
    assert f'name = "{manifest["competition_name"]}"' in (DATA / "competition.toml").read_text(encoding="utf-8")
    assert [p["name"] for p in manifest["participants"]] == ["alice", "bob"]
    submissions = manifest["submissions"]
    states = [(s["participant"], s["state"]) for s in submissions]
    assert states.count(("alice", "scored")) >= 2 and ("bob", "scored") in states and any(s == "failed" for _, s in states)
    for submission in submissions:
        for report in submission["signed_reports"]:
            assert (state / report).is_file(), report
        assert bool(submission["signed_reports"]) == (submission["state"] in ("scored", "failed"))
    # the board served then ranks the scored submissions, each of them at its served score
    served = {s["id"]: s["public_score"] for s in submissions if s["state"] == "scored"}
    rows = [entry for board in manifest["board"]["boards"] for entry in board["entries"]]
    assert rows and {row["submission"] for row in rows} <= set(served)
    # the log's checkpoint is the one published, and the manifest says which
    checkpoint = (state / "log" / "checkpoint").read_text(encoding="utf-8")
    assert checkpoint == manifest["log_checkpoint"]["text"]
    assert int(checkpoint.split("\n")[1]) == manifest["log_checkpoint"]["tree_size"] > 0
    # one full signed report of each database verifies with that state's host key, with today's `grader verify`
    first = next(s for s in submissions if s["state"] == "scored")
    _verified(state / first["signed_reports"][0], state / "keys" / "grader.pub")


def test_the_sqlite_database_holds_the_manifest() -> None:
    manifest = _manifest("manifest.json")
    (revision,) = _sqlite_rows("SELECT version_num FROM alembic_version")[0]
    assert any(path.name.startswith(revision) for path in VERSIONS.glob("*.py")), revision  # a revision today's code knows
    participants = {name: (team, digest) for name, team, digest in _sqlite_rows("SELECT name, team, token_sha256 FROM participants")}
    assert set(participants) == {p["name"] for p in manifest["participants"]}
    for participant in manifest["participants"]:
        assert participants[participant["name"]] == (participant["team"], token_digest(participant["token"]))
    rows = {
        row[0]: row[1:]
        for row in _sqlite_rows(
            "SELECT s.id, p.name, s.state, s.failure_code, rp.public_score FROM submissions s JOIN participants p ON p.id = s.participant_id "
            "LEFT JOIN result_parts rp ON rp.result_id = s.result_id"
        )
    }
    assert set(rows) == {s["id"] for s in manifest["submissions"]}
    for submission in manifest["submissions"]:
        who, state, failure, public = rows[submission["id"]]
        assert (who, state, failure) == (submission["participant"], submission["state"], submission["failure_code"])
        assert (None if public is None else round(public, 4)) == submission["public_score"]
    (entries,) = _sqlite_rows("SELECT count(*) FROM log_entries")[0]
    assert entries == manifest["log_checkpoint"]["tree_size"]


def test_the_postgresql_dump_holds_the_manifest() -> None:
    """Read as text (the plain dump's COPY blocks); restoring it is the slow test below."""
    manifest = _manifest("postgres/manifest.json")
    dump = (DATA / "postgres" / "dump.sql").read_text(encoding="utf-8")
    copies = {m.group(1): m.group(2) for m in re.finditer(r"^COPY public\.(\w+) \([^)]*\) FROM stdin;\n(.*?)^\\\.$", dump, re.M | re.S)}
    participants = [line.split("\t") for line in copies["participants"].splitlines()]
    assert {(row[1], row[3]) for row in participants} == {(p["name"], token_digest(p["token"])) for p in manifest["participants"]}
    submissions = {row[0]: row for row in (line.split("\t") for line in copies["submissions"].splitlines())}
    assert set(submissions) == {s["id"] for s in manifest["submissions"]}
    for submission in manifest["submissions"]:
        assert submissions[submission["id"]][6] == submission["state"]
    assert len(copies["log_entries"].splitlines()) == manifest["log_checkpoint"]["tree_size"]
    assert "OWNER TO" not in dump and "GRANT " not in dump


@pytest.mark.slow
def test_the_postgresql_dump_restores(postgres_cluster) -> None:  # type: ignore[no-untyped-def]
    manifest = _manifest("postgres/manifest.json")
    url = postgres_cluster.new_database()
    restored = subprocess.run(
        [str(postgres_cluster.bin / "psql"), "-q", "-v", "ON_ERROR_STOP=1", "-X", url, "-f", str(DATA / "postgres" / "dump.sql")],
        capture_output=True,
        text=True,
    )
    assert restored.returncode == 0, restored.stderr
    import psycopg

    with psycopg.connect(url) as connection:
        got = dict(connection.execute("SELECT id, state::text FROM submissions").fetchall())
    assert got == {s["id"]: s["state"] for s in manifest["submissions"]}
