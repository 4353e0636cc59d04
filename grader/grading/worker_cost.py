"""A hosted worker's cost block, checked by the server before it signs it: the worker's word, bounded and labelled.

The worker measures what ranking cost it (:mod:`grader.grading.cost`, ``"source": "worker"``) and
states it in its facts. The server cannot verify a figure measured on another machine; what it
does (:func:`checked_worker_cost`) is:

* hold the block to the schema (``$defs/cost_v1``: every figure bounded, every null with its reason)
  and to the label ``"source": "worker"``;
* hold it to what the server knows: exactly the job's tasks (a worker never resumes one), each
  task's texts and judged queries as the server counts them, wall seconds within the sandbox's time
  limit (a sharded grade's per job, at each job's put: :func:`check_figures`; its task's figures sum its jobs'), CPU seconds within what the sandbox's CPUs could do in that wall time, peak memory within
  the sandbox's memory (its ``/tmp`` included);
* recompute what follows from the figures (rates and totals) rather than take them, and name the
  machine by the digest of the fingerprint the server bound to the worker.

A block that fails a check refuses the result as ``INFRA`` (the platform's fault: never charged, the
job is graded again), as a malformed fingerprint is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import jsonschema

from grader.errors import TaskFailure
from grader.failures import FailureCode
from grader.grading.cost import cost_block
from grader.schemas import json_pointer, load_schema

#: Slack over the time limit: the grader's kill and the engine's wait count in the container's wall time.
_WALL_SLACK_S = 60.0
#: Slack over cores x wall time: accounting granularity, the container's init process.
_CPU_FACTOR = 1.25
_CPU_SLACK_S = 2.0


@cache
def _cost_validator() -> jsonschema.protocols.Validator:
    schema = load_schema("report")
    sub = {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": "#/$defs/cost_v1"}
    return jsonschema.validators.validator_for(schema)(sub)


def _refuse(why: str) -> TaskFailure:
    return TaskFailure(FailureCode.INFRA, f"the worker's cost block {why}")


def _limits(sandbox: Any) -> Mapping[str, Any]:
    limits = sandbox.get("limits") if isinstance(sandbox, dict) else None
    return limits if isinstance(limits, dict) else {}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


def _check_task(name: str, entry: dict[str, Any], counts: tuple[int, int], limits: Mapping[str, Any], machine_cpus: int, *, per_job: bool) -> None:
    texts, queries = counts
    if entry.get("resumed"):
        raise _refuse(f"says task {name} was resumed: a worker grades every task of its job")
    if (entry["texts"], entry["queries"]) != (texts, queries):
        raise _refuse(f"counts {entry['texts']} texts and {entry['queries']} queries for task {name}, not {texts} and {queries}")
    # A sharded task's figures sum its jobs': each job's wall time was held to the limit at its put, not their sum.
    wall = entry["wall_s"]["encode"]
    check_figures(f"task {name}", None if per_job else wall, wall, entry["cpu_s"], entry["peak_memory_bytes"], limits, machine_cpus)


def check_figures(
    what: str, timed: float | None, wall: float | None, cpu: float | None, peak: float | None, limits: Mapping[str, Any], machine_cpus: int
) -> None:
    """Hold one grade's or shard job's figures to its sandbox's ``limits``: ``timed`` (wall seconds under the time
    limit; None: not held to it) within the limit, CPU seconds within what its CPUs could do in ``wall`` seconds, the
    peak within its memory (``/tmp`` included); :class:`TaskFailure` (``INFRA``) naming the first figure past them."""
    limit = _number(limits.get("time_limit_s"))
    if timed is not None and limit is not None and timed > limit + _WALL_SLACK_S:
        raise _refuse(f"states {timed:g} s of encoding for {what}, past the {limit:g} s time limit")
    cpus = _number(limits.get("cpus")) or float(machine_cpus)
    if cpu is not None and wall is not None and cpu > wall * cpus * _CPU_FACTOR + _CPU_SLACK_S:
        raise _refuse(f"states {cpu:g} CPU seconds for {what}: more than {cpus:g} CPU(s) can do in {wall:g} s")
    memory = _number(limits.get("memory_bytes"))
    if memory is not None and peak is not None:
        ceiling = memory + (_number(limits.get("tmp_bytes")) or 0.0)
        if peak > ceiling:
            raise _refuse(f"states a peak of {peak} bytes for {what}, past the sandbox's {ceiling:g}")


def _recomputed(entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` with the rates computed here from its figures, not taken from the worker."""
    wall = entry["wall_s"]["encode"]
    fine = wall is not None and wall > 0
    tokens = entry["tokens"]
    return {
        **entry,
        "texts_per_s": entry["texts"] / wall if fine else None,
        "tokens_per_s": tokens / wall if fine and tokens is not None else None,
    }


def checked_worker_cost(
    stated: Any, *, tasks: Sequence[str], counts: Mapping[str, tuple[int, int]], sandbox: Any, fingerprint: str | None
) -> dict[str, Any] | None:
    """The report's ``cost`` block from a worker's stated one, checked (module docstring); None when it stated none.

    ``counts`` holds each task's (texts, judged queries) as the server counts them; ``sandbox`` is the report's
    sandbox section (its limits bound the figures); ``fingerprint`` is the digest of the worker's bound fingerprint.
    Raises :class:`TaskFailure` (``INFRA``) naming the first problem.
    """
    if stated is None:
        return None
    errors = list(_cost_validator().iter_errors(stated))
    if errors:
        error = jsonschema.exceptions.best_match(errors)
        raise _refuse(f"breaks the report schema at /cost{json_pointer(error).rstrip('/')}: {error.message[:200]}")
    if stated["source"] != "worker":
        raise _refuse(f"is labelled {stated['source']!r}: a worker's figures are its word, labelled 'worker'")
    if sorted(stated["tasks"]) != sorted(tasks):
        raise _refuse("does not name the job's tasks")
    limits = _limits(sandbox)
    per_job = isinstance(sandbox, dict) and sandbox.get("sharded") is True
    entries: dict[str, Any] = {}
    for name in tasks:
        entry = stated["tasks"][name]
        _check_task(name, entry, counts[name], limits, stated["machine"]["cpus"], per_job=per_job)
        entries[name] = _recomputed(entry)
    block = cost_block(entries, source="worker", fingerprint=fingerprint)
    block["machine"]["cpus"] = stated["machine"]["cpus"]  # the worker's machine, not the server's
    return block
