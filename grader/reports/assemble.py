"""From grading results to report entries, and writing a report (signed or plain)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from grader.errors import ReportError
from grader.failures import FailureCode
from grader.files import atomic_write_bytes
from grader.metrics.policy import Evaluation
from grader.reports.model import report_json
from grader.reports.pieces import Digest, Failure, QueryCoverage, TaskEntry
from grader.reports.signing import write_signed_report
from grader.runs.digest import SCHEME, run_digest
from grader.runs.run import Run


def per_query_values(evaluation: Evaluation) -> dict[str, Any]:
    """The ``per_query`` entry of a task: its first (primary) measure's value for each evaluated query.

    ``grader compare`` resamples these; their exact mean is the task's score.
    """
    measure = evaluation.measures[0]
    column = evaluation.per_query.values[measure].tolist()
    return {"measure": str(measure), "values": dict(zip(evaluation.per_query.query_ids, column))}


def without_per_query(report: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``report`` without per-query values.

    Per-query values let a submitter probe hidden judgements one query at a
    time; a host hands participants this form while the judgements must stay
    hidden, and keeps the full report (which ``grader compare`` needs).
    """
    tasks = {name: {key: value for key, value in task.items() if key != "per_query"} for name, task in report["tasks"].items()}
    return {**report, "tasks": tasks}


def run_digest_entry(run: Run) -> dict[str, str]:
    """The ``run_digest`` of a scored task: the canonical digest of ``run`` (under the real ids) and its scheme."""
    return {"scheme": SCHEME, "sha256": run_digest(run)}


def scored_task(name: str, *, split: str, data_digest: str, evaluation: Evaluation, run: Run, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report entry of a task that was scored (a :class:`TaskEntry`, as JSON).

    It carries the per-query values of its primary measure and the digest of ``run``, the rankings
    ``evaluation`` scored (:mod:`grader.runs.digest`), so a re-grade can be compared with it.
    """
    return TaskEntry(
        name=name,
        split=split,
        data_digest=Digest(data_digest),
        queries=QueryCoverage(**evaluation.counts.as_dict()),
        measures=evaluation.means(),
        extra={"per_query": per_query_values(evaluation), "run_digest": run_digest_entry(run), **(extra or {})},
    ).as_json()


def failed_task(
    name: str, *, split: str, data_digest: str, code: FailureCode | str, message: str, judged: int, stderr: str | None = None
) -> dict[str, Any]:
    """The report entry of a task that failed with a failure ``code``.

    ``message`` and ``stderr`` (the container's last line, only for grades of a
    public split) are escaped and bounded again here, so whatever a caller passes,
    a report stays small enough for ``grader verify``.
    """
    return TaskEntry(
        name=name,
        split=split,
        data_digest=Digest(data_digest),
        queries=QueryCoverage.none_answered(judged),
        failure=Failure(FailureCode(code), message, stderr),
    ).as_json()


def write_report(report: dict[str, Any], out_path: str | os.PathLike[str], key_path: str | os.PathLike[str] | None) -> Path:
    """Write ``report``: a signed envelope when ``key_path`` is given, else the plain report.

    Returns the path written (the envelope when signed).
    """
    if key_path is not None:
        envelope_path, _ = write_signed_report(report, key_path, out_path)
        return envelope_path
    path = Path(out_path)
    try:
        atomic_write_bytes(path, report_json(report))
    except OSError as error:
        raise ReportError(f"{path}: cannot write: {error.strerror or error}") from None
    return path
