"""What a sharded grade cost: each shard job's figures, as its worker states them, and their merge per task.

A shard job's worker measures its container as an unsharded grade's does (:class:`~grader.grading.cost.RankCost`:
the container's wall seconds and, from its cgroup, CPU seconds and peak memory; a shard's search wall seconds) and
states them with its output (:func:`job_figures`). The server holds each job's figures to that job's sandbox limits
at the put (:func:`grader.grading.worker_cost.check_figures`), keeps them beside the output, and once every job of
the attempt is in, merges them per task (:func:`task_entry`): wall and CPU seconds summed over the task's jobs (its
query job and every shard), the peak the largest of them; a figure missing from any job is null, with its reason
(a partial sum would read as cheaper than it was). The block is the workers' word, labelled ``"source": "worker"``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from grader.grading.cost import RankCost, TaskCost
from grader.sandbox.usage import ResourceUsage


def job_figures(cost: RankCost) -> dict[str, Any]:
    """One shard job's figures as its worker states them (the ``Grader-Shard-Cost`` header's JSON)."""
    return {
        "encode_s": cost.encoder_s,
        "search_s": cost.search_s,
        "cpu_s": cost.usage.cpu_s,
        "peak_memory_bytes": cost.usage.peak_memory_bytes,
        "measured_by": cost.usage.method[:300],
    }


def _summed(values: Sequence[float | None]) -> float | None:
    return None if not values or any(value is None for value in values) else math.fsum(v for v in values if v is not None)


def task_entry(jobs: Mapping[int, Mapping[str, Any] | None], *, texts: int, queries: int, failed: bool) -> dict[str, Any]:
    """A task's entry of the ``cost`` block from its jobs' figures by job number (-1: the query job; None: none stated)."""
    scored = {"score_s": "the server scores" if not failed else "the task was not scored"}
    if failed or not jobs or any(figures is None for figures in jobs.values()):
        why = "the task's shard jobs failed" if failed else "a shard job of the task stated no figures"
        return TaskCost(texts, queries, missing={"rank": why, **scored}).as_json()
    stated = [figures for figures in jobs.values() if figures is not None]
    encode = _summed([figures.get("encode_s") for figures in stated])
    if encode is None:
        return TaskCost(texts, queries, missing={"rank": "a shard job of the task did not measure its encoding", **scored}).as_json()
    search = _summed([figures.get("search_s") for number, figures in jobs.items() if number >= 0 and figures is not None])
    cpu = _summed([figures.get("cpu_s") for figures in stated])
    peaks = [figures.get("peak_memory_bytes") for figures in stated]
    peak = None if any(value is None for value in peaks) else max(int(value) for value in peaks if value is not None)
    why = "not measured by every shard job of the task"
    missing = {key: why for key, value in (("cpu_s", cpu), ("peak_memory_bytes", peak)) if value is None}
    methods = "; ".join(sorted({str(figures.get("measured_by", "")) for figures in stated}))
    usage = ResourceUsage(cpu, peak, f"summed over the task's {len(jobs)} shard jobs (peak: the largest): {methods}"[:300], missing)
    return TaskCost(texts, queries, RankCost(encode, usage, search_s=search), missing=scored).as_json()
