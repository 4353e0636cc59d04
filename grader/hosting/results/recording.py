"""Accepting a worker's result: exactly once, from the holder of the current lease, then signed by the host.

A posted result takes one typed path, each step a function here or in
:mod:`grader.hosting.results.run_scoring`: :func:`verify` checks the lease and a
remote worker's signature once and yields an :class:`AuthenticResult`;
:func:`~grader.hosting.results.run_scoring.score` scores its runs outside any
transaction and yields a :class:`ScoredResult` carrying the :class:`Report`, parsed
once; :func:`judge` decides the final state; :func:`signed_report` derives the dict
the host signs from the report (never mutated afterwards) and :func:`sign` signs it;
:func:`record_signed_result` stores it, the move and the log entry in one
transaction, for an acceptance (:func:`accept_result`) and a re-scoring
(:mod:`grader.hosting.results.rescore`) alike.

A result names its attempt. A result of a stale attempt (the lease expired and
the job was handed on, the host cancelled it, or it was already accepted) is
discarded and changes nothing: the lease is checked when the result is read and
again in the transaction that records it, since scoring takes minutes and the
lease may pass to another worker meanwhile. A platform failure (INFRA, data that
does not match the pinned digests, a malformed report) returns the job to the queue.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy.orm import Session

from grader.errors import InternalError, ReportError
from grader.files import atomic_write_text
from grader.hosting.clock import utcnow
from grader.hosting.config import QueueTiming
from grader.hosting.db.models import Pin, Result, ResultPart, State, Submission, Worker
from grader.hosting.db.session import Database
from grader.hosting.errors import LostRace
from grader.hosting.keyring.host_key import sign_and_store
from grader.hosting.keyring.worker_signing import verify_result
from grader.hosting.protocol.messages import Verdict, VerdictStatus, WorkerResult
from grader.hosting.queue.lifecycle import INFRA, PARTICIPANT_CODES, end_attempt, finish, holds_lease, replace_result, retry_or_error
from grader.hosting.states import Track
from grader.hosting.storage import PUBLIC_PART_DIR, StateDir
from grader.hosting.transparency.host_log import HostLog
from grader.hosting.transparency.log_events import log_outcome, log_rejudge, log_report
from grader.reports.model import Report

#: What a hidden-split task failure says in the signed report: the code only, never the container's stderr.
WITHHELD = "details withheld: the grade ran on the hidden split (logs stay with the host)"

#: Scores a signed hidden-split report's public/private parts: (the ResultPart columns, the public-part report to sign),
#: or None when its parts cannot be scored (see grader.hosting.leaderboard.parts).
PartScorer = Callable[[dict[str, Any]], tuple[dict[str, Any], dict[str, Any]] | None]


@dataclass(frozen=True)
class Grading:
    """Whose grade of which submission is being recorded, and what its report is judged against (read in one transaction)."""

    submission_id: str
    attempt: int
    worker_id: int
    worker_name: str
    #: a remote worker signs its results; the host's signature then also names the machine that graded
    remote: bool
    track: Track
    split: str
    kind: str
    content_digest: str
    pin_id: int
    #: the pin's per-task, per-split data digests a report must name (``Pin.digests["tasks"]``)
    pinned: Mapping[str, Any]
    #: SHA-256 of the training sketch kept at intake (a hidden-track upload's), None without one
    sketch_sha256: str | None = None

    @classmethod
    def of(cls, submission: Submission, attempt: int, worker: Worker, pin: Pin) -> Grading:
        """The grading of ``submission``'s ``attempt`` by ``worker``, judged against ``pin`` (rows read in one transaction)."""
        return cls(
            submission_id=submission.id,
            attempt=attempt,
            worker_id=worker.id,
            worker_name=worker.name,
            remote=not worker.local,
            track=Track(submission.track),
            split=submission.split,
            kind=submission.kind,
            content_digest=submission.content_digest,
            pin_id=pin.id,
            pinned=dict(pin.digests.get("tasks", {})),
            sketch_sha256=submission.sketch_sha256,
        )


@dataclass(frozen=True)
class AuthenticResult:
    """A posted result whose attempt held the lease and whose (remote) signature verified when it was read, once.

    Nothing of it is checked again but the lease, at the compare-and-set that records it.
    """

    grading: Grading
    posted: WorkerResult


@dataclass(frozen=True)
class ScoredResult:
    """An authentic result after the server scored its runs: the :class:`Report`, parsed once, or why there is none."""

    authentic: AuthenticResult
    #: the server's report of the worker's runs; None when none was scored (a whole-grade failure, or runs refused)
    report: Report | None
    #: the whole grade's failure code: the worker's, or INFRA when its runs could not be scored
    failure_code: str | None
    #: the worker's message, or why its runs could not be scored
    message: str

    @classmethod
    def unscored(cls, authentic: AuthenticResult) -> ScoredResult:
        """A result with no runs to score (a whole-grade failure, or no facts): as the worker posted it."""
        return cls(authentic, None, authentic.posted.failure_code, authentic.posted.message)

    @classmethod
    def runs_refused(cls, authentic: AuthenticResult, why: str) -> ScoredResult:
        """A platform failure: the attempt is retried (by another worker, or this one again)."""
        return cls(authentic, None, INFRA.value, f"the worker's runs were refused: {why}"[:20_000])

    @classmethod
    def of_report(cls, authentic: AuthenticResult, data: dict[str, Any]) -> ScoredResult:
        """The report the server scored, parsed here and nowhere else; a malformed one is a platform failure."""
        try:
            report = Report.from_json(data)
        except ReportError as error:
            return cls(authentic, None, INFRA.value, f"malformed report from the worker: {error}")
        return cls(authentic, report, authentic.posted.failure_code, authentic.posted.message)


@dataclass(frozen=True)
class Judgement:
    """How a grade ends: its final state (None: a platform failure, retried), its failure code, and the audit trail's reason."""

    final: State | None
    failure_code: str | None
    reason: str


@dataclass(frozen=True)
class SignedReport:
    """A report the host signed into its folder, with its public part's when there is one."""

    envelope: Path
    plain: Path
    aggregate: dict[str, Any]
    #: the ResultPart columns of a scored hidden-split grade; None otherwise
    part_columns: dict[str, Any] | None
    #: what the transparency log names: the report's envelope, then its public part's
    envelopes: tuple[Path, ...]
    #: the CPU seconds the grade cost (:func:`charged_cpu_s`), charged to the CPU-minute quota; None without a figure
    cpu_s: float | None = None


@dataclass(frozen=True)
class SignedResult:
    """What :func:`record_signed_result` stores: a judged grade with the report the host signed (None: a participant failure without one)."""

    grading: Grading
    final: State
    failure_code: str | None
    reason: str
    signed: SignedReport | None
    logs_path: str | None
    worker_signature: str | None


def verify(db: Database, worker_id: int, submission_id: str, posted: WorkerResult) -> AuthenticResult | Verdict:
    """Read a posted result once: ``stale`` unless its attempt holds the lease, ``refused`` unless a remote worker's registered key signed it.

    A remote worker's signature covers its facts, run digests, failure code and message, bound to the submission,
    the attempt and the upload's sha256 (:func:`grader.hosting.keyring.worker_signing.verify_result`).
    """
    with db.session() as session:
        submission = session.get(Submission, submission_id) if len(submission_id) <= 40 else None
        if submission is None or not holds_lease(submission, posted.attempt, worker_id):
            return Verdict(status=VerdictStatus.STALE)
        who = session.get(Worker, worker_id)
        if who is None or (not who.local and not _signed_by(who, submission, posted)):
            return Verdict(status=VerdictStatus.REFUSED)
        pin = session.get(Pin, submission.pin_id)
        if pin is None:  # a foreign key: the database keeps every pin a submission names
            raise InternalError(f"{submission_id}: its pin {submission.pin_id} is missing from the database")
        return AuthenticResult(Grading.of(submission, posted.attempt, who, pin), posted)


def _signed_by(worker: Worker, submission: Submission, posted: WorkerResult) -> bool:
    """Whether ``worker``'s registered key signed ``posted`` for this upload and attempt."""
    return worker.public_key is not None and verify_result(
        worker.public_key,
        posted.signature,
        submission_id=submission.id,
        attempt=posted.attempt,
        upload_sha256=submission.upload_sha256,
        facts=posted.facts,
        runs=posted.runs,
        failure_code=posted.failure_code,
        message=posted.message,
    )


def judge_report(report: Report, grading: Grading, *, blinding_key_id: str | None = None) -> Judgement:
    """A report's final state, failure code and reason; final None means a platform failure (retry)."""
    # The report names the key that blinded the ids its containers saw: it must be the competition's (docs/protocol.md).
    if blinding_key_id is not None and report.blinding_key_id != blinding_key_id:
        return Judgement(None, INFRA, "the report was staged under another blinding key than the competition's")
    # An ONNX report names the digest of the upload's content: it must be the upload this job holds.
    if grading.kind == "onnx" and report.subject_digest != grading.content_digest:
        return Judgement(None, INFRA, "the report is about another submission than the upload of this job")
    codes: list[str] = []
    for task in report.tasks.values():
        expected = grading.pinned.get(task.name, {}).get(grading.split)
        if expected is None or task.data_digest != expected:
            return Judgement(None, INFRA, f"task {task.name}: graded on data that does not match the pinned digest")
        if not task.scored and task.failure_code is not None:
            codes.append(task.failure_code)
    if INFRA in codes or any(code not in PARTICIPANT_CODES for code in codes):
        return Judgement(None, INFRA, "a task failed for a platform reason")
    if codes:
        return Judgement(State.FAILED, codes[0], "a task failed")
    return Judgement(State.SCORED, None, "all tasks scored")


def judge(scored: ScoredResult, *, blinding_key_id: str | None = None) -> Judgement:
    """How a scored result ends: its report judged (:func:`judge_report`), else the worker's participant failure, else a platform failure."""
    message = scored.message[:2000]
    if scored.report is None:
        if scored.failure_code in PARTICIPANT_CODES:
            return Judgement(State.FAILED, scored.failure_code, message)
        return Judgement(None, INFRA, message)
    judged = judge_report(scored.report, scored.authentic.grading, blinding_key_id=blinding_key_id)
    if judged.final is None:  # the worker's message says what it saw
        return Judgement(None, judged.failure_code, f"{judged.reason} {message}".strip())
    return judged


def signed_report(report: Report, grading: Grading, *, rescored: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The dict the host signs, derived from ``report`` (which is left as it is).

    A hidden grade's task failure messages (they may carry the container's stderr) are withheld; a re-scoring
    names the result it re-scores (``rescored``); a remote worker's grade names the machine that graded.
    """
    data = dict(report.data)
    if grading.track is Track.HIDDEN:
        data["tasks"] = {
            name: entry if entry["failure"] is None else {**entry, "failure": {**entry["failure"], "message": WITHHELD}}
            for name, entry in data["tasks"].items()
        }
    labels = dict(data.get("labels") or {})
    if rescored is not None:
        labels["rescored"] = dict(rescored)
    if grading.remote:
        labels["graded_by"] = {"worker": grading.worker_name, "attempt": grading.attempt}
    if rescored is not None or grading.remote:
        data["labels"] = labels
    return data


def sign(
    key: Ed25519PrivateKey, folder: Path, data: dict[str, Any], grading: Grading, final: State, *, parts: PartScorer | None = None
) -> SignedReport:
    """Sign ``data`` into ``folder``; a scored hidden grade's public part too (``parts`` given), into ``folder/public-part``.

    Called before the recording transaction: it holds no lock while the parts are scored and signed.
    """
    envelope, plain = sign_and_store(data, key, folder)
    envelopes = [envelope]
    scored = parts(data) if parts is not None and grading.track is Track.HIDDEN and final is State.SCORED else None
    part_columns = None
    if scored is not None:
        part_columns, public_report = scored
        (folder / PUBLIC_PART_DIR).mkdir()
        envelopes.append(sign_and_store(public_report, key, folder / PUBLIC_PART_DIR)[0])
    return SignedReport(envelope, plain, data["aggregate"], part_columns, tuple(envelopes), charged_cpu_s(data))


def charged_cpu_s(report: dict[str, Any]) -> float | None:
    """What a signed report charges the CPU-minute quota: its ``cost.total.cpu_s`` (the grading worker's word, checked
    by the scoring process: :mod:`grader.grading.worker_cost`); None without a cost block or a total."""
    cost = report.get("cost")
    total = cost.get("total") if isinstance(cost, dict) else None
    figure = total.get("cpu_s") if isinstance(total, dict) else None
    return float(figure) if isinstance(figure, (int, float)) and not isinstance(figure, bool) else None


def record_signed_result(
    session: Session,
    submission: Submission,
    outcome: SignedResult,
    *,
    host_log: HostLog | None = None,
    rescore_of: Result | None = None,
    lease_attempt: int | None = None,
) -> Result:
    """Store ``outcome`` as ``submission``'s current result, move it through the lifecycle, and log it, in ``session``.

    An acceptance (``rescore_of`` None) ends the attempt and finishes the submission (event FINISH, guarded by the
    version it was read in: the caller read it holding the lease). A re-scoring of ``rescore_of``'s runs replaces the
    current result and leaves the state as it is (:func:`grader.hosting.queue.lifecycle.replace_result`); the log
    gets a ``rejudge`` entry first. Raises :class:`LostRace` (the caller's transaction rolls back) when another writer
    moved the submission since it was read. ``lease_attempt``: the attempt that holds the lease, when not the result's
    own (a parked majority result accepted under a dissenter's re-run).
    """
    grading, signed = outcome.grading, outcome.signed
    aggregate = None if signed is None else signed.aggregate
    score = aggregate.get("score") if isinstance(aggregate, dict) else None
    public_score = score if isinstance(score, (int, float)) else None
    result = Result(
        submission_id=grading.submission_id,
        attempt=grading.attempt,
        pin_id=grading.pin_id,
        worker_id=grading.worker_id,
        state=outcome.final.value,
        failure_code=outcome.failure_code,
        aggregate=aggregate,
        envelope_path=None if signed is None else str(signed.envelope),
        report_path=None if signed is None else str(signed.plain),
        logs_path=outcome.logs_path,
        created_at=utcnow(),
        worker_signature=outcome.worker_signature,
        cpu_s=None if signed is None else signed.cpu_s,
    )
    session.add(result)
    session.flush()
    if signed is not None and signed.part_columns is not None:
        session.add(ResultPart(result_id=result.id, **signed.part_columns))
    if rescore_of is None:
        end_attempt(session, grading.submission_id, grading.attempt if lease_attempt is None else lease_attempt, "result")
        moved = finish(
            session,
            submission,
            outcome.final,
            actor=f"worker:{grading.worker_id}",
            reason=f"attempt {grading.attempt}: {outcome.reason}"[:2000],
            failure_code=outcome.failure_code,
            public_score=public_score,
            result_id=result.id,
        )
    else:
        moved = replace_result(session, submission, result_id=result.id, public_score=public_score)
    if not moved:
        raise LostRace(f"{grading.submission_id}: another writer moved it while its result was recorded; nothing stored")
    if host_log is not None:
        if rescore_of is not None:
            reason = f"rescore of the runs of attempt {rescore_of.attempt} (result {rescore_of.id})"
            log_rejudge(session, host_log, submission, attempt=rescore_of.attempt, reason=reason)
        envelopes = [] if signed is None else list(signed.envelopes)
        log_report(
            session, host_log, submission, attempt=grading.attempt, status=outcome.final.value, envelopes=envelopes, failure_code=outcome.failure_code
        )
    return result


def _write_logs(folder: Path, logs: Mapping[str, str]) -> Path | None:
    if not logs:
        return None
    target = folder / "logs"
    target.mkdir(parents=True, exist_ok=True)
    for index, (name, text) in enumerate(sorted(logs.items())):
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80] or f"log{index}"
        atomic_write_text(target / f"{safe}.log", text)
    return target


@contextmanager
def removed_on_error(folder: Path) -> Iterator[None]:
    """Remove ``folder`` when the block raises: its transaction was rolled back (on purpose, or the database failed), so no row names it."""
    try:
        yield
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def accept_result(
    db: Database,
    state: StateDir,
    key: Ed25519PrivateKey,
    scored: ScoredResult,
    *,
    parts: PartScorer | None = None,
    blinding_key_id: str | None = None,
    host_log: HostLog | None = None,
    lease: tuple[int, int] | None = None,
    retry: QueueTiming | None = None,
) -> Verdict:
    """Judge a scored result, sign its report, and record it if its attempt still holds the lease (see the module docstring).

    ``lease``: (attempt, worker id) whose lease guards the recording, when it is not the result's own: a replicated
    job's majority result, parked while a dissenter re-ran the job, is recorded under the re-run's lease.

    ``parts`` scores a scored hidden-split report's public and private parts: the scores are stored in the
    transaction that records the scored state (no board ever sees one without the other) and the
    public-part report is signed next to the result, so that reads only read.
    ``blinding_key_id``: the competition's; a report staged under another key is a platform failure.
    ``host_log``: the transparency log, which gets an entry for each report signed, or for a grade that ended without
    one (a participant failure without a report; ``error`` at the attempt limit), in the accepting transaction.
    ``retry``: how a platform failure of the attempt is retried (:func:`grader.hosting.queue.lifecycle.retry_or_error`).
    """
    grading, posted = scored.authentic.grading, scored.authentic.posted
    held = lease or (grading.attempt, grading.worker_id)
    judgement = judge(scored, blinding_key_id=blinding_key_id)
    folder = state.result_dir(grading.submission_id, grading.attempt)
    try:
        folder.mkdir(parents=True)
    except FileExistsError:
        # Left by a crash, or by an earlier post of this attempt: cleared only while the attempt holds the lease, so a
        # duplicate post arriving after the first was recorded never removes the accepted result's files.
        if not _lease_held(db, grading.submission_id, held):
            return Verdict(status=VerdictStatus.STALE)
        shutil.rmtree(folder)
        folder.mkdir()
    with removed_on_error(folder):
        logs_path = _write_logs(folder, posted.logs)
        signed = None
        if judgement.final is not None and scored.report is not None:
            signed = sign(key, folder, signed_report(scored.report, grading), grading, judgement.final, parts=parts)
        with db.session() as session:
            submission = session.get(Submission, grading.submission_id)
            if submission is None or not holds_lease(submission, *held):  # the lease passed on while it was scored
                shutil.rmtree(folder, ignore_errors=True)
                return Verdict(status=VerdictStatus.STALE)
            if judgement.final is None:
                return _retry(session, submission, grading, judgement, host_log, retry)
            outcome = SignedResult(
                grading,
                judgement.final,
                judgement.failure_code,
                judgement.reason,
                signed,
                None if logs_path is None else str(logs_path),
                posted.signature if grading.remote else None,
            )
            record_signed_result(session, submission, outcome, host_log=host_log, lease_attempt=held[0])
            return Verdict(status=VerdictStatus.ACCEPTED, state=judgement.final.value)


def _lease_held(db: Database, submission_id: str, lease: tuple[int, int]) -> bool:
    with db.session() as session:
        return holds_lease(session.get(Submission, submission_id), *lease)


def _retry(
    session: Session, submission: Submission, grading: Grading, judgement: Judgement, host_log: HostLog | None, retry: QueueTiming | None
) -> Verdict:
    """A platform failure of the attempt: back to the queue (or ``replicating``) after a backoff, or ``error`` once its
    retries are spent (``retry``: :func:`grader.hosting.queue.lifecycle.retry_or_error`), logged then."""
    reason = f"attempt {grading.attempt}: {judgement.failure_code}: {judgement.reason}"[:2000]
    outcome = retry_or_error(session, submission, actor=f"worker:{grading.worker_id}", reason=reason, retry=retry)
    if outcome is State.ERROR and host_log is not None:  # the attempt limit: a terminal outcome with no report
        log_outcome(session, host_log, submission, attempt=grading.attempt, status=outcome.value, failure_code=INFRA)
    status = VerdictStatus.REQUEUED if outcome in (State.QUEUED, State.REPLICATING) else VerdictStatus.ERROR
    return Verdict(status=status, state=outcome.value if outcome else None)
