"""A hosted worker's cost block as the server checks it (grader/grading/worker_cost.py): its word, bounded and labelled.

Each refusal is a platform failure (``INFRA``: never charged, graded again) naming what was wrong; an honest
block is carried with the rates and totals recomputed here and the machine named by the bound fingerprint.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from grader.errors import TaskFailure
from grader.failures import FailureCode
from grader.grading.cost import RankCost, TaskCost, cost_block, fingerprint_digest, resumed_task
from grader.grading.worker_cost import checked_worker_cost
from grader.hosting.services.replication import fingerprint_digest as pairing_digest
from grader.hosting.worker.fingerprint import fingerprint_sha256, worker_fingerprint
from grader.sandbox.usage import ResourceUsage

SANDBOX = {"kind": "docker", "limits": {"time_limit_s": 600.0, "memory_bytes": 1 << 30, "tmp_bytes": 1 << 30, "cpus": 2.0}}
COUNTS = {"t": (110, 10)}
FINGERPRINT = "f" * 64


def _stated(**figures: Any) -> dict[str, Any]:
    usage = ResourceUsage(figures.get("cpu_s", 30.0), figures.get("peak", 500 << 20), "cgroup v2 cpu.stat and memory.peak")
    entry = TaskCost(110, 10, RankCost(figures.get("wall", 20.0), usage, search_s=1.0), missing={"score_s": "the server scores"}).as_json()
    return cost_block({"t": entry}, source="worker")


def _check(stated: Any) -> dict[str, Any] | None:
    return checked_worker_cost(stated, tasks=["t"], counts=COUNTS, sandbox=SANDBOX, fingerprint=FINGERPRINT)


def test_an_honest_block_is_carried_labelled_with_the_servers_fingerprint_and_rates() -> None:
    stated = _stated()
    stated["tasks"]["t"]["texts_per_s"] = 1e6  # a rate the worker inflated: recomputed from its figures
    checked = _check(stated)
    assert checked is not None
    assert checked["source"] == "worker" and checked["machine"]["fingerprint"] == FINGERPRINT
    assert checked["tasks"]["t"]["texts_per_s"] == 110 / 20.0
    assert checked["total"] == {"cpu_s": 30.0, "queries": 10, "cpu_s_per_1000_queries": 3000.0}
    assert _check(None) is None  # a worker of an older grader states none: the report has no cost block


def _refused(stated: Any) -> str:
    with pytest.raises(TaskFailure) as caught:
        _check(stated)
    assert caught.value.code is FailureCode.INFRA
    return caught.value.detail


def _edit(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    stated = _stated()
    target = stated
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return stated


@pytest.mark.parametrize(
    ("stated", "said"),
    [
        (_edit(("tasks", "t", "cpu_s"), 1e9), "breaks the report schema at /cost/tasks/t"),
        (_edit(("tasks", "t", "note"), "hi"), "breaks the report schema at /cost/tasks/t"),
        (_edit(("source",), "grader"), "labelled 'grader'"),
        (_edit(("tasks",), {"other": copy.deepcopy(_stated()["tasks"]["t"])}), "does not name the job's tasks"),
        (_edit(("tasks", "t"), resumed_task()), "resumed"),
        (_edit(("tasks", "t", "texts"), 109), "counts 109 texts and 10 queries for task t, not 110 and 10"),
        (_stated(wall=700.0, cpu_s=1.0), "past the 600 s time limit"),
        (_stated(wall=10.0, cpu_s=40.0), "more than 2 CPU(s) can do in 10 s"),
        (_stated(peak=3 << 30), "past the sandbox's"),
        ("not a block", "breaks the report schema at /cost"),
    ],
    ids=["bound", "unknown-field", "label", "tasks", "resumed", "counts", "wall", "cpu", "memory", "type"],
)
def test_a_block_the_server_cannot_vouch_for_is_a_platform_failure(stated: Any, said: str) -> None:
    assert said in _refused(stated)


def test_the_cost_block_names_the_machine_by_the_digest_replicas_are_paired_on() -> None:
    assert fingerprint_sha256() == fingerprint_digest(worker_fingerprint()) == pairing_digest(worker_fingerprint())
