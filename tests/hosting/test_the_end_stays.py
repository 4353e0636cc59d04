"""The end stays ended: an end once logged is stored, whoever logged it; a server refuses to start when the log holds
an end the file's ``end`` reached and the file now says the competition is open; the reveal waits for every
submission in flight; after it the log takes nothing but retractions (a rejudge, a re-scoring, a receipt refused).

On SQLite and on a real PostgreSQL (the ``world`` fixture); the attack replayed against a real `grader serve` is at
the end of the module (slow).
"""

from __future__ import annotations

import io
import sqlite3
import tarfile
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import func, select

from grader.hosting.api.app import create_app
from grader.hosting.clock import utcnow
from grader.hosting.config import load_competition
from grader.hosting.db.models import LogEntry
from grader.hosting.errors import HostingError
from grader.hosting.identity.participants import create_participant
from grader.hosting.intake import submissions
from grader.hosting.participant.client import HostingClient
from grader.hosting.schedule import ends_at, has_ended
from grader.hosting.server import ServeOptions, prepare
from grader.hosting.services import admin as service
from grader.hosting.services.startup import EndReopened, hold_the_end
from grader.hosting.transparency.host_log import HostLog
from grader.hosting.transparency.log_events import log_end, log_end_if_due, log_reveal
from grader.hosting.transparency.log_store import LogClosedError, append_entry
from grader.transparency import entries
from grader.transparency.commitments import EntryCommitter
from grader.transparency.note import NoteSigner
from tests.hosting.support import REPO, Server, admin, log_audit, served_entries, wait_for, write_competition
from tests.hosting.world import World, new_submission, state_of

FILE_END = datetime(2020, 1, 2, tzinfo=UTC)


def _log(folder: Path) -> HostLog:
    return HostLog(NoteSigner("grader-log/test", Ed25519PrivateKey.generate()), b"k" * 32, folder)


def _first(host_log: HostLog, world: World) -> None:
    entry = entries.competition_entry(
        time=FILE_END - timedelta(days=1),
        origin=host_log.origin,
        competition_sha256="0" * 64,
        partition_commitment="1" * 64,
        identifier_commitment="2" * 64,
        blinding_commitment=None,
        data_digests={},
        host_key_id="3" * 64,
        log_key_id="4" * 64,
    )
    with world.db.session() as session:
        append_entry(session, host_log, entry)


def _reveal_entry() -> bytes:
    return entries.reveal_entry(
        time=utcnow(),
        partition_secret=b"p" * 32,
        identifier_key=b"k" * 32,
        blinding_key=None,
        public_board_sha256="5" * 64,
        private_board_sha256="6" * 64,
    )


def test_the_files_end_once_logged_stays_when_the_file_moves_it_later(world: World, tmp_path: Path) -> None:
    host_log = _log(tmp_path / "log")
    _first(host_log, world)
    passed = replace(world.competition, end=FILE_END)
    assert log_end_if_due(world.db, host_log, passed)  # the reaper's pass after the file's end: no admin command
    moved = replace(world.competition, end=utcnow() + timedelta(days=30))
    assert ends_at(world.db, moved) == FILE_END and has_ended(world.db, moved)  # the stored end, not the file's new one
    hold_the_end(world.db, passed)  # the file unchanged: the server starts
    assert service.end_now(world.db, host_log=host_log) == FILE_END  # `grader admin end` afterwards: the logged end stays
    with pytest.raises(EndReopened) as refused:
        hold_the_end(world.db, moved)
    said = str(refused.value)
    assert "\n" not in said
    assert said.startswith("the log holds the competition's end at 2020-01-02T00:00:00Z (entry 1), but the competition file now says it ends at ")
    assert "open a new competition for more time" in said
    # the end taken out of the file (a standing board now) reopens nothing either: the reaper logs no second end
    standing = replace(world.competition, end=None)
    assert ends_at(world.db, standing) == FILE_END and has_ended(world.db, standing)
    assert not log_end_if_due(world.db, host_log, standing)
    with pytest.raises(EndReopened, match="never \\(no end: a standing leaderboard\\)"):
        hold_the_end(world.db, standing)


def test_the_hosts_early_end_is_stored_and_a_server_starts_with_the_files_later_end(world: World, tmp_path: Path) -> None:
    host_log = _log(tmp_path / "log")
    _first(host_log, world)
    ended = service.end_now(world.db, host_log=host_log)
    hold_the_end(world.db, world.competition)  # the file's end was later all along: no refusal, the early end decides
    assert ends_at(world.db, world.competition) == ended and has_ended(world.db, world.competition)


def test_an_end_logged_before_it_was_stored_is_stored_at_start(world: World, tmp_path: Path) -> None:
    """A log written by an earlier version holds the file's end, and the database no stored end."""
    host_log = _log(tmp_path / "log")
    _first(host_log, world)
    with world.db.session() as session:
        append_entry(session, host_log, entries.end_entry(time=FILE_END))
    moved = replace(world.competition, end=utcnow() + timedelta(days=30))
    assert not has_ended(world.db, moved)  # what the attack exploited
    with pytest.raises(EndReopened, match="entry 1"):
        hold_the_end(world.db, moved)
    hold_the_end(world.db, replace(world.competition, end=FILE_END))
    assert ends_at(world.db, moved) == FILE_END


def test_the_reveal_waits_for_every_submission_in_flight(world: World, tmp_path: Path) -> None:
    host_log = _log(tmp_path / "log")
    _first(host_log, world)
    waiting = new_submission(world)  # received before the end, still queued
    with world.db.session() as session:
        log_end(session, host_log, utcnow())
    with pytest.raises(HostingError, match=f"1 still in flight \\({waiting}\\)"):
        log_reveal(world.db, host_log, _reveal_entry())
    service.cancel(world.db, waiting, host_log=host_log)
    assert log_reveal(world.db, host_log, _reveal_entry()) > 0


def test_after_the_reveal_the_log_takes_only_retractions_and_rejudge_and_rescore_are_refused(world: World, tmp_path: Path) -> None:
    host_log = _log(tmp_path / "log")
    _first(host_log, world)
    done = new_submission(world)
    service.cancel(world.db, done, host_log=host_log)
    with world.db.session() as session:
        log_end(session, host_log, utcnow())
    revealed = log_reveal(world.db, host_log, _reveal_entry())
    with pytest.raises(LogClosedError, match=f"the log holds the reveal \\(entry {revealed}\\).*a rejudge is refused"):
        service.rejudge(world.db, done, max_attempts=1, host_log=host_log)
    with pytest.raises(LogClosedError, match="a re-scoring is refused"):
        service.rescore(world.db, world.state.root, world.competition, None, host_log=host_log)
    assert state_of(world, done).state == "cancelled"  # nothing queued again
    receipt = entries.receipt_entry(EntryCommitter.fresh(b"k" * 32), time=utcnow(), participant="alice", submission="s", upload_sha256="0" * 64)
    with world.db.session() as session, pytest.raises(LogClosedError, match="this receipt is refused"):
        append_entry(session, host_log, receipt)
    with world.db.session() as session:
        size = session.scalar(select(func.count()).select_from(LogEntry)) or 0
        append_entry(session, host_log, entries.retraction_entry(time=utcnow(), index=1, admin="host", reason="a mistake"))
    with world.db.session() as session:
        assert session.scalar(select(func.count()).select_from(LogEntry)) == size + 1


@pytest.mark.slow  # the upload's ONNX check runs in a child process
def test_an_upload_whose_end_is_logged_while_it_is_stored_gets_no_receipt_after_the_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The end is logged between the upload's read of the end and its transaction: refused, never receipted after the end."""
    from fastapi.testclient import TestClient

    competition = load_competition(write_competition(tmp_path / "c.toml"))
    ctx, _db = prepare(ServeOptions(competition=competition, state_dir=tmp_path / "state", workers=0))
    try:
        with ctx.db.session() as session:
            token = create_participant(session, "alice", None)[1]
        read_end = submissions.ends_at

        def read_then_end(db, competition):  # type: ignore[no-untyped-def]
            at = read_end(db, competition)
            service.end_now(db, host_log=ctx.log)  # the host ends it right after this upload read the end
            return at

        monkeypatch.setattr(submissions, "ends_at", read_then_end)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for name in ("model.onnx", "tokenizer.json", "submission.json"):
                tar.add(REPO / "submissions_example" / "onnx-lsa" / name, arcname=name)
        answer = TestClient(create_app(ctx)).post("/api/v1/submissions", content=buffer.getvalue(), headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 403 and "the competition closed at" in answer.json()["detail"], answer.text
        with ctx.db.session() as session:
            assert list(session.scalars(select(LogEntry.kind).order_by(LogEntry.index)).all()) == ["competition", "end"]
    finally:
        ctx.db.dispose()


# --- the attack, replayed against a real `grader serve` -------------------------------------------------------------


def _end_line(file: Path, end: str) -> None:
    file.write_text("\n".join(f"end = {end}" if line.startswith("end = ") else line for line in file.read_text().splitlines()) + "\n")


def _forge(state: Path, entry: bytes) -> int:
    """What a host who writes its database by hand does: an entry appended past the rules (the server publishes it at
    its next start, as an extension of its log); its index."""
    with sqlite3.connect(state / "grader.sqlite3") as connection:
        index = connection.execute("SELECT MAX(idx) + 1 FROM log_entries").fetchone()[0]
        kind = entries.decode_entry(entry)["kind"]
        connection.execute(
            "INSERT INTO log_entries (idx, entry, kind, created_at) VALUES (?, ?, ?, ?)", (index, entry, kind, utcnow().replace(tzinfo=None))
        )
    connection.close()
    return int(index)


def _copy(source: Path, target: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    with sqlite3.connect(source) as reading, sqlite3.connect(target) as writing:
        reading.backup(writing)
    writing.close()
    reading.close()


@pytest.mark.slow
def test_a_moved_end_is_refused_at_start_and_a_forged_receipt_or_rejudge_fails_the_audit(tmp_path: Path) -> None:
    file = write_competition(tmp_path / "c.toml", name="ended-comp")
    server = Server(file, tmp_path / "state", workers=0).start()
    try:
        # An upload before the end, never graded (no worker): it holds the reveal, which follows the end by itself.
        token = admin(server.state, "add-participant", "kim").strip()
        held = HostingClient(server.url, token).submit(REPO / "submissions_example" / "onnx-lsa")["id"]
        server.stop()
        end = (utcnow() + timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")  # after the upload's receipt
        _end_line(file, end)
        server.start()
        wait_for(
            lambda: "end" in [entries.decode_entry(entry)["kind"] for entry in served_entries(server)], what="the file's end logged by the reaper"
        )
        vkey = httpx.get(f"{server.url}/log/key").text.strip()
        server.stop()
        assert "reveal" not in [entries.decode_entry(entry)["kind"] for entry in served_entries(server)]  # the upload is in flight
        # A receipt forged after the end (no reveal yet): the audit names it.
        database, checkpoint = server.state / "grader.sqlite3", server.state / "log" / "checkpoint"
        _copy(database, tmp_path / "honest.sqlite3")
        honest_checkpoint = checkpoint.read_bytes()
        receipt = entries.receipt_entry(EntryCommitter.fresh(b"k" * 32), time=utcnow(), participant="mallory", submission="s", upload_sha256="0" * 64)
        forged = _forge(server.state, receipt)
        server.start()
        audit = log_audit(server, vkey, tmp_path / "auditor-1")
        assert audit.returncode == 1, audit.stdout + audit.stderr
        assert f"entry {forged}: a receipt after the end" in audit.stderr
        server.stop()
        _copy(tmp_path / "honest.sqlite3", database)  # back to the honest log, for the reveal
        checkpoint.write_bytes(honest_checkpoint)
        server.start()
        admin(server.state, "cancel", held)  # nothing in flight now: the server logs the reveal by itself
        wait_for(
            lambda: "reveal" in [entries.decode_entry(entry)["kind"] for entry in served_entries(server)], what="the reveal logged by the server"
        )
        server.stop()
        # The attack: the file's end moved later, the server restarted.
        _end_line(file, "2099-01-01T00:00:00Z")
        refused = server.start(expect_ok=False)
        assert refused.process is not None and refused.process.wait(120) != 0
        said = server.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1]
        assert said.startswith(f"error: the log holds the competition's end at {end} (entry "), said
        assert "but the competition file now says it ends at 2099-01-01T00:00:00Z" in said, said
        # A rejudge forged after the reveal: the audit names it.
        _end_line(file, end)
        rejudge = entries.rejudge_entry(
            EntryCommitter.fresh(b"k" * 32), time=utcnow(), participant="mallory", submission="s", attempt=2, reason="more"
        )
        forged = _forge(server.state, rejudge)
        server.start()
        audit = log_audit(server, vkey, tmp_path / "auditor-2")
        assert audit.returncode == 1, audit.stdout + audit.stderr
        assert f"entry {forged}: a rejudge after the reveal (entry {forged - 1})" in audit.stderr
    finally:
        server.stop()
