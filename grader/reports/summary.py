"""The human-readable summary ``grader verify`` prints for a verified report."""

from __future__ import annotations

from typing import Any

from grader.reports.model import Report
from grader.reports.verify import VerifiedReport
from grader.text import MAX_ERROR_LINE, bounded


def _clean(text: Any) -> str:
    # Subject names and messages come from submitters; keep escapes and newlines off the terminal, and lines short.
    return bounded(str(text), MAX_ERROR_LINE)


def _number(value: Any) -> str:
    # repr keeps every digit: the summary must not show a rounded score.
    return "n/a" if value is None else repr(value)


def _part(report: Report) -> str:
    """Which queries the scores cover: a part of the hidden split (a competition's report before the end), or all."""
    part = report.labels.get("part")
    splits = ", ".join(sorted({_clean(task.split) for task in report.tasks.values()}))
    if not isinstance(part, dict):
        return f"part: all queries of the graded split ({splits}): a full report"
    fraction = part.get("fraction")
    share = f"{fraction * 100:g}% of " if isinstance(fraction, (int, float)) and not isinstance(fraction, bool) else ""
    return (
        f"part: {_clean(part.get('name'))}: {share}the queries of the graded split ({splits}), chosen by the partition committed as "
        f"{_clean(part.get('partition_commitment'))}; no per-query values (the full report is published at the end)"
    )


def _graded_by(report: Report) -> str:
    """The machine that graded: a remote worker the signing host names, or the signer itself."""
    graded = report.labels.get("graded_by")
    if isinstance(graded, dict) and graded.get("worker") is not None:
        return f"graded by: worker {_clean(graded.get('worker'))} (attempt {_clean(graded.get('attempt'))}), named by the signer"
    return "graded by: the signer's own machine (no remote worker named)"


def format_summary(verified: VerifiedReport) -> str:
    """Lines describing a verified report: who signed it, what was graded, and the scores."""
    report = Report.from_json(verified.report)
    benchmark = report.benchmark
    aggregate = report.aggregate
    measure = aggregate.measure
    lines = [
        f"verified: signed by key {verified.keyid}",
        f"subject: {_clean(report.subject_name)} ({report.subject_kind}) sha256:{report.subject_digest}",
        f"benchmark: {_clean(benchmark['name'])} {_clean(benchmark['version'])} (primary measure {benchmark['primary_measure']})",
        f"policy: {report.policy}",
        _part(report),
        _graded_by(report),
        f"score: {measure} = {_number(aggregate.score)}"
        + ("" if aggregate.complete else " (incomplete: not every task of the benchmark was graded and scored)"),
    ]
    for group, value in sorted(aggregate.groups.items()):
        lines.append(f"group {_clean(group)}: {measure} = {_number(value)}")
    lines.append(f"graded: {report.started_at} .. {report.finished_at} by grader {_clean(report.grader_version)}")
    width = max(len(name) for name in report.tasks)
    for name, task in sorted(report.tasks.items()):
        if task.failure is None:
            detail = f"{measure} = {_number(task.measures.get(measure))}"
        else:
            detail = f"{task.failure['code']}: {_clean(task.failure['message'])}"
        lines.append(f"task {name:<{width}}  {task.status:<6}  {detail}")
    return "\n".join(lines)
