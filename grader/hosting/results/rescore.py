"""``grader admin rejudge --rescore``: score a finished submission's stored runs again, running nothing.

A corrected qrels file (after ``grader admin repin``) or a new measure changes the
scores, not the rankings: the compact runs and the worker's facts kept under
``state/runs/<id>/<attempt>/`` (:mod:`grader.hosting.results.run_scoring`) are scored
again through the path acceptance takes (a memory-bounded scoring process,
:func:`grader.grading.scoring.report_from_runs`) against the data as it is now, judged
against the active pin, signed by the host, and stored as a new result row of the same
attempt by the acceptance's own :func:`~grader.hosting.results.recording.record_signed_result`
(earlier results stay, as a rejudge's do). The submission's state, attempts and lease are
untouched (:func:`grader.hosting.queue.lifecycle.replace_result`: no move, so no transition
row) and no worker or queue is involved. The transparency log gets a ``rejudge`` entry and
the new report's entries, in the transaction that stores the result.

A submission whose runs are gone (pruned by the retention policy, or graded before runs
were kept) is refused with a line naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import func, select

from grader import jsonio
from grader.errors import ReportError, TaskFailure
from grader.hosting.config import Competition
from grader.hosting.db.models import Result, State, Submission, Worker
from grader.hosting.db.session import Database
from grader.hosting.errors import HostingError, LostRace
from grader.hosting.keyring.files import KeyFiles
from grader.hosting.results import ranking_record
from grader.hosting.results.pins import active_pin, grading_splits
from grader.hosting.results.recording import (
    Grading,
    Judgement,
    PartScorer,
    SignedResult,
    judge_report,
    record_signed_result,
    removed_on_error,
    sign,
    signed_report,
)
from grader.hosting.results.run_scoring import scoring_job, training_sketch
from grader.hosting.storage import StateDir
from grader.hosting.transparency.host_log import HostLog
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

    #: the result's grade, judged now against the active pin
    grading: Grading
    #: the submission's version and state when read: the re-scored result replaces the current one only if both still hold
    version: int
    state: str
    result: Result


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
        return _Source(Grading.of(submission, result.attempt, worker, pin), submission.version, str(submission.state), result)


def _stored_runs(state: StateDir, source: _Source, tasks: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The worker's facts and the path of each task's run kept for the result's attempt; refused naming the submission when gone."""
    folder = state.runs_dir(source.grading.submission_id, source.result.attempt)
    gone = HostingError(
        f"{source.grading.submission_id}: its runs of attempt {source.result.attempt} are not kept (pruned by the retention policy, "
        "graded before the server kept runs, or failed without a run): it cannot be re-scored",
        hint="`grader admin rejudge ID` grades it again on a worker",
    )
    facts_path = folder / "facts.json"
    if not facts_path.is_file() or facts_path.is_symlink() or facts_path.stat().st_size > FACTS_MAX_BYTES:
        raise gone
    facts = jsonio.loads(facts_path.read_bytes())
    stated = facts.get("tasks") if isinstance(facts, dict) else None
    if not isinstance(stated, dict) or not set(stated) <= set(tasks):  # a task name becomes a path below: only the competition's
        raise HostingError(f"{source.grading.submission_id}: the kept facts of attempt {source.result.attempt} do not name the competition's tasks")
    runs: dict[str, str] = {}
    for task, fact in stated.items():
        if isinstance(fact, dict) and fact.get("failure") is None:
            path = folder / f"{task}.run"
            if not path.is_file() or path.is_symlink():
                raise gone
            runs[str(task)] = str(path)
    return facts, runs


def _scored_report(rescorer: Rescorer, source: _Source) -> Report:
    """The report of the stored runs scored now, in a scoring process, parsed once; refused when the runs or the data no longer fit."""
    from grader.grading.score_process import score_in_child  # the scoring pool: only a re-scoring pays for it

    _benchmark, tasks, _split, _sample = grading_splits(rescorer.competition)
    facts, runs = _stored_runs(rescorer.state, source, tasks)
    target = rescorer.competition.benchmark_target()
    then = ranking_record.recorded(rescorer.state.runs_dir(source.grading.submission_id, source.result.attempt))
    now = ranking_record.ranking_digests(target, tasks, source.grading.split)
    if then is None or any(then.get(task) != now[task] for task in runs):
        changed = "no record of the data they index" if then is None else "the corpus, the queries or the judged query set changed since"
        raise HostingError(
            f"{source.grading.submission_id}: its runs of attempt {source.result.attempt} index other data than there is now ({changed}): "
            "they cannot be re-scored (only a change of the judgements' grades can be)",
            hint="`grader admin rejudge ID` grades it again on a worker",
        )
    try:
        key_file = KeyFiles(rescorer.state.keys).blinding_secret  # the runs index the workers' pseudonymous copy
        job = scoring_job(
            target,
            source.grading.split,
            tasks,
            facts,
            runs,
            blinding_key_file=key_file if key_file.is_file() else None,
            kept_documents=rescorer.state.blinded_documents,
            training_sketch=training_sketch(rescorer.state, source.grading),
        )
        return Report.from_json(score_in_child(job))
    except (TaskFailure, ReportError) as error:
        why = error.detail if isinstance(error, TaskFailure) else str(error)
        raise HostingError(f"{source.grading.submission_id}: its stored runs cannot be scored: {why}") from None


def rescore(rescorer: Rescorer, submission_id: str) -> tuple[int, float | None]:
    """Re-score ``submission_id``'s stored runs; (the new result's id, its aggregate score). :class:`HostingError` naming it when refused."""
    source = _source(rescorer, submission_id)
    report = _scored_report(rescorer, source)
    judged = judge_report(report, source.grading, blinding_key_id=rescorer.blinding_key_id)
    if judged.final is None or judged.final.value != source.state:
        raise HostingError(
            f"{submission_id}: the re-scored report does not stand: "
            f"{judged.reason if judged.final is None else f'it would end {judged.final.value}, not {source.state}'}",
            hint="after changing the benchmark data, `grader admin repin` first",
        )
    final = judged.final
    data = signed_report(report, source.grading, rescored={"result": source.result.id, "attempt": source.result.attempt})
    return _store(rescorer, source, data, judged, final)


def _store(rescorer: Rescorer, source: _Source, data: dict[str, Any], judged: Judgement, final: State) -> tuple[int, float | None]:
    """Sign ``data`` into a folder of its own, then record it as the submission's current result (:func:`record_signed_result`,
    as an acceptance does) if the submission is as it was read; ``final``: ``judged``'s, which the caller checked."""
    grading, old = source.grading, source.result
    with rescorer.db.session() as session:
        count = session.scalar(select(func.count()).select_from(Result).where(Result.submission_id == grading.submission_id)) or 0
    folder = rescorer.state.result_dir(grading.submission_id, old.attempt) / f"rescore-{count + 1}"
    try:
        folder.mkdir(parents=True)
    except FileExistsError:
        raise HostingError(f"{grading.submission_id}: another re-scoring is under way") from None
    with removed_on_error(folder):
        signed = sign(rescorer.key, folder, data, grading, final, parts=rescorer.parts)
        outcome = SignedResult(
            grading,
            final,
            judged.failure_code,
            judged.reason,
            signed,
            old.logs_path,
            old.worker_signature,  # the worker signed the runs this report scores
        )
        try:
            with rescorer.db.session() as session:
                submission = session.get(Submission, grading.submission_id)
                if submission is None or (submission.version, submission.state) != (source.version, source.state):
                    raise LostRace(grading.submission_id)
                result = record_signed_result(session, submission, outcome, host_log=rescorer.host_log, rescore_of=old)
                return result.id, submission.public_score
        except LostRace:
            raise HostingError(f"{grading.submission_id}: changed while it was re-scored (rejudged or re-scored meanwhile); nothing stored") from None
