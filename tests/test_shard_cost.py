"""A sharded grade's cost block: its jobs' figures merged per task, the workers' word, held to the limits per job.

Pure functions over figures as shard workers state them (no container: what the figures are measured from is
:mod:`grader.sandbox.usage`, tested on its own); the merged block is then checked as the server checks any worker's.
"""

from __future__ import annotations

import json

import pytest

from grader.errors import TaskFailure
from grader.grading.cost import RankCost, cost_block
from grader.grading.shard_cost import job_figures, task_entry
from grader.grading.worker_cost import check_figures, checked_worker_cost
from grader.sandbox.usage import ResourceUsage

LIMITS = {"time_limit_s": 100.0, "cpus": 1.0, "memory_bytes": 1000, "tmp_bytes": 0}
METHOD = "cgroup v2 cpu.stat and memory.peak"


def _job(encode: float, cpu: float, peak: int, search: float | None = None) -> dict[str, object]:
    return job_figures(RankCost(encode, ResourceUsage(cpu, peak, METHOD), search_s=search))


def test_a_tasks_jobs_are_summed_their_peak_the_largest_and_the_block_checks_per_job() -> None:
    jobs = {-1: _job(10.0, 9.0, 300), 0: _job(80.0, 70.0, 900, 1.5), 1: _job(80.0, 75.0, 600, 2.5)}
    entry = task_entry(jobs, texts=1010, queries=10, failed=False)
    assert entry["wall_s"] == {"encode": 170.0, "search": 4.0, "score": None}  # the wait for the vectors is in no figure
    assert (entry["cpu_s"], entry["peak_memory_bytes"], entry["texts"], entry["queries"]) == (154.0, 900, 1010, 10)
    assert entry["measured_by"].startswith("summed over the task's 3 shard jobs") and METHOD in entry["measured_by"]
    block = cost_block({"t": entry}, source="worker")
    sharded = {"limits": LIMITS, "sharded": True}
    checked = checked_worker_cost(block, tasks=["t"], counts={"t": (1010, 10)}, sandbox=sharded, fingerprint=None)
    assert checked is not None and checked["total"] == {"cpu_s": 154.0, "queries": 10, "cpu_s_per_1000_queries": 15400.0}
    # 170 s summed is past the 100 s limit: fine for a sharded grade (each job was held to it), refused for a whole one
    with pytest.raises(TaskFailure, match="past the 100 s time limit"):
        checked_worker_cost(block, tasks=["t"], counts={"t": (1010, 10)}, sandbox={"limits": LIMITS}, fingerprint=None)


def test_a_job_without_figures_or_a_failed_task_leaves_the_figures_null_with_the_reason() -> None:
    silent = task_entry({-1: _job(1.0, 1.0, 10), 0: None}, texts=5, queries=2, failed=False)
    assert silent["cpu_s"] is None and silent["wall_s"]["encode"] is None
    assert silent["missing"]["cpu_s"] == "a shard job of the task stated no figures"
    failed = task_entry({-1: _job(1.0, 1.0, 10)}, texts=5, queries=2, failed=True)
    assert failed["cpu_s"] is None and failed["missing"]["encode_s"] == "the task's shard jobs failed"
    assert cost_block({"a": silent, "b": failed}, source="worker")["total"]["cpu_s"] is None  # a partial sum would read cheaper


@pytest.mark.parametrize(
    ("timed", "cpu", "peak", "why"),
    [(161.0, 1.0, 1, "past the 100 s time limit"), (10.0, 20.0, 1, "more than 1 CPU"), (10.0, 1.0, 1001, "a peak of 1001 bytes")],
)
def test_one_jobs_figures_past_its_limits_are_refused_infra(timed: float, cpu: float, peak: int, why: str) -> None:
    check_figures("shard job 0 of task t", 10.0, 10.0, 1.0, 1000, LIMITS, 1)  # within: nothing raised
    with pytest.raises(TaskFailure, match=why) as refused:
        check_figures("shard job 0 of task t", timed, timed, cpu, peak, LIMITS, 1)
    assert refused.value.code.value == "INFRA"


@pytest.mark.parametrize(
    "stated",
    [
        '{"encode_s": -1}',
        '{"encode_s": NaN}',
        '{"encode_s": 1e300}',
        '{"encode_s": 1, "peak_memory_bytes": 1e30}',
        '{"encode_s": 1, "measured_by": "' + "x" * 301 + '"}',
        '{"encode_s": 1, "score": 3}',
        "[1]",
    ],
)
def test_a_stated_job_cost_out_of_bounds_or_unknown_is_refused(stated: str) -> None:
    from pydantic import ValidationError

    from grader.hosting.protocol.shard_messages import ShardJobCost

    assert ShardJobCost.model_validate_json(json.dumps(_job(1.0, 0.5, 10, 0.1))).cpu_s == 0.5  # what a worker states: read
    with pytest.raises(ValidationError):
        ShardJobCost.model_validate_json(stated)
