"""Typed pieces of a grading report: small values that are valid when constructed.

A piece refuses, at construction, anything the report schema would refuse about
it (a digest that is not 64 hex digits, a measure the grader cannot spell, a
failed task with measures...), so a mistake is caught where it is made rather
than when the whole report is checked. :meth:`as_json` is the one place each
piece becomes report JSON; :func:`grader.reports.model.build_report` still
validates the assembled report against the schema, at the edge.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from grader.errors import ReportError
from grader.failures import FailureCode
from grader.metrics.measures import MEASURE_PATTERN
from grader.text import MAX_STDERR_LINE, bounded

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_MEASURE = re.compile(MEASURE_PATTERN)
#: the task fields the schema names; anything else of an entry is a kind-specific extra (encoding, pca, per-query values)
_TASK_FIELDS = frozenset({"name", "split", "data_digest", "status", "failure", "measures", "queries"})


def _refuse(where: str, what: str) -> ReportError:
    return ReportError(f"invalid report piece {where}: {what}")


@dataclass(frozen=True)
class Digest:
    """A sha256 digest, hex, lower case."""

    sha256: str

    def __post_init__(self) -> None:
        if not isinstance(self.sha256, str) or not _SHA256.match(self.sha256):
            raise _refuse("digest", f"{self.sha256!r} is not 64 lower-case hex digits")

    def as_json(self) -> dict[str, str]:
        return {"sha256": self.sha256}


@dataclass(frozen=True)
class QueryCoverage:
    """How a run covers the judged queries of a task."""

    judged: int
    answered: int
    missing: int
    extra: int

    def __post_init__(self) -> None:
        for name in ("judged", "answered", "missing", "extra"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _refuse(f"queries.{name}", f"{value!r} is not a count")
        if self.missing > self.judged:
            raise _refuse("queries", f"{self.missing} missing of {self.judged} judged")

    @classmethod
    def none_answered(cls, judged: int) -> QueryCoverage:
        """A task that produced no ranking: every judged query is missing."""
        return cls(judged=judged, answered=0, missing=judged, extra=0)

    def as_json(self) -> dict[str, int]:
        return {"judged": self.judged, "answered": self.answered, "missing": self.missing, "extra": self.extra}


@dataclass(frozen=True)
class Failure:
    """Why a task failed: a failure code and the grader's words (escaped and bounded here, whatever the caller passed)."""

    code: FailureCode
    message: str
    #: the container's last stderr line: only in grades of a benchmark's public split
    stderr: str | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "code", FailureCode(self.code))
        except ValueError:
            raise _refuse("failure.code", f"{self.code!r} is not a failure code") from None
        object.__setattr__(self, "message", bounded(self.message))
        if self.stderr is not None:
            object.__setattr__(self, "stderr", bounded(self.stderr, MAX_STDERR_LINE) or None)

    def as_json(self) -> dict[str, str]:
        out = {"code": str(self.code), "message": self.message}
        if self.stderr:
            out["stderr"] = self.stderr
        return out


@dataclass(frozen=True)
class TaskEntry:
    """One task of a report: scored (with measures) or failed (with a failure, no measures)."""

    name: str
    split: str
    data_digest: Digest
    queries: QueryCoverage
    measures: Mapping[str, float] = field(default_factory=dict)
    failure: Failure | None = None
    #: kind-specific fields the schema allows on a task (encoding stats, PCA results, per-query values)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise _refuse("task name", f"{self.name!r} is not a name (letters, digits, '.', '_', '-')")
        if not isinstance(self.split, str) or not self.split:
            raise _refuse(f"tasks/{self.name}/split", "must be a non-empty string")
        if self.failure is not None and self.measures:
            raise _refuse(f"tasks/{self.name}", "a failed task has no measures")
        for measure, value in self.measures.items():
            if not _MEASURE.match(measure):
                raise _refuse(f"tasks/{self.name}/measures", f"{measure!r} is not a measure")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value <= 1:
                raise _refuse(f"tasks/{self.name}/measures/{measure}", f"{value!r} is not a score in [0, 1]")
        clash = _TASK_FIELDS.intersection(self.extra)
        if clash:
            raise _refuse(f"tasks/{self.name}", f"extra fields {sorted(clash)} would overwrite the entry's own")

    @property
    def status(self) -> str:
        return "failed" if self.failure is not None else "scored"

    def as_json(self) -> dict[str, Any]:
        """The entry as the report carries it (with its ``name``, which the report turns into the key)."""
        entry: dict[str, Any] = {
            "name": self.name,
            "split": self.split,
            "data_digest": self.data_digest.as_json(),
            "status": self.status,
            "failure": None if self.failure is None else self.failure.as_json(),
            "measures": dict(self.measures),
            "queries": self.queries.as_json(),
        }
        entry.update(self.extra)
        return entry
