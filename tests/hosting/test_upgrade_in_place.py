"""Upgrading in place: a real state folder of grader 0.3.0's one-competition server (tests/data/legacy_state_v0_3,
made by scripts/make-legacy-state.sh on SQLite and PostgreSQL) becomes a server holding that one competition.

Through a real `grader serve --competitions` over real sockets: the old tokens, ids, board, reports and log; the
one-competition addresses as aliases while it holds one competition (pages: 308), then refused naming both once a
second competition is added; the old folder refused by --competitions until upgraded, with the command to run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from grader.cli.main import cli
from tests.hosting.support import REPO, ManyServer, admin, grader_cli, write_competition

DATA = REPO / "tests" / "data" / "legacy_state_v0_3"
NAME = "legacy-v0-3"


def _copy(folder: Path, tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    """The legacy state folder copied (the checkout's copy stays untouched), its competitions folder and manifest."""
    state = tmp_path / "state"
    shutil.copytree(folder / "state", state)
    for key in (state / "keys").iterdir():  # git keeps no 0600: the mode the server made them with, as a restore from a backup would
        key.chmod(0o600)
    competitions = tmp_path / "competitions"
    competitions.mkdir()
    shutil.copy(DATA / "competition.toml", competitions / "legacy.toml")
    return state, competitions, json.loads((folder / "manifest.json").read_text(encoding="utf-8"))


def _upgrade_and_check(state: Path, competitions: Path, manifest: dict[str, Any], tmp_path: Path, database: str | None = None) -> None:
    extra = ["--database", database] if database else []
    refused = grader_cli("serve", "--competitions", str(competitions), "--state", str(state), *extra, "--port", "1")
    assert refused.returncode != 0 and "the state folder of a one-competition server" in refused.stderr
    assert f"grader admin --state {state} upgrade-state" in refused.stderr
    said = CliRunner().invoke(cli, ["admin", "--state", str(state), *extra, "upgrade-state", "--competition", str(competitions / "legacy.toml")])
    assert said.exit_code == 0, said.output
    assert f"upgraded: competition '{NAME}' now in {state / 'competitions' / NAME}" in said.output
    assert sorted(p.name for p in state.iterdir()) == (["competitions", "server.json"] + ([] if database else ["server.sqlite3"]))
    people = admin(state, *extra, "person", "list")
    assert [line.split()[0] for line in people.splitlines()] == ["alice", "bob"]

    server = ManyServer(competitions, state, workers=0, database=database).start()
    try:
        tokens = {p["name"]: p["token"] for p in manifest["participants"]}
        alice = {"Authorization": f"Bearer {tokens['alice']}"}
        # the old addresses, as aliases: the same competition, ids and board; the old token
        for base in (server.url, server.base(NAME)):
            mine = httpx.get(f"{base}/api/v1/submissions", headers=alice, timeout=30).json()
            assert sorted(s["id"] for s in mine) == sorted(s["id"] for s in manifest["submissions"] if s["participant"] == "alice")
            assert httpx.get(f"{base}/api/v1/leaderboard", timeout=30).json() == manifest["board"]
        assert httpx.get(f"{server.url}/api/v1/competition", timeout=30).json()["name"] == NAME
        moved = httpx.get(f"{server.url}/me?x=1", timeout=30)
        assert moved.status_code == 308 and moved.headers["location"] == f"/c/{NAME}/me?x=1"
        assert [c["name"] for c in httpx.get(f"{server.url}/api/v1/competitions", timeout=30).json()] == [NAME]
        # the log as it was (entries added since: none), audited at its old address; the reports verify under the old key
        checkpoint = httpx.get(f"{server.url}/log/checkpoint", timeout=30).text
        assert checkpoint.splitlines()[:3] == manifest["log_checkpoint"]["text"].splitlines()[:3]
        vkey = httpx.get(f"{server.url}/log/key", timeout=30).text.strip()
        audit = grader_cli("log", "audit", f"{server.url}/log", "--log-key", vkey, env={"XDG_STATE_HOME": str(tmp_path / "auditor")}, timeout=120)
        assert audit.returncode == 0, audit.stdout + audit.stderr
        (tmp_path / "host.pub").write_bytes(httpx.get(f"{server.url}/host-key.pub", timeout=30).content)
        scored = next(s for s in manifest["submissions"] if s["participant"] == "alice" and s["state"] == "scored")
        got = grader_cli("status", scored["id"], "--report", str(tmp_path / "r.json"), "--server", server.url, env={"GRADER_TOKEN": tokens["alice"]})
        assert got.returncode == 0, got.stderr  # the CLI without a competition, on a server of one
        assert f"public score {scored['public_score']:.4f}" in got.stdout
        assert grader_cli("verify", str(tmp_path / "r.json"), "--key", str(tmp_path / "host.pub")).returncode == 0
        # a second competition: the old addresses now name both; the competition's own keep working
        admin(state, *extra, "competition", "add", str(write_competition(tmp_path / "second.toml", name="second")))
        from tests.hosting.support import wait_for

        wait_for(lambda: httpx.get(f"{server.url}/api/v1/competition", timeout=30).status_code == 404, timeout=60, what="the aliases to end")
        told = grader_cli("status", scored["id"], "--server", server.url, env={"GRADER_TOKEN": tokens["alice"]})
        assert told.returncode != 0 and f"2 competitions ({NAME}, second)" in told.stderr
        again = grader_cli("status", scored["id"], "--server", server.base(NAME), env={"GRADER_TOKEN": tokens["alice"]})
        assert again.returncode == 0 and f"public score {scored['public_score']:.4f}" in again.stdout
    finally:
        server.stop()


@pytest.mark.slow
def test_a_sqlite_state_folder_of_0_3_upgrades_in_place(tmp_path: Path) -> None:
    state, competitions, manifest = _copy(DATA, tmp_path)
    _upgrade_and_check(state, competitions, manifest, tmp_path)
    assert (state / "competitions" / NAME / "grader.sqlite3").is_file()


@pytest.mark.slow
def test_a_postgresql_state_folder_of_0_3_upgrades_in_place(tmp_path: Path, postgres_cluster) -> None:  # type: ignore[no-untyped-def]
    state, competitions, manifest = _copy(DATA / "postgres", tmp_path)
    url = postgres_cluster.new_database()
    restored = subprocess.run(
        [str(postgres_cluster.bin / "psql"), "-q", "-v", "ON_ERROR_STOP=1", "-X", url, "-f", str(DATA / "postgres" / "dump.sql")],
        capture_output=True,
        text=True,
    )
    assert restored.returncode == 0, restored.stderr
    _upgrade_and_check(state, competitions, manifest, tmp_path, database=url)


def test_an_upgrade_stopped_half_way_is_finished_by_running_it_again(tmp_path: Path) -> None:
    state, competitions, _manifest = _copy(DATA, tmp_path)
    # as a crash would leave it: every entry moved into the staging folder, the paths not rewritten, no server.json
    staging = state / "competitions" / f"{NAME}.upgrading"
    staging.mkdir(parents=True)
    for entry in sorted(state.iterdir()):
        if entry.name != "competitions":
            entry.rename(staging / entry.name)
    said = CliRunner().invoke(cli, ["admin", "--state", str(state), "upgrade-state", "--competition", str(competitions / "legacy.toml")])
    assert said.exit_code == 0, said.output
    import sqlite3

    connection = sqlite3.connect(f"file:{state / 'competitions' / NAME / 'grader.sqlite3'}?mode=ro", uri=True)
    paths = [row[0] for row in connection.execute("SELECT envelope_path FROM results WHERE envelope_path IS NOT NULL")]
    connection.close()
    assert paths and all(p.startswith(f"{state / 'competitions' / NAME}/results/") and Path(p).is_file() for p in paths)
    assert not staging.exists() and (state / "server.json").is_file()
