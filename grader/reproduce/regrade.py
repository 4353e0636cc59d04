"""The options of ``grader run`` that re-grade a report's submission as the report says it was graded.

Everything a grade's numbers depend on is in a ``grader run`` report: the tasks and their split, the
policy, the measures, the ranking depth (``ranking.top_k``), the PCA dimensions, the sandbox kind and its
limits, the encoding threads (in-process) and whether an image had to come from the submission. The
blinding key is not (it is secret): a re-grade stages under its own, which changes the pseudonyms a
container sees but not the rankings under the real ids that the run digest covers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from grader.data.benchmark import Benchmark
from grader.errors import InputError
from grader.grading.interfaces import RunOptions
from grader.metrics.measures import parse_measures
from grader.metrics.policy import Policy
from grader.sandbox.blinding import BlindingKey
from grader.sandbox.limits import SandboxLimits

_LIMIT_TYPES = {field.name: field.type for field in fields(SandboxLimits)}


def _refuse(path: Path, what: str) -> InputError:
    return InputError(f"cannot reproduce: {what}", path=path)


def _limits(path: Path, stated: Any) -> SandboxLimits:
    """The report's sandbox limits (those ``SandboxLimits`` knows; ``enforcement`` is a description)."""
    if not isinstance(stated, Mapping):
        raise _refuse(path, "sandbox.limits: not an object")
    values = asdict(SandboxLimits())
    for name, value in stated.items():
        if name not in _LIMIT_TYPES:
            continue
        default = values[name]
        fine = (
            (isinstance(default, float) and isinstance(value, (int, float)) and value > 0)
            or (isinstance(default, int) and isinstance(value, int) and value > 0)
            or (name == "runtime" and isinstance(value, str) and 0 < len(value) <= 64)
        )
        if isinstance(value, bool) or not fine:
            raise _refuse(path, f"sandbox.limits.{name}: {str(value)[:40]!r} is not a limit")
        values[name] = float(value) if isinstance(default, float) else value
    return SandboxLimits(**values)


def refusal(report: Mapping[str, Any]) -> str | None:
    """Why ``report`` cannot be reproduced at all (before its data or version are looked at), or None."""
    lacking = sorted(name for name, task in report["tasks"].items() if task["status"] == "scored" and "run_digest" not in task)
    if lacking:
        return f"task {lacking[0]} carries no run digest (schema version {report['schema_version']}; reports carry one from schema version 2)"
    if report["labels"].get("part") is not None:
        return "the report scores part of the queries (labels.part, a host's public-part report): reproduce the full report"
    sandbox = report.get("sandbox")
    if not isinstance(sandbox, Mapping) or sandbox.get("kind") not in ("none", "docker"):
        return "the report graded a run file (grader score), not a submission: there is nothing to run again"
    ranking = report.get("ranking")
    if not isinstance(ranking, Mapping) or "top_k" not in ranking:
        return "the report does not record its ranking depth (ranking.top_k)"
    return None


def regrade_options(path: Path, report: Mapping[str, Any], benchmark: Benchmark, *, out_dir: Path, blinding_key: BlindingKey | None) -> RunOptions:
    """``RunOptions`` that grade again what ``report`` (read from ``path``) graded; :class:`InputError` if it cannot say."""
    refused = refusal(report)
    if refused is not None:
        raise _refuse(path, refused)
    sandbox, ranking = report["sandbox"], report["ranking"]
    tasks = report["tasks"]
    splits = sorted({task["split"] for task in tasks.values()})
    if len(splits) != 1:
        raise _refuse(path, f"the report's tasks were graded on several splits ({', '.join(splits)})")
    primary = report["benchmark"]["primary_measure"]
    measured = {measure for task in tasks.values() for measure in task["measures"]}
    pca = sorted({int(dimension) for task in tasks.values() for dimension in task.get("pca", {})})
    kind = sandbox["kind"]
    limits = _limits(path, sandbox.get("limits", {}))
    threads = sandbox.get("threads")
    if kind == "none" and not (isinstance(threads, int) and not isinstance(threads, bool) and 1 <= threads <= 256):
        raise _refuse(path, "sandbox.threads: an in-process grade must name its encoding threads")
    # In-process the encoding threads decide the vectors' bits; in Docker the report does not record them.
    workers: int = threads if kind == "none" and isinstance(threads, int) else (os.cpu_count() or 1)
    explicit = ("--cpus",) if kind == "none" and "cpus" in sandbox.get("limits", {}) else ()
    return RunOptions(
        benchmark=benchmark,
        tasks=benchmark.select(sorted(tasks)),
        split=splits[0],
        out_dir=out_dir,
        policy=Policy(report["policy"]),
        threads=workers,
        top_k=int(ranking["top_k"]),
        # Primary first, as the report's per-query values are of the primary measure.
        measures=tuple(parse_measures([primary, *sorted(measured - {primary})])) if measured else (),
        sandbox=kind,
        limits=limits,
        pca_dims=tuple(pca),
        explicit_limits=explicit,
        images_from_submission_only=sandbox.get("image_origin") == "submission",
        blinding_key=blinding_key,
    )
