"""The report of ``grader score``: one run file scored against one qrels file."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from grader.files import sha256_file
from grader.metrics.policy import Evaluation
from grader.reports.assemble import scored_task, write_report
from grader.reports.model import build_report
from grader.runs.run import Run


def write_score_report(
    evaluation: Evaluation,
    *,
    run: Run,
    qrels_path: Path,
    run_digest: str,
    run_name: str,
    started_at: datetime,
    report_path: Path,
    key_path: Path | None,
) -> Path:
    """Build the report of a ``grader score`` call and write it (signed with ``key_path`` if given).

    The "benchmark" is the qrels file itself: its name is the file name, its one
    task is named after it, and the task's data digest is the file's sha256. The
    primary measure is the first measure scored.
    """
    primary = str(evaluation.measures[0])
    task_name = qrels_path.name
    task = scored_task(task_name, split="qrels", data_digest=sha256_file(qrels_path), evaluation=evaluation, run=run)
    report = build_report(
        benchmark={"name": "qrels-file", "version": "1", "primary_measure": primary},
        subject={"kind": "run-file", "name": run_name, "digest": {"sha256": run_digest}},
        tasks=[task],
        aggregate={"measure": primary, "score": task["measures"][primary], "complete": True, "groups": {}},
        policy=evaluation.policy.value,
        started_at=started_at,
        finished_at=datetime.now(UTC),
    )
    return write_report(report, report_path, key_path)
