"""A readable table of a report's per-task scores and aggregate (what ``grader run`` prints)."""

from __future__ import annotations

from typing import Any

from grader.reports.model import Report
from grader.text import MAX_STDERR_LINE, bounded

#: Measures shown beside the primary one when the report has them.
_SHOWN = ("NDCG@10", "MAP@10", "Recall@100", "MRR@10")


def format_report_table(report: dict[str, Any]) -> str:
    """Per task: status, the primary and a few other measures, truncation; then groups and the aggregate."""
    typed = Report.from_json(report)
    aggregate = typed.aggregate
    primary = aggregate.measure
    columns = [primary] + [m for m in _SHOWN if m != primary and any(m in t.measures for t in typed.tasks.values())]
    width = max([len("task")] + [len(name) for name in typed.tasks])
    header = f"{'task':<{width}}  {'status':<6}  " + "  ".join(f"{c:>10}" for c in columns) + "  truncated"
    lines = [header, "-" * len(header)]
    for name, task in typed.tasks.items():
        if task.failure is None:
            values = "  ".join(f"{task.measures[c]:>10.4f}" if c in task.measures else f"{'-':>10}" for c in columns)
            encoding = task.encoding
            truncated = (
                f"{100 * encoding['corpus']['truncated_share']:.1f}% docs, {100 * encoding['queries']['truncated_share']:.1f}% queries"
                if encoding
                else ""
            )
            lines.append(f"{name:<{width}}  {'scored':<6}  {values}  {truncated}")
        else:
            failure = task.failure
            # Escaped and bounded again: a report read back may predate these bounds.
            stderr = f"; last stderr line: {bounded(failure['stderr'], MAX_STDERR_LINE)}" if failure.get("stderr") else ""
            lines.append(f"{name:<{width}}  {'FAILED':<6}  {failure['code']}: {bounded(failure['message'])}{stderr}")
    for group, value in aggregate.groups.items():
        shown = "n/a" if value is None else f"{value:.4f}"
        lines.append(f"group {group}: {primary} = {shown}")
    shown = "n/a (a task failed)" if aggregate.score is None else f"{aggregate.score:.4f}"
    note = "" if aggregate.complete else "  [partial: not every task of the benchmark graded and scored]"
    lines.append(f"{typed.benchmark['name']} {primary} ({typed.policy} policy) = {shown}{note}")
    return "\n".join(lines) + "\n"
