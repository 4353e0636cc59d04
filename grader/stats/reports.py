"""From verified reports to a :class:`ScoreTable`, refusing reports that cannot be compared.

Reports compare when they grade the same benchmark (name, version, primary
measure, policy) on the same tasks, splits and data (digests), every task is
scored and carries per-query values of the primary measure, and every report
covers the same queries. Each report's per-query values must reproduce its own
signed score exactly, so what is resampled is what was signed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grader.errors import ComparisonError, UsageError
from grader.reports.model import Report
from grader.stats.aggregate import ScoreTable
from grader.text import escape_control


def _identity(report: Report) -> dict[str, Any]:
    tasks = {name: (task.split, task.data_digest) for name, task in report.tasks.items()}
    return {
        "benchmark": f"{report.benchmark['name']} {report.benchmark['version']}",
        "primary measure": report.aggregate.measure,
        "policy": report.policy,
        "tasks": sorted(tasks),
        "task data": tasks,
        "groups": {group: list(members) for group, members in report.aggregate.group_members.items()},
    }


def _per_query(source: str, report: Report) -> dict[str, dict[str, float]]:
    measure = report.aggregate.measure
    values: dict[str, dict[str, float]] = {}
    for name, task in sorted(report.tasks.items()):
        if not task.scored:
            raise ComparisonError(f"{source}: task {name} failed ({task.failure_code}); only fully scored reports compare")
        part = report.labels.get("part")
        if task.per_query is None and isinstance(part, dict):
            raise ComparisonError(
                f"{source}: a {escape_control(str(part.get('name')))}-part report (scores over the {escape_control(str(part.get('name')))} "
                "queries only, without per-query values, by design: a competition server gives these out until the end)",
                hint="compare the full reports, which participants download after the end (grader status ID --report FILE)",
            )
        if task.per_query is None:
            raise ComparisonError(
                f"{source}: task {name} has no per-query values (report made by an older grader)",
                hint="grade the submission again with this grader version",
            )
        if task.per_query.measure != measure:
            raise ComparisonError(f"{source}: task {name}: per-query values are of {task.per_query.measure}, not the primary measure {measure}")
        values[name] = dict(task.per_query.values)
    if report.aggregate.groups and not report.aggregate.members_recorded:
        raise ComparisonError(f"{source}: the report does not say which tasks its groups average (report made by an older grader)")
    return values


#: The training settings the boards rank apart (docs/leaderboard.md); anything else is ``undeclared``.
SETTINGS = ("zero-shot", "fine-tuned")


def training_setting(report: dict[str, Any]) -> str:
    """``zero-shot`` or ``fine-tuned`` as the report's labels declare it; otherwise ``undeclared`` (never assumed)."""
    training = (report.get("labels") or {}).get("training") or {}
    setting = training.get("setting") if isinstance(training, dict) else None
    return setting if setting in SETTINGS else "undeclared"


def refuse_mixed_settings(sources: Sequence[str], reports: Sequence[dict[str, Any]]) -> None:
    """Refuse reports of different training settings: the boards rank zero-shot, fine-tuned and undeclared apart."""
    settings: dict[str, list[str]] = {}
    for source, report in zip(sources, reports):
        settings.setdefault(training_setting(report), []).append(escape_control(source))
    if len(settings) > 1:
        listed = "; ".join(f"{setting}: {', '.join(names)}" for setting, names in sorted(settings.items()))
        raise ComparisonError(
            f"the reports declare different training settings ({listed}); the boards never rank them together",
            hint="compare each setting's reports apart, or pass --mixed-settings to rank them together anyway",
        )


def cost_column(report: dict[str, Any]) -> dict[str, Any] | None:
    """A report's cost column: CPU seconds per 1,000 queries and who measured them (its ``cost`` block), or None without one.

    The figure varies between re-grades (docs/reports.md, The cost block): it is shown beside the statistics, never in them.
    A ``worker`` figure is a hosted worker's word (bounded and checked by its server, not verified).
    """
    cost = report.get("cost")
    if not isinstance(cost, dict) or not isinstance(cost.get("total"), dict):
        return None
    return {"cpu_s_per_1000_queries": cost["total"].get("cpu_s_per_1000_queries"), "source": cost.get("source")}


def label_entries(sources: Sequence[str], reports: Sequence[Report]) -> list[str]:
    """Display names: each report's subject name, followed by its file where two share a name; terminal-safe."""
    names = [escape_control(report.subject_name) for report in reports]
    return [name if names.count(name) == 1 else f"{name} [{escape_control(source)}]" for name, source in zip(names, sources)]


def table_from_reports(sources: Sequence[str], reports: Sequence[dict[str, Any]]) -> ScoreTable:
    """The table of the (already verified) ``reports``; ``sources`` name them (file names) in errors."""
    if len(reports) < 1:
        raise ComparisonError("nothing to compare: no report")
    typed = [Report.from_json(report) for report in reports]
    reference = _identity(typed[0])
    for source, report in zip(sources[1:], typed[1:]):
        identity = _identity(report)
        for field, expected in reference.items():
            if identity[field] != expected:
                raise ComparisonError(f"{source} and {sources[0]} differ in {field}: {_describe(field, identity[field], expected)}")
    per_entry = [_per_query(source, report) for source, report in zip(sources, typed)]
    labels = label_entries(sources, typed)
    named = [f"{source} ({label})" for source, label in zip(sources, labels)]
    try:
        table = ScoreTable.from_values(named, reference["primary measure"], per_entry, reference["groups"])
    except UsageError as error:
        raise ComparisonError(str(error)) from None
    for row, (source, report) in enumerate(zip(sources, typed)):
        if table.score(row) != report.aggregate.score:
            raise ComparisonError(f"{source}: per-query values do not reproduce the report's score {report.aggregate.score!r}")
    return ScoreTable(tuple(labels), table.measure, table.layout, table.values)


def _describe(field: str, found: Any, expected: Any) -> str:
    if field == "task data":
        for name in sorted(set(found) | set(expected)):
            if found.get(name) != expected.get(name):
                return f"task {escape_control(name)} is split/data {found.get(name)} vs {expected.get(name)}"
    if field == "tasks":
        return f"{', '.join(map(escape_control, found))} vs {', '.join(map(escape_control, expected))}"
    return f"{escape_control(found)!s} vs {escape_control(expected)!s}"
