"""Accepting a worker's result: exactly once, from the holder of the current lease, then signed by the host.

A result names its attempt. A result of a stale attempt (the lease expired and
the job was handed on, the host cancelled it, or it was already accepted) is
discarded and changes nothing. A platform failure (INFRA, data that does not
match the pinned digests, a malformed report) returns the job to the queue.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.errors import ReportError
from grader.files import atomic_write_text
from grader.hosting.clock import utcnow
from grader.hosting.db.models import Pin, Result, ResultPart, State, Submission, Worker
from grader.hosting.db.session import Database
from grader.hosting.keyring.host_key import sign_and_store
from grader.hosting.keyring.worker_signing import verify_result
from grader.hosting.queue.lifecycle import INFRA, PARTICIPANT_CODES, end_attempt, finish, holds_lease, retry_or_error
from grader.hosting.storage import StateDir
from grader.hosting.transparency.host_log import HostLog
from grader.hosting.transparency.log_events import log_outcome, log_report
from grader.reports.model import Report

#: What a hidden-split task failure says in the signed report: the code only, never the container's stderr.
WITHHELD = "details withheld: the grade ran on the hidden split (logs stay with the host)"


@dataclass(frozen=True)
class Verdict:
    """What happened to a posted result: ``accepted`` (with the new state), ``requeued``, ``error``, ``stale``, ``refused`` (bad signature),
    or ``replicated`` (grader.hosting.services.replication)."""

    status: str
    state: str | None = None


def _scrub_hidden(report: dict[str, Any]) -> dict[str, Any]:
    """Replace every task failure message (it may carry the container's stderr) by a fixed text."""
    for entry in report["tasks"].values():
        if entry["failure"] is not None:
            entry["failure"]["message"] = WITHHELD
    return report


def _classify(
    report: Report, pin: Pin, split: str, *, kind: str, content_digest: str, blinding_key_id: str | None = None
) -> tuple[State | None, str | None, str]:
    """(final state, failure code, reason); state None means a platform failure (retry)."""
    # The report names the key that blinded the ids its containers saw: it must be the competition's (docs/protocol.md).
    if blinding_key_id is not None and report.blinding_key_id != blinding_key_id:
        return None, INFRA, "the report was staged under another blinding key than the competition's"
    # An ONNX report names the digest of the upload's content: it must be the upload this job holds.
    if kind == "onnx" and report.subject_digest != content_digest:
        return None, INFRA, "the report is about another submission than the upload of this job"
    codes: list[str] = []
    pinned = pin.digests.get("tasks", {})
    for task in report.tasks.values():
        expected = pinned.get(task.name, {}).get(split)
        if expected is None or task.data_digest != expected:
            return None, INFRA, f"task {task.name}: graded on data that does not match the pinned digest"
        if not task.scored and task.failure_code is not None:
            codes.append(task.failure_code)
    if INFRA in codes or any(code not in PARTICIPANT_CODES for code in codes):
        return None, INFRA, "a task failed for a platform reason"
    if codes:
        return State.FAILED, codes[0], "a task failed"
    return State.SCORED, None, "all tasks scored"


def _write_logs(folder: Path, logs: dict[str, str]) -> Path | None:
    if not logs:
        return None
    target = folder / "logs"
    target.mkdir(parents=True, exist_ok=True)
    for index, (name, text) in enumerate(sorted(logs.items())):
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80] or f"log{index}"
        atomic_write_text(target / f"{safe}.log", text)
    return target


@contextmanager
def _removed_on_error(folder: Path) -> Iterator[None]:
    """Remove ``folder`` when the block raises: its transaction was rolled back (on purpose, or the database failed), so no row names it."""
    try:
        yield
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


#: Scores a signed hidden-split report's public/private parts: (the ResultPart columns, the public-part report to sign),
#: or None when its parts cannot be scored (see grader.hosting.leaderboard.parts).
PartScorer = Callable[[dict[str, Any]], tuple[dict[str, Any], dict[str, Any]] | None]


def accept_result(
    db: Database,
    state: StateDir,
    key: Ed25519PrivateKey,
    *,
    submission_id: str,
    attempt: int,
    worker_id: int,
    payload: dict[str, Any],
    parts: PartScorer | None = None,
    blinding_key_id: str | None = None,
    host_log: HostLog | None = None,
) -> Verdict:
    """Judge and record one posted result (see the module docstring).

    ``parts`` scores a scored hidden-split report's public and private parts: the scores are stored in the
    transaction that records the scored state (no board ever sees one without the other) and the
    public-part report is signed next to the result, so that reads only read.
    ``blinding_key_id``: the competition's; a report staged under another key is a platform failure.
    ``host_log``: the transparency log, which gets an entry for each report signed, or for a grade that ended without
    one (a participant failure without a report; ``error`` at the attempt limit), in the accepting transaction.
    """
    with db.session() as session:
        submission = session.get(Submission, submission_id)
        if not holds_lease(submission, attempt, worker_id):
            return Verdict("stale")
        assert submission is not None
        pin = session.get(Pin, submission.pin_id)
        assert pin is not None
        track, split, kind, content_digest = submission.track, submission.split, submission.kind, submission.content_digest
        who = session.get(Worker, worker_id)
        assert who is not None
        remote = not who.local
        signature = payload.get("signature")
        # A remote worker's result counts only if its registered key signed it, bound to this upload and attempt.
        if remote and (
            who.public_key is None
            or not verify_result(
                who.public_key,
                signature,
                submission_id=submission_id,
                attempt=attempt,
                upload_sha256=submission.upload_sha256,
                facts=payload.get("facts"),
                runs=payload.get("runs"),
                failure_code=payload.get("failure_code"),
                message=str(payload.get("message", "")),
            )
        ):
            return Verdict("refused")
        worker_name = who.name
    report = payload.get("report")
    code = payload.get("failure_code")
    folder = state.result_dir(submission_id, attempt)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    logs_path = _write_logs(folder, {str(k): str(v) for k, v in (payload.get("logs") or {}).items()})
    final: State | None
    reason = str(payload.get("message", ""))[:2000]
    envelope = plain = None
    aggregate: dict[str, Any] | None = None
    part_columns: dict[str, Any] | None = None
    signed: list[Path] = []
    if isinstance(report, dict):
        try:
            final, code, why = _classify(
                Report.from_json(report), pin, split, kind=kind, content_digest=content_digest, blinding_key_id=blinding_key_id
            )
            if final is not None:
                if track == "hidden":
                    report = _scrub_hidden(report)
                if remote:  # the host's signature then also names the machine that graded
                    report = {**report, "labels": {**(report.get("labels") or {}), "graded_by": {"worker": worker_name, "attempt": attempt}}}
                envelope, plain = sign_and_store(report, key, folder)
                signed.append(envelope)
                aggregate = report["aggregate"]
                scored = parts(report) if parts is not None and track == "hidden" and final is State.SCORED else None
                if scored is not None:  # before the transaction: it holds no lock while the parts are scored and signed
                    part_columns, public_report = scored
                    public_folder = state.public_part_dir(submission_id, attempt)
                    public_folder.mkdir()
                    signed.append(sign_and_store(public_report, key, public_folder)[0])
            reason = why if final is not None else f"{why} {reason}".strip()
        except ReportError as error:
            final, code, reason = None, INFRA, f"malformed report from the worker: {error}"
    elif code in PARTICIPANT_CODES:
        final = State.FAILED
    else:
        final, code = None, INFRA
    with _removed_on_error(folder), db.session() as session:
        submission = session.get(Submission, submission_id)
        if not holds_lease(submission, attempt, worker_id):
            shutil.rmtree(folder, ignore_errors=True)
            return Verdict("stale")
        assert submission is not None
        if final is None:
            outcome = retry_or_error(session, submission, actor=f"worker:{worker_id}", reason=f"attempt {attempt}: {code}: {reason}"[:2000])
            if outcome is State.ERROR and host_log is not None:  # the attempt limit: a terminal outcome with no report
                log_outcome(session, host_log, submission, attempt=attempt, status=outcome.value, failure_code=INFRA)
            return Verdict("requeued" if outcome in (State.QUEUED, State.REPLICATING) else "error", outcome.value if outcome else None)
        score = aggregate.get("score") if isinstance(aggregate, dict) else None
        result = Result(
            submission_id=submission_id,
            attempt=attempt,
            pin_id=submission.pin_id,
            worker_id=worker_id,
            state=final.value,
            failure_code=code,
            aggregate=aggregate,
            envelope_path=None if envelope is None else str(envelope),
            report_path=None if plain is None else str(plain),
            logs_path=None if logs_path is None else str(logs_path),
            created_at=utcnow(),
            worker_signature=signature if remote else None,
        )
        session.add(result)
        session.flush()
        if part_columns is not None:
            session.add(ResultPart(result_id=result.id, **part_columns))
        end_attempt(session, submission_id, attempt, "result")
        if not finish(
            session,
            submission,
            final,
            actor=f"worker:{worker_id}",
            reason=f"attempt {attempt}: {reason}"[:2000],
            failure_code=code,
            public_score=score if isinstance(score, (int, float)) else None,
            result_id=result.id,
        ):
            raise RuntimeError("lost a race while holding the lease")  # rolled back; the worker retries and is told stale
        if host_log is not None:
            log_report(session, host_log, submission, attempt=attempt, status=final.value, envelopes=signed, failure_code=code)
        return Verdict("accepted", final.value)
