"""The reveal is part of ending: after the end (``grader admin end`` or the file's end), the server's periodic pass logs
the reveal by itself once no submission received before the end is in flight; ``grader admin log-reveal`` remains for
a reveal that failed. Against a real ``grader serve``: the reveal waits for a grade in flight at the end, then comes
without any command; a second reveal is refused. The race of two passes (several server processes on one database)
and boards read before a grade was logged: the unit tests at the end, on the ``world`` fixture's databases."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.cli.main import cli
from grader.hosting.clock import utcnow
from grader.hosting.keyring.worker_signing import ensure_worker_key, sign_result
from grader.hosting.participant.client import HostingClient
from grader.hosting.services import admin as service
from grader.hosting.transparency.host_log import HostLog
from grader.hosting.transparency.log_events import AlreadyRevealed, RevealNotDue, head_index, log_end, log_reveal, reveal_due
from grader.hosting.transparency.log_store import append_entry
from grader.transparency import entries
from grader.transparency.note import NoteSigner
from tests.hosting.support import REPO, Server, admin, claim_body, grader_cli, stated_fingerprint, wait_for, worker_headers, write_competition
from tests.hosting.world import World, new_submission


def _kinds(server: Server) -> list[str]:
    """The kinds of the entries the server's database holds, in order."""
    with sqlite3.connect(server.state / "grader.sqlite3") as connection:
        rows = connection.execute("SELECT kind FROM log_entries ORDER BY idx").fetchall()
    connection.close()
    return [str(row[0]) for row in rows]


@pytest.mark.slow
def test_the_end_leads_to_the_reveal_once_the_grade_in_flight_at_the_end_finishes(tmp_path: Path) -> None:
    file = write_competition(tmp_path / "c.toml", tables={"queue": {"lease_s": 120, "heartbeat_s": 30}})  # no heartbeat needed here
    server = Server(file, tmp_path / "state", workers=0).start()
    try:
        participant = admin(server.state, "add-participant", "kim").strip()
        key = ensure_worker_key(tmp_path / "k")
        token = admin(server.state, "add-worker", "w1", "--public-key", str(tmp_path / "k" / "grader.pub")).strip()
        worker = httpx.Client(base_url=server.url, headers=worker_headers(token), timeout=30)
        sid = HostingClient(server.url, participant).submit(REPO / "submissions_example" / "onnx-lsa")["id"]
        job = worker.post("/api/v1/worker/claim", json=claim_body(stated_fingerprint(server.url, token, key), 5)).json()
        assert job["submission_id"] == sid  # running at the end
        said = admin(server.state, "end", "--yes")
        assert "the server logs the reveal once no submission received before the end is in flight" in said
        assert "end" in _kinds(server)
        time.sleep(1.5)  # several passes of the reaper (FAST_QUEUE's): the grade is in flight, so no reveal yet
        assert "reveal" not in _kinds(server)
        # the grade finishes (a failure the worker signs): the reveal follows by itself, once
        fields = {"submission_id": sid, "attempt": 1, "upload_sha256": job["upload_sha256"], "facts": None, "runs": {}}
        fields |= {"failure_code": "OOM", "message": "killed"}
        body = {"attempt": 1, "failure_code": "OOM", "message": "killed", "signature": sign_result(key, **fields)}
        assert worker.post(f"/api/v1/worker/jobs/{sid}/result", json=body).json() == {"status": "accepted", "state": "failed"}
        worker.close()
        wait_for(lambda: "reveal" in _kinds(server), timeout=30, what="the reveal logged by the server's pass")
        kinds = _kinds(server)
        assert kinds.count("reveal") == 1 and kinds[-1] == "reveal" and kinds.index("end") < kinds.index("reveal")
        # the server says so once its append committed: the line may follow the entry by a moment
        wait_for(lambda: "transparency log: the reveal logged as entry" in server.log.read_text(), timeout=30, what="the reveal's log line")
        # the host's command is for a reveal that failed: here it is refused, the log holding one
        refused = CliRunner().invoke(cli, ["admin", "--state", str(server.state), "log-reveal", "--competition", str(server.competition)])
        assert refused.exit_code != 0 and "already holds the reveal" in refused.output
        vkey = httpx.get(f"{server.url}/log/key").text.strip()
        audit = grader_cli("log", "audit", f"{server.url}/log", "--log-key", vkey, env={"XDG_STATE_HOME": str(tmp_path / "auditor")}, timeout=120)
        assert audit.returncode == 0 and "reveal: checked against entry 0" in audit.stdout, audit.stdout + audit.stderr
    finally:
        server.stop()


def _log(folder: Path) -> HostLog:
    return HostLog(NoteSigner("grader-log/test", Ed25519PrivateKey.generate()), b"k" * 32, folder)


def _reveal_entry() -> bytes:
    return entries.reveal_entry(
        time=utcnow(),
        partition_secret=b"p" * 32,
        identifier_key=b"k" * 32,
        blinding_key=None,
        public_board_sha256="5" * 64,
        private_board_sha256="6" * 64,
    )


def _started(world: World, host_log: HostLog) -> None:
    """Entry 0 of a test log."""
    entry = entries.competition_entry(
        time=utcnow(),
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


def test_the_reveal_is_due_after_the_end_with_nothing_in_flight_and_is_logged_once(world: World, tmp_path: Path) -> None:
    host_log = _log(tmp_path / "log")
    _started(world, host_log)
    assert not reveal_due(world.db)  # before the end
    waiting = new_submission(world)
    with world.db.session() as session:
        log_end(session, host_log, utcnow())
    assert not reveal_due(world.db)  # a submission received before the end is in flight
    service.cancel(world.db, waiting, host_log=host_log)
    assert reveal_due(world.db)
    # two passes (two server processes) read the same head: one reveal, the other told so
    head = head_index(world.db)
    first = log_reveal(world.db, host_log, _reveal_entry(), head=head)
    with pytest.raises(AlreadyRevealed):
        log_reveal(world.db, host_log, _reveal_entry(), head=head)
    assert first == head + 1 and not reveal_due(world.db)
    assert service.reveal_when_due(world.db, host_log, world.state.root, world.competition) is None  # nothing more to do


def test_boards_read_before_a_grade_was_logged_are_not_revealed(world: World, tmp_path: Path) -> None:
    """The reveal's board digests are read before its append; a grade logged in between would make them stale."""
    host_log = _log(tmp_path / "log")
    _started(world, host_log)
    with world.db.session() as session:
        log_end(session, host_log, utcnow())
    head = head_index(world.db)
    service.retract(world.db, host_log, index=head, admin="host", reason="an entry logged while the boards were read")
    with pytest.raises(RevealNotDue, match="the log moved while the final boards were read"):
        log_reveal(world.db, host_log, _reveal_entry(), head=head)
    assert log_reveal(world.db, host_log, _reveal_entry(), head=head_index(world.db)) == head + 2
