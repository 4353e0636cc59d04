"""The lint report: one JSON document (schema ``grader/schemas/lint.schema.json``) and its table."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from grader import __version__
from grader.data.benchmark import Benchmark
from grader.data.task import Task
from grader.errors import ReportError
from grader.files import listing_digest
from grader.integrity.duplicates import DuplicateFinder
from grader.integrity.lint import TOUCHES, LintSettings, TaskLint, lint_task
from grader.integrity.minhash import CODE_SHINGLE_SIZE, TEXT_SHINGLE_SIZE
from grader.integrity.normalise import CODE_SYMBOL_SHARE
from grader.schemas import first_error, json_pointer

SCHEMA_VERSION = 1
KIND = "grader-lint-report"


def task_entry(result: TaskLint, data_digest: str) -> dict[str, Any]:
    """One task of the report."""
    findings = {}
    for name in TOUCHES:
        finding = result.findings[name]
        findings[name] = {
            "count": finding.count,
            "test_queries": len(finding.touched),
            "share": len(finding.touched) / result.test_queries if result.test_queries else None,
            "examples": finding.examples,
        }
    return {
        "task": result.task,
        "data_digest": data_digest,
        "documents": result.documents,
        "queries": result.queries,
        "test_queries": result.test_queries,
        "candidate_pairs": result.candidate_pairs,
        "checked_pairs": result.checked_pairs,
        "findings": findings,
        "clusters": result.clusters,
    }


def build_report(
    benchmark: str, version: str, settings: LintSettings, tasks: Sequence[dict[str, Any]], *, created_at: datetime | None = None
) -> dict[str, Any]:
    """The report of a lint of ``tasks`` (entries from :func:`task_entry`), validated."""
    probe = DuplicateFinder(settings.threshold)
    report = {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "grader_version": __version__,
        "created_at": (created_at or datetime.now(UTC)).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "benchmark": {"name": benchmark, "version": version},
        "subject": {"name": benchmark, "digest": {"sha256": listing_digest((task["task"], task["data_digest"]) for task in tasks)}},
        "split": settings.split,
        "settings": {
            "threshold": settings.threshold,
            "shingle_size": {"code": CODE_SHINGLE_SIZE, "text": TEXT_SHINGLE_SIZE},
            "permutations": probe.bands * probe.rows,
            "bands": probe.bands,
            "rows": probe.rows,
            "code_symbol_share": CODE_SYMBOL_SHARE,
            "max_chars": settings.max_chars,
            "examples": settings.examples,
        },
        "tasks": list(tasks),
    }
    error = first_error("lint", report)
    if error is not None:
        raise ReportError(f"lint report does not match its schema at {json_pointer(error)}: {error.message}")
    return report


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def format_table(report: dict[str, Any]) -> str:
    """One row per task and finding: items, test queries touched and their share."""
    header = ("task", "finding", "items", "test queries", "share")
    rows = [header]
    for task in report["tasks"]:
        for name, finding in task["findings"].items():
            rows.append((task["task"], name, str(finding["count"]), f"{finding['test_queries']}/{task['test_queries']}", _share(finding["share"])))
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) if column < 2 else cell.rjust(width) for column, (cell, width) in enumerate(zip(row, widths))) for row in rows
    ]
    settings = report["settings"]
    lines.append(
        f"near duplicates: Jaccard >= {settings['threshold']} on shingles of {settings['shingle_size']['code']} (code) "
        f"or {settings['shingle_size']['text']} (text) tokens; "
        f"MinHash {settings['permutations']} permutations, LSH {settings['bands']} bands x {settings['rows']} rows; "
        f"oversized: > {settings['max_chars']} characters; split: {report['split']}"
    )
    return "\n".join(line.rstrip() for line in lines) + "\n"


def lint_data_digest(task: Task) -> str:
    """The digest a lint report names a task's data by: the listing of every file of the task (not one split's)."""
    return listing_digest(sorted(task.file_digests.items()))


def lint_benchmark(
    benchmark: Benchmark, tasks: Sequence[str] | None, settings: LintSettings, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Lint the selected tasks of ``benchmark`` (default: all) and return the validated report."""
    entries = []
    for name in benchmark.select(tasks):
        if progress is not None:
            progress(name)
        task = benchmark.task(name)
        entries.append(task_entry(lint_task(task, settings), lint_data_digest(task)))
    return build_report(benchmark.name, benchmark.spec.version, settings, entries)
