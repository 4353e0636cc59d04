"""The grading report: building it from grading results, checking it, serialising it.

A report is a plain JSON-compatible dict described by
``grader/schemas/report.schema.json``; this module is the only place that
assembles one, so every report the grader writes or signs has been checked.
Code that reads a report back reads it through :meth:`Report.from_json`
(checked against the schema, then typed), not by walking the dict.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

import jsonschema

import grader
from grader import jsonio
from grader.errors import ReportError
from grader.reports.pieces import TaskEntry
from grader.schemas import first_error, json_pointer

SCHEMA_NAME = "report"
SCHEMA_VERSION = "2"
#: Longest schema message quoted in an error; jsonschema can quote whole objects.
_MESSAGE_LIMIT = 200


class Violation(NamedTuple):
    """Where a report breaks its schema (a JSON pointer) and how."""

    pointer: str
    message: str

    def __str__(self) -> str:
        return f"{self.pointer}: {self.message}"


def _escape(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


def _pointer(error: jsonschema.ValidationError) -> str:
    pointer = json_pointer(error)
    # A bad object key (propertyNames) is reported at its object; point at the key itself.
    if "propertyNames" in error.absolute_schema_path and isinstance(error.instance, str):
        pointer = pointer.rstrip("/") + "/" + _escape(error.instance)
    return pointer


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_LIMIT else text[:_MESSAGE_LIMIT] + "..."


def _per_query_values(report: Any) -> list[tuple[str, dict]]:
    """(task name, values object) of every task whose ``per_query.values`` is an object."""
    tasks = report.get("tasks") if isinstance(report, dict) else None
    found = []
    for name, task in tasks.items() if isinstance(tasks, dict) else ():
        per_query = task.get("per_query") if isinstance(task, dict) else None
        if isinstance(per_query, dict) and isinstance(per_query.get("values"), dict):
            found.append((name, per_query["values"]))
    return found


def _values_violation(name: str, values: dict) -> Violation | None:
    """The schema's rule for per-query values (numbers in [0, 1]), checked directly."""
    for query_id, value in values.items():
        pointer = f"/tasks/{_escape(str(name))}/per_query/values/{_escape(str(query_id))}"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            return Violation(_one_line(pointer), "is not a number")
        if not 0 <= value <= 1:
            return Violation(_one_line(pointer), f"{value!r} is not within [0, 1]")
    return None


def schema_violation(report: Any) -> Violation | None:
    """The first (most relevant) way ``report`` breaks the report schema, or None if it is valid.

    Per-query values (tens of thousands per task) are checked directly against
    the schema's rule for them, and the rest by jsonschema, which is slow per value.
    """
    found = _per_query_values(report)
    if found:
        slim = {**report, "tasks": {name: task for name, task in report["tasks"].items()}}
        for name, _ in found:
            task = slim["tasks"][name]
            slim["tasks"][name] = {**task, "per_query": {**task["per_query"], "values": {}}}
        report = slim
    error = first_error(SCHEMA_NAME, report)
    if error is not None:
        return Violation(_pointer(error), _one_line(error.message))
    for name, values in found:
        violation = _values_violation(name, values)
        if violation is not None:
            return violation
    return None


def validate_report(report: Any) -> None:
    """Raise :class:`ReportError` naming the JSON pointer of the first schema violation."""
    violation = schema_violation(report)
    if violation is not None:
        raise ReportError(f"invalid report at {violation}")


def format_timestamp(moment: datetime) -> str:
    """RFC 3339 in UTC with a ``Z`` suffix; naive datetimes are refused as ambiguous."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ReportError(f"timestamp {moment.isoformat()} has no time zone; pass an aware datetime")
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"


def _plain(value: Any, pointer: str) -> Any:
    """A copy of ``value`` made of plain JSON types, keeping floats bit-for-bit.

    numpy scalars (from metric code) become int/float; NaN, infinities and
    anything JSON cannot hold are refused with the pointer where they sit.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        if not math.isfinite(number):
            raise ReportError(f"invalid report at {pointer or '/'}: {number} is not a finite number")
        return number
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ReportError(f"invalid report at {pointer or '/'}: object key {key!r} is not a string")
            out[key] = _plain(item, f"{pointer}/{_escape(key)}")
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(item, f"{pointer}/{index}") for index, item in enumerate(value)]
    raise ReportError(f"invalid report at {pointer or '/'}: {type(value).__name__} is not JSON data")


def _tasks_by_name(tasks: Sequence[dict | TaskEntry]) -> dict[str, dict]:
    by_name: dict[str, dict] = {}
    for index, piece in enumerate(tasks):
        task = piece.as_json() if isinstance(piece, TaskEntry) else piece
        if not isinstance(task, dict) or not isinstance(task.get("name"), str):
            raise ReportError(f"invalid report: tasks[{index}] needs a string 'name'")
        name = task["name"]
        if name in by_name:
            raise ReportError(f"invalid report: task {name!r} appears twice")
        entry = {key: value for key, value in task.items() if key != "name"}
        # A scored task has no failure; a failed task has no measures. Fill the
        # obvious empty value so callers need not spell it out.
        entry.setdefault("failure", None)
        entry.setdefault("measures", {})
        by_name[name] = entry
    return by_name


def _check_consistency(report: dict) -> None:
    """Rules the schema cannot express: the aggregate agrees with the tasks."""
    tasks = report["tasks"]
    aggregate = report["aggregate"]
    all_scored = all(task["status"] == "scored" for task in tasks.values())
    # ``complete`` means every task of the benchmark was graded and scored; a run
    # over a subset of tasks is scored but not complete, so only one direction holds.
    if aggregate["complete"] and not all_scored:
        raise ReportError("invalid report at /aggregate/complete: is true but some task was not scored")
    if not all_scored and aggregate["score"] is not None:
        raise ReportError("invalid report at /aggregate/score: a task failed, so the benchmark score must be null")
    measure = aggregate["measure"]
    for name, task in tasks.items():
        if task["status"] == "scored" and measure not in task["measures"]:
            raise ReportError(f"invalid report at /tasks/{_escape(name)}/measures: scored task lacks the aggregate measure {measure}")
        per_query = task.get("per_query")
        if per_query is not None:
            # The per-query values must be the ones the task's score is the mean of (fsum, as Evaluation.mean).
            values = list(per_query["values"].values())
            mean = math.fsum(values) / len(values) if values else 0.0
            if per_query["measure"] not in task["measures"] or task["measures"][per_query["measure"]] != mean:
                raise ReportError(f"invalid report at /tasks/{_escape(name)}/per_query: values do not average to the task's {per_query['measure']}")


def build_report(
    *,
    benchmark: dict,
    subject: dict,
    tasks: Sequence[dict | TaskEntry],
    aggregate: dict,
    policy: str,
    started_at: datetime,
    finished_at: datetime,
    sandbox: dict | None = None,
    labels: dict | None = None,
    top_k: int | None = None,
    cost: dict | None = None,
) -> dict:
    """Assemble and validate a grading report.

    ``benchmark`` may be the whole benchmark definition: only its name, version
    and primary_measure are kept. Each entry of ``tasks`` is a
    :class:`grader.reports.pieces.TaskEntry`, or a dict that carries a ``name`` plus
    the task fields of the schema (``failure`` defaults to None, ``measures`` to
    {}). Floats are kept at full precision. Raises :class:`ReportError` naming
    the JSON pointer of the first problem. ``top_k`` (``grader run --top-k``) is
    recorded as ``ranking.top_k``: measures at deeper cut-offs depend on it. ``cost`` (what the
    grade cost: :mod:`grader.grading.cost`) is written as the ``cost`` block, the one part that
    varies between re-grades.
    """
    start_text = format_timestamp(started_at)
    finish_text = format_timestamp(finished_at)
    if finished_at < started_at:
        raise ReportError(f"invalid report at /finished_at: {finish_text} is before started_at {start_text}")
    report = {
        "schema_version": SCHEMA_VERSION,
        "grader": {"name": "grader", "version": grader.__version__},
        "benchmark": {key: benchmark[key] for key in ("name", "version", "primary_measure") if key in benchmark},
        "subject": subject,
        "policy": policy,
        "tasks": _tasks_by_name(tasks),
        "aggregate": aggregate,
        "sandbox": sandbox,
        "labels": {} if labels is None else labels,
        "started_at": start_text,
        "finished_at": finish_text,
    }
    if top_k is not None:
        report["ranking"] = {"top_k": top_k}
    if cost is not None:
        report["cost"] = cost
    report = _plain(report, "")
    validate_report(report)
    _check_consistency(report)
    return report


def report_json(report: dict) -> bytes:
    """The bytes of a report file: sorted keys, indent 2, trailing newline, no NaN.

    Floats are written with Python's shortest round-trip repr, so nothing is
    rounded and the same report always gives the same bytes.
    """
    try:
        text = jsonio.dumps(report, sort_keys=True, indent=2, ensure_ascii=True)
    except (TypeError, ValueError) as error:
        raise ReportError(f"report cannot be written as JSON: {error}") from None
    return (text + "\n").encode("utf-8")


@dataclass(frozen=True)
class PerQuery:
    """A task's per-query values of one measure (the values its score is the mean of)."""

    measure: str
    values: Mapping[str, float]


@dataclass(frozen=True)
class ReportTask:
    """One task of a report, as read back: status, the failure code of a failed task, measures, per-query values."""

    name: str
    split: str
    data_digest: str
    status: str
    #: a failed task's ``{"code", "message"[, "stderr"]}``; None for a scored one
    failure: Mapping[str, str] | None
    measures: Mapping[str, float]
    per_query: PerQuery | None
    #: an embedding submission's encoding statistics (truncation per side), if recorded
    encoding: Mapping[str, Any] | None

    @property
    def scored(self) -> bool:
        return self.status == "scored"

    @property
    def failure_code(self) -> str | None:
        return None if self.failure is None else self.failure["code"]


@dataclass(frozen=True)
class Aggregate:
    """The benchmark score of a report: its primary measure, score, completeness and groups."""

    measure: str
    score: float | None
    complete: bool
    groups: Mapping[str, float | None]
    #: the graded tasks of each group (empty in reports made before it was recorded)
    group_members: Mapping[str, tuple[str, ...]]
    #: whether the report says which tasks its groups average (``group_members`` present)
    members_recorded: bool


@dataclass(frozen=True)
class Report:
    """A schema-valid report read back, with typed access to what its readers need; ``data`` is the JSON itself."""

    data: Mapping[str, Any]
    grader_version: str
    benchmark: Mapping[str, str]
    subject_kind: str
    subject_name: str
    subject_digest: str
    policy: str
    tasks: Mapping[str, ReportTask]
    aggregate: Aggregate
    labels: Mapping[str, Any]
    started_at: str
    finished_at: str
    #: the id of the key that blinded the ids its containers saw (``sandbox.blinding.key_id``);
    #: None for an in-process grade or a report made before blinding
    blinding_key_id: str | None = None

    @classmethod
    def from_json(cls, data: Any) -> Report:
        """Check ``data`` against the report schema (:class:`ReportError` naming the pointer) and read it."""
        validate_report(data)
        return cls.of_verified(data)

    @classmethod
    def of_verified(cls, data: Any) -> Report:
        """Read ``data``, a report :func:`grader.reports.verify.verify_envelope` has checked against the schema already.

        Checking it again (:meth:`from_json`) was a third of the time a server took to read a signed report it had not
        read before (bench/many_competitions.py: a participant's list of 40 grades, read first).
        """
        tasks = {}
        for name, task in data["tasks"].items():
            per_query = task.get("per_query")
            tasks[name] = ReportTask(
                name=name,
                split=task["split"],
                data_digest=task["data_digest"]["sha256"],
                status=task["status"],
                failure=task["failure"],
                measures=task["measures"],
                per_query=None if per_query is None else PerQuery(per_query["measure"], per_query["values"]),
                encoding=task.get("encoding"),
            )
        aggregate = data["aggregate"]
        members = aggregate.get("group_members")
        subject = data["subject"]
        blinding = (data.get("sandbox") or {}).get("blinding")
        return cls(
            data=data,
            grader_version=data["grader"]["version"],
            benchmark=data["benchmark"],
            subject_kind=subject["kind"],
            subject_name=subject["name"],
            subject_digest=subject["digest"]["sha256"],
            policy=data["policy"],
            tasks=tasks,
            aggregate=Aggregate(
                measure=aggregate["measure"],
                score=aggregate["score"],
                complete=aggregate["complete"],
                groups=aggregate["groups"],
                group_members={group: tuple(names) for group, names in (members or {}).items()},
                members_recorded=members is not None,
            ),
            labels=data["labels"],
            started_at=data["started_at"],
            finished_at=data["finished_at"],
            blinding_key_id=None if blinding is None else blinding["key_id"],
        )
