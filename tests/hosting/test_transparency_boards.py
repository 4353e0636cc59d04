"""Before the end, board rows come from database rows the log does not cover: the audit checks each row against
its logged report (grader/transparency/boards.py), so that a score changed in the database is caught."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from grader.hosting.api.app import create_app
from grader.hosting.db.models import FinalChoice
from grader.hosting.keyring.host_key import sign_and_store
from grader.hosting.storage import StateDir
from grader.reports.keys import public_key_pem
from grader.reports.signing import ENVELOPE_NAME
from grader.reports.verify import verify_envelope
from grader.transparency.audit import audit_entries
from grader.transparency.boards import check_board, check_boards_against_log, logged_envelopes
from grader.transparency.entries import PUBLIC_VOCABULARY_FIELDS, decode_entry, entry_opens, key_of_entry
from grader.transparency.errors import LogVerificationError
from grader.transparency.published import check_published
from grader.transparency.tiles import TILE_WIDTH
from tests.hosting.support import admin
from tests.hosting.transparency_support import reader, restarted, served_entries
from tests.hosting.world import World

pytestmark = pytest.mark.board(seeded=True)


def _served_entries(client: TestClient, world: World) -> list[bytes]:
    entries = served_entries(client, world)
    assert len(entries) <= TILE_WIDTH  # one partial tile: the bundle paths the tests tamper with
    return entries


def test_every_board_row_shows_its_logged_report_and_an_altered_score_is_caught(world: World) -> None:
    client = TestClient(create_app(world.ctx))
    entries = _served_entries(client, world)
    logged = logged_envelopes(entries)
    # before the reveal, no two entries share a value (a participant's reports included), the public vocabulary and times apart
    values: dict[str, int] = {}
    for index, entry in enumerate(entries[1:], start=1):
        for name, value in decode_entry(entry).items():
            if name not in PUBLIC_VOCABULARY_FIELDS and name != "time":
                assert str(value) not in values, f"entries {values.get(str(value))} and {index} share {name}"
                values[str(value)] = index
    assert len(entries) > 2 * len(world.submissions)  # each hidden result: its full and its public-part report
    board = client.get("/api/v1/leaderboard").json()
    rows = sum(len(b["entries"]) for b in board["boards"])
    assert rows >= 3 and check_board(board, lambda link: client.get(link).content, logged) == rows
    assert check_boards_against_log(entries, reader(client)) == f"board: {rows} row(s) show the score and task means of their logged report"
    # entry 0 is what the host publishes beside the log; a host serving anything else is caught
    assert check_published(entries, reader(client)).startswith("host: serves entry 0's partition commitment and host key")
    partition = client.get("/api/v1/partition").json()
    task = sorted(partition["data_digests"]["tasks"])[0]
    for path, changed, fault in (
        ("api/v1/partition", {**partition, "commitment": "0" * 64}, "partition commitment served"),
        ("api/v1/partition", {**partition, "secret": "00" * 32}, "secret served does not open"),
        (
            "api/v1/partition",
            {**partition, "data_digests": {"tasks": {**partition["data_digests"]["tasks"], task: {"test": "1" * 64}}}},
            "data digests",
        ),
        ("host-key.pub", public_key_pem(Ed25519PrivateKey.generate().public_key()), "host key served"),
    ):
        served = changed if isinstance(changed, bytes) else json.dumps(changed).encode()
        with pytest.raises(LogVerificationError, match=fault):
            check_published(entries, lambda asked, path=path, served=served: served if asked == path else reader(client)(asked))
    # The host points one row's result at a copy of another participant's result whose public-part report it signed
    # afresh and never logged: the board moves with it, and the row's report is not in the log. (Pointed at another
    # *logged* report, row and link move together and the check cannot tell: docs/transparency.md says so.)
    every = [row for b in board["boards"] for row in b["entries"]]
    target = every[0]
    other = next(row for row in every if row["score"] != target["score"])
    with world.ctx.db.engine.begin() as connection:
        other_envelope = Path(
            connection.execute(
                text("SELECT r.envelope_path FROM results r JOIN submissions s ON s.result_id = r.id WHERE s.id = :other"),
                {"other": other["submission"]},
            ).scalar_one()
        )
    forged = other_envelope.parent.parent / "forged"
    shutil.copytree(other_envelope.parent, forged)
    public = StateDir.public_part_of(forged / other_envelope.name)
    resigned = verify_envelope((public / ENVELOPE_NAME).read_bytes(), world.ctx.signing_key.public_key()).report
    resigned["subject"]["name"] += " (re-signed)"
    sign_and_store(resigned, world.ctx.signing_key, public)
    with world.ctx.db.engine.begin() as connection:
        connection.execute(
            text("UPDATE results SET envelope_path = :forged WHERE id = (SELECT result_id FROM submissions WHERE id = :id)"),
            {"id": target["submission"], "forged": str(forged / other_envelope.name)},
        )
    restarted()  # as a restarted server: the comparisons are cached per process
    altered = client.get("/api/v1/leaderboard").json()
    assert altered != board
    with pytest.raises(LogVerificationError, match=f"submission '?{target['submission']}'?: its report is not in the log"):
        check_board(altered, lambda link: client.get(link).content, logged)
    # a report the log never saw is refused too
    with pytest.raises(LogVerificationError, match="its report is not in the log"):
        check_board(board, lambda link: client.get(link).content, set())


def test_the_reveal_opens_entry_0_names_the_final_boards_as_served_and_every_entry_becomes_openable(world: World) -> None:
    client = TestClient(create_app(world.ctx))
    chosen = world.submissions[0]
    answer = client.put("/api/v1/finals", json={"submissions": [chosen.id]}, headers={"Authorization": f"Bearer {world.tokens[chosen.participant]}"})
    assert answer.status_code == 200, answer.text
    admin(world.state.root, "end", "--yes", database=world.database)
    # after the end the rows link full reports (the full split's score, not the part's): no row check until the reveal
    assert "not checked: the competition ended" in check_boards_against_log(_served_entries(client, world), reader(client))
    said = admin(world.state.root, "log-reveal", "--competition", str(world.ctx.competition.path), database=world.database)
    entries = _served_entries(client, world)
    assert said.strip() == f"reveal logged as entry {len(entries) - 1}"
    summary = audit_entries(entries)  # the reveal opens exactly the commitments of entry 0
    assert summary.revealed and summary.kinds["end"] == 1
    with world.ctx.db.session() as session:  # the finals at the end: one entry per participant who chose
        choosers = set(session.scalars(select(FinalChoice.participant_id)).all())
    assert choosers and summary.kinds.get("finals") == len(choosers)
    reveal = decode_entry(entries[-1])
    for part in ("public", "private"):
        served = client.get("/api/v1/leaderboard", params={"part": part}).json()
        assert hashlib.sha256(rfc8785.dumps(served)).hexdigest() == reveal[f"{part}_board_sha256"], part
    assert check_boards_against_log(entries, reader(client)) == "board: the final public and private boards are the ones the reveal logged"
    assert check_published(entries, reader(client)).startswith("host: ")  # the secret now served opens entry 0's commitment
    # after the reveal anyone opens every entry: each report entry names one of the participants
    identifier = bytes.fromhex(reveal["identifier_key"])
    reports = [decode_entry(entry) for entry in entries if decode_entry(entry)["kind"] == "report"]
    assert reports and all(
        sum(entry_opens(report, key_of_entry(identifier, report), participant=name) for name in world.tokens) == 1 for report in reports
    )
    with pytest.raises(AssertionError, match="already holds the reveal"):
        admin(world.state.root, "log-reveal", "--competition", str(world.ctx.competition.path), database=world.database)
    # a final board changed in the database after the reveal (a row's submission renamed): the audit's --board check catches it
    with world.ctx.db.engine.begin() as connection:
        connection.execute(text("UPDATE submissions SET name = 'renamed after the reveal'"))
    restarted()  # as a restarted server
    with pytest.raises(LogVerificationError, match="the public board served now is not the final public board the reveal logged"):
        check_boards_against_log(entries, reader(client))
