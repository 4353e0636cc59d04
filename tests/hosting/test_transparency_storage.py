"""The log in the database and the published checkpoint file, on SQLite and on a real PostgreSQL.

Appends from many threads at once get one index each, in commit order, and the published checkpoint is the
tree of exactly what committed; the checkpoint file only ever grows, whichever process writes it; a database
tree shorter than the file, or not extending it, is refused before anything is signed.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import delete, select

from grader.hosting.db.models import LogEntry
from grader.hosting.transparency.host_log import HostLog, LogStateError
from grader.hosting.transparency.log_events import log_end, log_end_if_due
from grader.hosting.transparency.log_store import append_entry, open_log, publish_from
from grader.transparency.checkpoint import open_checkpoint
from grader.transparency.entries import competition_entry, end_entry, retraction_entry
from grader.transparency.merkle import MemoryTree
from grader.transparency.note import NoteSigner
from tests.hosting.world import World

_KEY = Ed25519PrivateKey.generate()


def _log(folder: Path) -> HostLog:
    """A fresh view of the log (as another server process has): its own in-memory tree."""
    return HostLog(NoteSigner("grader-log/test", _KEY), b"k" * 32, folder)


def _entry(number: int) -> bytes:
    return retraction_entry(time=datetime(2026, 12, 2, tzinfo=UTC), index=number + 1, admin="host", reason=f"test {number}")


def test_concurrent_appends_get_one_index_each_and_publish_what_committed(world: World, tmp_path: Path) -> None:
    host_log = _log(tmp_path / "log")
    with world.db.session() as session:
        append_entry(session, host_log, end_entry(time=datetime(2026, 12, 2, tzinfo=UTC)))
    written: list[bytes] = []
    lock = threading.Lock()

    def append(number: int) -> None:
        with world.db.session() as session:
            append_entry(session, host_log, _entry(number))
        with lock:
            written.append(_entry(number))

    threads = [threading.Thread(target=append, args=(number,)) for number in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with world.db.session() as session:
        rows = session.query(LogEntry.index, LogEntry.entry).order_by(LogEntry.index).all()
        assert [index for index, _ in rows] == list(range(9))
        assert sorted(bytes(entry) for _, entry in rows[1:]) == sorted(written)
        note, checkpoint = publish_from(session, _log(tmp_path / "log"))  # another process's view publishes the same tree
    expected = MemoryTree.from_entries([bytes(entry) for _, entry in rows])
    assert (checkpoint.size, checkpoint.root_hash) == (9, expected.root())
    assert open_checkpoint(note, [host_log.verifier]) == checkpoint
    assert (tmp_path / "log" / "checkpoint").read_bytes() == note


def test_the_checkpoint_file_never_goes_back_and_a_shorter_or_rewritten_database_is_refused(world: World, tmp_path: Path) -> None:
    first = _log(tmp_path / "log")
    with world.db.session() as session:
        for number in range(3):
            append_entry(session, first, _entry(number))
    with world.db.session() as session:
        assert publish_from(session, first)[1].size == 3
    # a view that has read only 2 entries (an older copy of the database) cannot publish, nor start
    behind = _log(tmp_path / "log")
    for number in range(2):
        behind.tree.append(_entry(number))
    with pytest.raises(LogStateError, match="has 2 entries but the published checkpoint .* has 3"):
        behind.publish()
    # the database rewritten: entry 1 replaced, the size unchanged
    with world.db.session() as session:
        session.execute(delete(LogEntry).where(LogEntry.index == 1))
        session.add(LogEntry(index=1, entry=_entry(7), kind="retraction", created_at=datetime.now(UTC)))
    with world.db.session() as session, pytest.raises(LogStateError, match="inconsistent with the published checkpoint"):
        publish_from(session, _log(tmp_path / "log"))
    assert open_checkpoint((tmp_path / "log" / "checkpoint").read_bytes(), [first.verifier]).size == 3


def _first_entry(competition_sha256: str) -> bytes:
    return competition_entry(
        time=datetime(2026, 12, 1, tzinfo=UTC),
        origin="grader-log/test",
        competition_sha256=competition_sha256,
        partition_commitment="1" * 64,
        identifier_commitment="2" * 64,
        blinding_commitment=None,
        data_digests={"task/test": "3" * 64},
        host_key_id="4" * 64,
        log_key_id="5" * 64,
    )


def _kinds(world: World) -> list[str]:
    with world.db.session() as session:
        return list(session.scalars(select(LogEntry.kind).order_by(LogEntry.index)).all())


def test_a_new_competition_file_is_logged_at_start_and_the_files_end_once(world: World, tmp_path: Path) -> None:
    open_log(world.db, _log(tmp_path / "log"), _first_entry("a" * 64))
    open_log(world.db, _log(tmp_path / "log"), _first_entry("a" * 64))  # a restart with the same file: nothing new
    open_log(world.db, _log(tmp_path / "log"), _first_entry("b" * 64))  # another file: a repin entry names it
    assert _kinds(world) == ["competition", "repin"]
    host_log = _log(tmp_path / "log")
    assert not log_end_if_due(world.db, host_log, world.competition)  # the file's end is to come
    ended = replace(world.competition, end=datetime(2020, 1, 2, tzinfo=UTC))
    assert log_end_if_due(world.db, host_log, ended)
    assert not log_end_if_due(world.db, host_log, ended)  # another reaper, another pass: once
    with world.db.session() as session:
        assert not log_end(session, host_log, datetime.now(UTC))  # `grader admin end` afterwards adds no second end
    assert _kinds(world) == ["competition", "repin", "end"]
