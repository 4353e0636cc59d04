"""The typed path of a posted result, step by step (SQLite and PostgreSQL, no mocks).

:func:`verify` checks the lease and a remote worker's signature once; the :class:`ScoredResult` carries the report
parsed once; the dict the host signs is derived from it; :func:`record_signed_result` records an acceptance and a
re-scoring alike, its compare-and-set guarded by the lease (acceptance) or the version read (re-scoring).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import func, select, update

from grader import jsonio
from grader.errors import InternalError
from grader.hosting.db.models import LogEntry, Pin, Result, Submission, Transition, Worker
from grader.hosting.errors import LostRace
from grader.hosting.identity.workers import create_worker
from grader.hosting.keyring.worker_signing import sign_result
from grader.hosting.protocol.messages import Verdict, VerdictStatus, WorkerResult
from grader.hosting.queue import lifecycle
from grader.hosting.results.recording import (
    WITHHELD,
    AuthenticResult,
    ScoredResult,
    SignedResult,
    accept_result,
    judge_report,
    record_signed_result,
    sign,
    signed_report,
    verify,
)
from grader.hosting.states import State
from grader.hosting.transparency.host_log import HostLog
from grader.reports.keys import public_key_pem
from grader.reports.model import build_report
from grader.transparency.note import NoteSigner
from tests.hosting.world import World, expire_lease, new_submission, state_of


def _host_log(folder: Path) -> HostLog:
    return HostLog(NoteSigner("grader-log/test", Ed25519PrivateKey.generate()), b"i" * 32, folder)


def _log_kinds(world: World, submission_id: str) -> list[str]:
    with world.db.session() as session:
        return list(session.scalars(select(LogEntry.kind).where(LogEntry.submission_id == submission_id).order_by(LogEntry.index)).all())


def _moves(world: World, submission_id: str) -> list[tuple[str | None, str]]:
    with world.db.session() as session:
        rows = session.scalars(select(Transition).where(Transition.submission_id == submission_id).order_by(Transition.id)).all()
        return [(t.from_state, t.to_state) for t in rows]


def _results(world: World, submission_id: str) -> int:
    with world.db.session() as session:
        return session.scalar(select(func.count()).select_from(Result).where(Result.submission_id == submission_id)) or 0


def _authentic(world: World, submission_id: str, worker_id: int, posted: WorkerResult) -> AuthenticResult:
    authentic = verify(world.db, worker_id, submission_id, posted)
    assert isinstance(authentic, AuthenticResult), authentic
    return authentic


def _report(world: World, *, failed: str | None = None) -> dict[str, Any]:
    """A report of every pinned task on the test split (``failed``: that task failed OOM, with a message naming the container)."""
    with world.db.session() as session:
        pin = session.get(Pin, world.pin_id)
        assert pin is not None
        pinned = pin.digests["tasks"]
    tasks = [
        {
            "name": name,
            "split": "test",
            "data_digest": {"sha256": digests["test"]},
            "status": "failed" if name == failed else "scored",
            "measures": {} if name == failed else {"NDCG@10": 0.5},
            "queries": {"judged": 10, "answered": 10, "missing": 0, "extra": 0},
            **({"failure": {"code": "OOM", "message": "killed on host-7 at /srv/secret"}} if name == failed else {}),
        }
        for name, digests in sorted(pinned.items())
    ]
    now = datetime.now(UTC)
    return build_report(
        benchmark={"name": "mini", "version": "2", "primary_measure": "NDCG@10"},
        subject={"name": "x", "kind": "onnx", "digest": {"sha256": "0" * 64}},
        tasks=tasks,
        aggregate={"measure": "NDCG@10", "score": None if failed else 0.5, "complete": failed is None, "groups": {}},
        policy="strict",
        started_at=now,
        finished_at=now,
    )


def test_a_forged_signature_is_refused_at_verification_and_a_verified_result_is_not_checked_again(world: World) -> None:
    key, forger = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    with world.db.session() as session:
        remote, _token = create_worker(session, "remote-1", public_key_pem(key.public_key()).decode("ascii"))
        remote_id = remote.id
    submission_id = new_submission(world)
    claim = lifecycle.claim(world.db, remote_id, 30)
    assert claim is not None and claim.submission_id == submission_id
    fields: dict[str, Any] = {"facts": None, "runs": {}, "failure_code": "OOM", "message": "killed"}

    def signed_by(signer: Ed25519PrivateKey) -> WorkerResult:
        # As a worker of today signs (grader.hosting.worker.loop): bound to the submission, the attempt and the upload it fetched.
        signature = sign_result(signer, submission_id=submission_id, attempt=claim.attempt, upload_sha256="0" * 64, **fields)
        return WorkerResult(attempt=claim.attempt, signature=signature, **fields)

    refused = verify(world.db, remote_id, submission_id, signed_by(forger))
    assert refused == Verdict(status=VerdictStatus.REFUSED)
    assert verify(world.db, remote_id, submission_id, WorkerResult(attempt=claim.attempt, **fields)) == refused  # unsigned
    assert not world.state.result_dir(submission_id, claim.attempt).exists() and state_of(world, submission_id).state is State.RUNNING

    posted = signed_by(key)
    authentic = _authentic(world, submission_id, remote_id, posted)
    assert authentic.grading.remote and authentic.grading.worker_name == "remote-1"
    # The signature was checked when the result was read, once: a key recorded since does not undo it.
    with world.db.session() as session:
        session.execute(update(Worker).where(Worker.id == remote_id).values(public_key=public_key_pem(forger.public_key()).decode("ascii")))
    verdict = accept_result(world.db, world.state, world.key, ScoredResult.unscored(authentic))
    assert verdict == Verdict(status=VerdictStatus.ACCEPTED, state="failed")
    with world.db.session() as session:
        assert session.scalars(select(Result.worker_signature).where(Result.submission_id == submission_id)).all() == [posted.signature]


def test_a_lease_passed_on_while_the_runs_were_scored_makes_the_final_compare_and_set_refuse(world: World) -> None:
    submission_id = new_submission(world)
    assert lifecycle.claim(world.db, world.workers[0], 30) is not None
    scored = ScoredResult.unscored(_authentic(world, submission_id, world.workers[0], WorkerResult(attempt=1, failure_code="OOM", logs={"g": "log"})))
    # Meanwhile (scoring takes minutes, in no transaction) the lease lapses and another worker takes the job.
    expire_lease(world, submission_id)
    assert lifecycle.reap(world.db, world.dispatcher, redispatch_s=60).requeued == [submission_id]
    second = lifecycle.claim(world.db, world.workers[1], 30)
    assert second is not None and second.attempt == 2

    assert accept_result(world.db, world.state, world.key, scored) == Verdict(status=VerdictStatus.STALE)
    now = state_of(world, submission_id)
    assert (now.state, now.attempt, now.lease_worker_id) == (State.RUNNING, 2, world.workers[1])
    assert _results(world, submission_id) == 0 and not world.state.result_dir(submission_id, 1).exists()


def test_a_duplicate_post_verified_before_the_first_was_recorded_leaves_the_accepted_files(world: World) -> None:
    submission_id = new_submission(world)
    assert lifecycle.claim(world.db, world.workers[0], 30) is not None
    posted = WorkerResult(attempt=1, failure_code="OOM", logs={"grade": "the container's log"})
    first, again = (_authentic(world, submission_id, world.workers[0], posted) for _ in range(2))  # a retried post, both read under the lease
    assert accept_result(world.db, world.state, world.key, ScoredResult.unscored(first)).status is VerdictStatus.ACCEPTED
    assert accept_result(world.db, world.state, world.key, ScoredResult.unscored(again)) == Verdict(status=VerdictStatus.STALE)
    assert (world.state.result_dir(submission_id, 1) / "logs" / "grade.log").read_text(encoding="utf-8") == "the container's log"
    assert _results(world, submission_id) == 1


def test_the_signed_report_is_derived_from_the_scored_one_which_stays_as_scored(world: World) -> None:
    submission_id = new_submission(world)  # hidden: a task failure's message is withheld from the signed report
    assert lifecycle.claim(world.db, world.workers[0], 30) is not None
    scored = ScoredResult.of_report(
        _authentic(world, submission_id, world.workers[0], WorkerResult(attempt=1, facts={})), _report(world, failed="code2text")
    )
    assert scored.report is not None
    assert accept_result(world.db, world.state, world.key, scored) == Verdict(status=VerdictStatus.ACCEPTED, state="failed")
    stored = state_of(world, submission_id)
    with world.db.session() as session:
        result = session.get(Result, stored.result_id)
        assert result is not None and result.report_path is not None and result.failure_code == "OOM"
        signed = jsonio.loads(Path(result.report_path).read_bytes())
    assert signed["tasks"]["code2text"]["failure"] == {"code": "OOM", "message": WITHHELD}
    assert scored.report.data["tasks"]["code2text"]["failure"]["message"] == "killed on host-7 at /srv/secret"  # not mutated
    assert scored.report.tasks["code2text"].failure_code == "OOM"


def test_a_malformed_report_is_parsed_once_into_a_platform_failure(world: World) -> None:
    submission_id = new_submission(world)
    assert lifecycle.claim(world.db, world.workers[0], 30) is not None
    authentic = _authentic(world, submission_id, world.workers[0], WorkerResult(attempt=1, facts={}))
    scored = ScoredResult.of_report(authentic, {**_report(world), "aggregate": "no"})
    assert scored.report is None and scored.failure_code == "INFRA" and scored.message.startswith("malformed report from the worker: ")
    assert accept_result(world.db, world.state, world.key, scored) == Verdict(status=VerdictStatus.REQUEUED, state="queued")
    assert _moves(world, submission_id)[-1] == ("running", "queued")


def test_acceptance_and_a_rescore_record_through_record_signed_result(world: World, tmp_path: Path) -> None:
    host_log = _host_log(tmp_path / "log")
    submission_id = new_submission(world, track="sample")
    assert lifecycle.claim(world.db, world.workers[0], 30) is not None
    scored = ScoredResult.of_report(_authentic(world, submission_id, world.workers[0], WorkerResult(attempt=1, facts={})), _report(world))
    assert accept_result(world.db, world.state, world.key, scored, host_log=host_log) == Verdict(status=VerdictStatus.ACCEPTED, state="scored")
    accepted = state_of(world, submission_id)
    assert _moves(world, submission_id)[-1] == ("running", "scored") and _log_kinds(world, submission_id) == ["report"]

    # A re-scoring of the same runs: the same recording, with the current result replaced and the state left as it is.
    assert scored.report is not None
    grading = scored.authentic.grading
    judged = judge_report(scored.report, grading)
    assert judged.final is State.SCORED
    folder = world.state.result_dir(submission_id, 1) / "rescore-2"
    folder.mkdir()
    with world.db.session() as session:
        old = session.get(Result, accepted.result_id)
        stale = session.get(Submission, submission_id)  # read now, moved below: kept for the race at the end
        assert old is not None and stale is not None
        session.expunge_all()
    data = signed_report(scored.report, grading, rescored={"result": old.id, "attempt": 1})
    outcome = SignedResult(grading, judged.final, None, judged.reason, sign(world.key, folder, data, grading, judged.final), None, None)
    with world.db.session() as session:
        submission = session.get(Submission, submission_id)
        assert submission is not None
        new = record_signed_result(session, submission, outcome, host_log=host_log, rescore_of=old)
        new_id = new.id
    rescored = state_of(world, submission_id)
    assert (rescored.state, rescored.result_id, rescored.version) == (State.SCORED, new_id, accepted.version + 1)
    assert _moves(world, submission_id)[-1] == ("running", "scored")  # no transition: the state stayed
    assert _log_kinds(world, submission_id) == ["report", "rejudge", "report"]

    # A re-scoring that read the submission before another writer moved it stores nothing.
    with pytest.raises(LostRace), world.db.session() as session:
        session.add(stale)  # read at the version before the re-scoring above
        record_signed_result(session, stale, outcome, host_log=host_log, rescore_of=old)
    assert _results(world, submission_id) == 2 and state_of(world, submission_id).result_id == new_id


def test_replace_result_is_no_move_and_only_for_a_finished_result(world: World) -> None:
    submission_id = new_submission(world)
    with world.db.session() as session:
        submission = session.get(Submission, submission_id)
        assert submission is not None
        with pytest.raises(InternalError, match="queued submission has no result to replace"):
            lifecycle.replace_result(session, submission, result_id=1, public_score=None)
