"""``grader admin rejudge --rescore``: score a finished submission's stored runs again, running nothing.

A corrected qrels file (after ``grader admin repin``) or a new measure changes the
scores, not the rankings: the compact runs and the worker's facts kept under
``state/runs/<id>/<attempt>/`` (:mod:`grader.hosting.results.run_scoring`) are scored
again through the path acceptance takes (a memory-bounded scoring process,
:func:`grader.grading.scoring.report_from_runs`) against the data as it is now, judged
against the active pin, signed by the host, and stored as a new result row of the same
attempt (earlier results stay, as a rejudge's do). The submission's state, attempts and
lease are untouched and no worker or queue is involved. The transparency log gets a
``rejudge`` entry and the new report's entries, in the transaction that stores the result.

A submission whose runs are gone (pruned by the retention policy, or graded before runs
were kept) is refused with a line naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import func, select, update

from grader import jsonio
from grader.errors import ReportError, TaskFailure
from grader.hosting.clock import utcnow
from grader.hosting.config import Competition
from grader.hosting.db.models import Pin, Result, ResultPart, State, Submission, Worker
from grader.hosting.db.session import Database
from grader.hosting.errors import HostingError
from grader.hosting.keyring.files import KeyFiles
from grader.hosting.keyring.host_key import sign_and_store
from grader.hosting.results import ranking_record
from grader.hosting.results.pins import active_pin, grading_splits
from grader.hosting.results.recording import PartScorer, _classify, _removed_on_error, _scrub_hidden
from grader.hosting.results.run_scoring import scoring_job
from grader.hosting.storage import PUBLIC_PART_DIR, StateDir
from grader.hosting.transparency.host_log import HostLog
from grader.hosting.transparency.log_events import log_rejudge, log_report
from grader.reports.model import Report

#: The largest facts file read back (the server wrote it from a body bounded far below this).
FACTS_MAX_BYTES = 8 << 20


@dataclass(frozen=True)
class Rescorer:
    """What a re-scoring needs: the database, state folder, host key, competition, part scorer, blinding key id and log."""

    db: Database
    state: StateDir
    key: Ed25519PrivateKey
    competition: Competition
    parts: PartScorer | None = None
    blinding_key_id: str | None = None
    host_log: HostLog | None = None


@dataclass(frozen=True)
class _Source:
    """The finished result whose stored runs are re-scored, read in one short transaction."""

    submission_id: str
    version: int
    state: str
    track: str
    split: str
    kind: str
    content_digest: str
    result: Result
    pin: Pin
    remote: bool
    worker_name: str


def rescorable(db: Database) -> list[str]:
    """Every scored or failed submission with a result, oldest first (what ``--rescore --all`` takes)."""
    with db.session() as session:
        query = (
            select(Submission.id)
            .where(Submission.state.in_([State.SCORED.value, State.FAILED.value]), Submission.result_id.is_not(None))
            .order_by(Submission.uploaded_at, Submission.id)
        )
        return list(session.scalars(query).all())


def _source(rescorer: Rescorer, submission_id: str) -> _Source:
    with rescorer.db.session() as session:
        submission = session.get(Submission, submission_id) if len(submission_id) <= 40 else None
        if submission is None:
            raise HostingError(f"{submission_id}: no such submission")
        if submission.state not in (State.SCORED, State.FAILED) or submission.result_id is None:
            raise HostingError(f"{submission_id}: not finished with a result (state {submission.state}): nothing to re-score")
        result = session.get(Result, submission.result_id)
        pin = active_pin(session, rescorer.competition)
        worker = None if result is None else session.get(Worker, result.worker_id)
        if result is None or pin is None or worker is None:
            raise HostingError(f"{submission_id}: its result, the active pin or the worker is missing from the database")
        session.expunge(result)
        session.expunge(pin)
        return _Source(
            submission_id,
            submission.version,
            str(submission.state),
            str(submission.track),
            submission.split,
            submission.kind,
            submission.content_digest,
            result,
            pin,
            not worker.local,
            worker.name,
        )


def _stored_runs(state: StateDir, source: _Source, tasks: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The worker's facts and the path of each task's run kept for the result's attempt; refused naming the submission when gone."""
    folder = state.runs_dir(source.submission_id, source.result.attempt)
    gone = HostingError(
        f"{source.submission_id}: its runs of attempt {source.result.attempt} are not kept (pruned by the retention policy, "
        "graded before the server kept runs, or failed without a run): it cannot be re-scored",
        hint="`grader admin rejudge ID` grades it again on a worker",
    )
    facts_path = folder / "facts.json"
    if not facts_path.is_file() or facts_path.is_symlink() or facts_path.stat().st_size > FACTS_MAX_BYTES:
        raise gone
    facts = jsonio.loads(facts_path.read_bytes())
    stated = facts.get("tasks") if isinstance(facts, dict) else None
    if not isinstance(stated, dict) or not set(stated) <= set(tasks):  # a task name becomes a path below: only the competition's
        raise HostingError(f"{source.submission_id}: the kept facts of attempt {source.result.attempt} do not name the competition's tasks")
    runs: dict[str, str] = {}
    for task, fact in stated.items():
        if isinstance(fact, dict) and fact.get("failure") is None:
            path = folder / f"{task}.run"
            if not path.is_file() or path.is_symlink():
                raise gone
            runs[str(task)] = str(path)
    return facts, runs


def _scored_report(rescorer: Rescorer, source: _Source) -> dict[str, Any]:
    """The report of the stored runs scored now, in a scoring process; refused when the runs or the data no longer fit."""
    from grader.grading.score_process import score_in_child  # the scoring pool: only a re-scoring pays for it

    _benchmark, tasks, _split, _sample = grading_splits(rescorer.competition)
    facts, runs = _stored_runs(rescorer.state, source, tasks)
    target = rescorer.competition.benchmark_target()
    then = ranking_record.recorded(rescorer.state.runs_dir(source.submission_id, source.result.attempt))
    now = ranking_record.ranking_digests(target, tasks, source.split)
    if then is None or any(then.get(task) != now[task] for task in runs):
        changed = "no record of the data they index" if then is None else "the corpus, the queries or the judged query set changed since"
        raise HostingError(
            f"{source.submission_id}: its runs of attempt {source.result.attempt} index other data than there is now ({changed}): "
            "they cannot be re-scored (only a change of the judgements' grades can be)",
            hint="`grader admin rejudge ID` grades it again on a worker",
        )
    try:
        key_file = KeyFiles(rescorer.state.keys).blinding_secret  # the runs index the workers' pseudonymous copy
        job = scoring_job(target, source.split, tasks, facts, runs, blinding_key_file=key_file if key_file.is_file() else None)
        return score_in_child(job)
    except (TaskFailure, ReportError) as error:
        why = error.detail if isinstance(error, TaskFailure) else str(error)
        raise HostingError(f"{source.submission_id}: its stored runs cannot be scored: {why}") from None


def rescore(rescorer: Rescorer, submission_id: str) -> tuple[int, float | None]:
    """Re-score ``submission_id``'s stored runs; (the new result's id, its aggregate score). :class:`HostingError` naming it when refused."""
    source = _source(rescorer, submission_id)
    report = _scored_report(rescorer, source)
    final, code, why = _classify(
        Report.from_json(report),
        source.pin,
        source.split,
        kind=source.kind,
        content_digest=source.content_digest,
        blinding_key_id=rescorer.blinding_key_id,
    )
    if final is None or final.value != source.state:
        raise HostingError(
            f"{submission_id}: the re-scored report does not stand: {why if final is None else f'it would end {final.value}, not {source.state}'}",
            hint="after changing the benchmark data, `grader admin repin` first",
        )
    if source.track == "hidden":
        report = _scrub_hidden(report)
    rescored = {"result": source.result.id, "attempt": source.result.attempt}
    labels = {**(report.get("labels") or {}), "rescored": rescored}
    if source.remote:
        labels["graded_by"] = {"worker": source.worker_name, "attempt": source.result.attempt}
    report = {**report, "labels": labels}
    return _store(rescorer, source, report, final, code)


def _store(rescorer: Rescorer, source: _Source, report: dict[str, Any], final: State, code: str | None) -> tuple[int, float | None]:
    """Sign ``report`` into a folder of its own, then store it as the submission's current result, logged; guarded by the row's version."""
    with rescorer.db.session() as session:
        count = session.scalar(select(func.count()).select_from(Result).where(Result.submission_id == source.submission_id)) or 0
    folder = rescorer.state.result_dir(source.submission_id, source.result.attempt) / f"rescore-{count + 1}"
    try:
        folder.mkdir(parents=True)
    except FileExistsError:
        raise HostingError(f"{source.submission_id}: another re-scoring is under way") from None
    with _removed_on_error(folder):
        envelope, plain = sign_and_store(report, rescorer.key, folder)
        signed: list[Path] = [envelope]
        scored = rescorer.parts(report) if rescorer.parts is not None and source.track == "hidden" and final is State.SCORED else None
        if scored is not None:
            (folder / PUBLIC_PART_DIR).mkdir()
            signed.append(sign_and_store(scored[1], rescorer.key, folder / PUBLIC_PART_DIR)[0])
        aggregate = report["aggregate"]
        score = aggregate.get("score") if isinstance(aggregate, dict) else None
        with rescorer.db.session() as session:
            old = source.result
            result = Result(
                submission_id=source.submission_id,
                attempt=old.attempt,
                pin_id=source.pin.id,
                worker_id=old.worker_id,
                state=final.value,
                failure_code=code,
                aggregate=aggregate,
                envelope_path=str(envelope),
                report_path=str(plain),
                logs_path=old.logs_path,
                created_at=utcnow(),
                worker_signature=old.worker_signature,  # the worker signed the runs this report scores
            )
            session.add(result)
            session.flush()
            if scored is not None:
                session.add(ResultPart(result_id=result.id, **scored[0]))
            moved = session.execute(
                update(Submission)
                .where(Submission.id == source.submission_id, Submission.version == source.version, Submission.state == source.state)
                .values(
                    result_id=result.id,
                    public_score=score if isinstance(score, (int, float)) else None,
                    version=Submission.version + 1,
                    updated_at=utcnow(),
                )
                .execution_options(synchronize_session=False)
            )
            if moved.rowcount != 1:  # type: ignore[attr-defined]
                raise HostingError(f"{source.submission_id}: changed while it was re-scored (rejudged or re-scored meanwhile); nothing stored")
            submission = session.get(Submission, source.submission_id)
            if rescorer.host_log is not None and submission is not None:
                reason = f"rescore of the runs of attempt {old.attempt} (result {old.id})"
                log_rejudge(session, rescorer.host_log, submission, attempt=old.attempt, reason=reason)
                log_report(session, rescorer.host_log, submission, attempt=old.attempt, status=final.value, envelopes=signed)
            return result.id, score if isinstance(score, (int, float)) else None
