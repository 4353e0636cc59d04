"""Every grade outcome is logged, failed grades included, in the transaction that records it.

A signed report is logged as a ``report`` entry; a grade that ends with no report signed is an ``outcome`` entry
(status, failure code, attempt): a participant failure the worker posts without a report, and ``error`` at the attempt
limit, whether a worker posted the platform failure or the reaper found the lease expired. So no accepted upload can
end unseen: every terminal submission has an entry after its receipt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import select

from grader.hosting.db.models import LogEntry, Submission
from grader.hosting.queue import lifecycle
from grader.hosting.states import TERMINAL
from grader.hosting.transparency.host_log import HostLog
from grader.transparency.entries import decode_entry, entry_opens, key_of_entry
from grader.transparency.note import NoteSigner
from tests.hosting.posting import accept_posted
from tests.hosting.world import World, expire_lease, new_submission, state_of

IDENTIFIER_KEY = b"i" * 32


def _log(folder: Path) -> HostLog:
    return HostLog(NoteSigner("grader-log/test", Ed25519PrivateKey.generate()), IDENTIFIER_KEY, folder)


def _entries_of(world: World, submission_id: str) -> list[dict[str, Any]]:
    with world.db.session() as session:
        rows = session.scalars(select(LogEntry.entry).where(LogEntry.submission_id == submission_id).order_by(LogEntry.index)).all()
    return [decode_entry(bytes(row)) for row in rows]


def _post(world: World, host_log: HostLog, submission_id: str, attempt: int, worker: int, payload: dict[str, Any]) -> tuple[str, str | None]:
    verdict = accept_posted(
        world.db, world.state, world.key, submission_id=submission_id, attempt=attempt, worker_id=worker, payload=payload, host_log=host_log
    )
    return verdict.status, verdict.state


def _claim(world: World, submission_id: str, worker: int) -> int:
    claim = lifecycle.claim(world.db, worker, 30)
    assert claim is not None and claim.submission_id == submission_id
    return claim.attempt


def test_a_participant_failure_without_a_report_is_logged_with_its_code(world: World, tmp_path: Path) -> None:
    host_log = _log(tmp_path / "log")
    submission_id = new_submission(world)
    attempt = _claim(world, submission_id, world.workers[0])
    assert _post(world, host_log, submission_id, attempt, world.workers[0], {"failure_code": "OOM", "message": "killed"}) == ("accepted", "failed")
    (entry,) = _entries_of(world, submission_id)
    assert {name: entry[name] for name in ("kind", "status", "failure_code", "attempt")} == {
        "kind": "outcome",
        "status": "failed",
        "failure_code": "OOM",
        "attempt": 1,
    }
    assert entry_opens(entry, key_of_entry(IDENTIFIER_KEY, entry), participant="alice", submission=submission_id)
    assert "envelope_sha256" not in entry and "payload_sha256" not in entry


def test_errors_at_the_attempt_limit_are_logged_from_a_worker_and_from_the_reaper(world: World, tmp_path: Path) -> None:
    host_log = _log(tmp_path / "log")
    posted, reaped = new_submission(world), new_submission(world)
    # a worker posts a platform failure twice (the competition allows 2 attempts): re-queued (nothing logged), then error
    assert _post(world, host_log, posted, _claim(world, posted, world.workers[0]), world.workers[0], {"failure_code": "INFRA"})[0] == "requeued"
    assert _entries_of(world, posted) == []
    assert _post(world, host_log, posted, _claim(world, posted, world.workers[0]), world.workers[0], {"failure_code": "INFRA"}) == ("error", "error")
    # the reaper finds the other job's lease expired twice: re-queued (nothing logged), then error
    assert _claim(world, reaped, world.workers[1]) == 1
    expire_lease(world, reaped)
    assert lifecycle.reap(world.db, world.dispatcher, redispatch_s=60, host_log=host_log).requeued == [reaped]
    assert _entries_of(world, reaped) == []
    assert _claim(world, reaped, world.workers[1]) == 2
    expire_lease(world, reaped)
    assert lifecycle.reap(world.db, world.dispatcher, redispatch_s=60, host_log=host_log).errored == [reaped]
    for submission_id in (posted, reaped):
        (entry,) = _entries_of(world, submission_id)
        assert (entry["kind"], entry["status"], entry["failure_code"], entry["attempt"]) == ("outcome", "error", "INFRA", 2)
        assert state_of(world, submission_id).state == "error"


def test_no_terminal_submission_is_left_without_an_entry(world: World, tmp_path: Path) -> None:
    host_log = _log(tmp_path / "log")
    failed, errored, cancelled = new_submission(world), new_submission(world), new_submission(world)
    _post(world, host_log, failed, _claim(world, failed, world.workers[0]), world.workers[0], {"failure_code": "TIMEOUT"})
    for _ in range(2):
        _post(world, host_log, errored, _claim(world, errored, world.workers[0]), world.workers[0], {"failure_code": "INFRA"})
    assert lifecycle.cancel_submission(world.db, cancelled, host_log=host_log)
    with world.db.session() as session:
        ended = session.scalars(select(Submission.id).where(Submission.state.in_([state.value for state in TERMINAL]))).all()
    assert sorted(ended) == sorted([failed, errored, cancelled])
    kinds = {submission_id: [entry["kind"] for entry in _entries_of(world, submission_id)] for submission_id in ended}
    assert kinds == {failed: ["outcome"], errored: ["outcome"], cancelled: ["cancellation"]}
