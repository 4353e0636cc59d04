"""What differs between a signed report and a re-grade of its submission, named in a fixed order.

The order (docs/reports.md, "Reproducing a report") is the order in which one difference explains the next:
the data, the grader's version, the sandbox image, the machine's CPU fingerprint, then task by task (its
status and failure, its run digest, its measures) and, inside a task whose run differs, the first query
whose value differs. Fields that vary between re-grades by design (the timestamps, the ``cost``
block, the blinding key's id, labels a host adds) are never compared; a differing blinding key is named only
to explain a run digest that differs where no query's value does (a tie group a container cut at the depth).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grader.data.benchmark import Benchmark
from grader.errors import GraderError, UsageError
from grader.text import MAX_ERROR_LINE, bounded


@dataclass(frozen=True)
class Difference:
    """The first thing that differs: which kind (``data digest``, ``grader version``, ...) and how, in words."""

    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


def _said(value: Any) -> str:
    # The report is signed, yet its strings came from a submitter (names) or a worker (facts): keep them short and escaped.
    return bounded(repr(value), MAX_ERROR_LINE // 4)


def data_difference(report: Mapping[str, Any], benchmark: Benchmark) -> Difference | None:
    """The first task (by name) whose data digest in ``report`` is not the digest of ``benchmark``'s copy of it."""
    for name, task in sorted(report["tasks"].items()):
        try:
            local = benchmark.task(name).split_digest(task["split"])
        except GraderError as error:  # no such task, or its files are missing: the data given cannot grade it
            raise UsageError(f"cannot reproduce task {name!r}: {error}") from None
        if local != task["data_digest"]["sha256"]:
            return Difference(
                "data digest",
                f"task {name} ({task['split']}): sha256:{task['data_digest']['sha256']} in the report, sha256:{local} in the data given",
            )
    return None


def version_difference(report: Mapping[str, Any], version: str) -> Difference | None:
    """The report's grader version, if it is not ``version`` (this grader's)."""
    stated = report["grader"]["version"]
    if stated != version:
        return Difference("grader version", f"{_said(stated)} in the report, {version!r} here")
    return None


def _image(report: Mapping[str, Any]) -> tuple[Any, Any]:
    sandbox = report.get("sandbox") or {}
    return sandbox.get("kind"), sandbox.get("image")


#: Said of a run digest that differs with no per-query value when the re-grade staged under another blinding key.
OTHER_KEY = (
    "; the re-grade's blinding key is not the report's, and a container that cuts a tie group at the depth may keep "
    "other tied documents under other pseudonyms: grade under the report's key (--blinding-key) to rule that out"
)


def _blinding(report: Mapping[str, Any]) -> Any:
    return ((report.get("sandbox") or {}).get("blinding") or {}).get("key_id")


def _task_difference(name: str, original: Mapping[str, Any], regraded: Mapping[str, Any] | None, other_key: bool) -> Difference | None:
    if regraded is None:
        return Difference("task", f"{name}: in the report, not re-graded")
    if original["status"] != regraded["status"] or (original["failure"] or {}).get("code") != (regraded["failure"] or {}).get("code"):

        def state(task: Mapping[str, Any]) -> str:
            return task["status"] if task["failure"] is None else f"failed {task['failure']['code']}"

        return Difference("task", f"{name}: {state(original)} in the report, {state(regraded)} re-graded")
    if original["status"] != "scored":
        return None
    before, after = original["run_digest"]["sha256"], regraded["run_digest"]["sha256"]
    if before != after:
        query = _query_difference(name, original, regraded)
        if query is not None:
            return query
        return Difference(
            "task",
            f"{name}: run digest sha256:{before} in the report, sha256:{after} re-graded (no query's per-query value differs"
            + (OTHER_KEY if other_key else "")
            + ")",
        )
    for measure in sorted(set(original["measures"]) | set(regraded["measures"])):
        if original["measures"].get(measure) != regraded["measures"].get(measure):
            return Difference(
                "task",
                f"{name}: {measure} {original['measures'].get(measure)!r} in the report, {regraded['measures'].get(measure)!r} re-graded "
                "(the run digests are equal)",
            )
    return None


def _query_difference(name: str, original: Mapping[str, Any], regraded: Mapping[str, Any]) -> Difference | None:
    """The first query (in byte order of its id) whose per-query value differs between the two tasks."""
    before = (original.get("per_query") or {}).get("values", {})
    after = (regraded.get("per_query") or {}).get("values", {})
    measure = (regraded.get("per_query") or {}).get("measure")
    for query in sorted(set(before) | set(after)):
        if before.get(query) != after.get(query):
            return Difference(
                "query",
                f"task {name} query {_said(query)}: the ranking differs (run digest sha256:{original['run_digest']['sha256']} in the report, "
                f"sha256:{regraded['run_digest']['sha256']} re-graded); {measure} {before.get(query)!r} in the report, "
                f"{after.get(query)!r} re-graded",
            )
    return None


def grade_difference(original: Mapping[str, Any], regraded: Mapping[str, Any], fingerprint: Mapping[str, Any] | None) -> Difference | None:
    """The first difference between ``original`` and its re-grade ``regraded``, after the data and version matched.

    ``fingerprint`` is this machine's CPU fingerprint; it is compared with the report's ``labels.fingerprint``
    only when the report names one (a hosted worker's grade).
    """
    if _image(original) != _image(regraded):
        (kind, image), (new_kind, new_image) = _image(original), _image(regraded)
        return Difference("sandbox image", f"{kind} {_said(image)} in the report, {new_kind} {new_image!r} re-graded")
    stated = original["labels"].get("fingerprint")
    if stated is not None and fingerprint is not None and dict(stated) != dict(fingerprint):
        differing = sorted(key for key in set(stated) | set(fingerprint) if stated.get(key) != fingerprint.get(key))
        return Difference("CPU fingerprint", f"the report's worker and this machine differ in {', '.join(differing)}")
    other_key = _blinding(original) is not None and _blinding(original) != _blinding(regraded)
    for name in sorted(set(original["tasks"]) | set(regraded["tasks"])):
        task = original["tasks"].get(name)
        if task is None:
            return Difference("task", f"{name}: re-graded, not in the report")
        found = _task_difference(name, task, regraded["tasks"].get(name), other_key)
        if found is not None:
            return found
    before, after = original["aggregate"]["score"], regraded["aggregate"]["score"]
    if before != after:
        return Difference("task", f"the aggregate score {before!r} in the report, {after!r} re-graded")
    return None
