"""A small, valid example report, for documentation and tests of the report machinery."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from grader.failures import FailureCode
from grader.reports.model import build_report

EXAMPLE_DIGEST = "0123456789abcdef" * 4


def example_report(*, failed_task: bool = False) -> dict:
    """A two-task report on a made-up benchmark; with ``failed_task`` the second task failed."""
    first: dict[str, Any] = {
        "name": "cosqa",
        "split": "test",
        "data_digest": {"sha256": "a" * 64},
        "status": "scored",
        "measures": {"NDCG@10": 0.1 + 0.2, "MAP@10": 2 / 3, "Recall@100": 0.9},
        "queries": {"judged": 500, "answered": 498, "missing": 2, "extra": 1},
    }
    second: dict = {
        "name": "apps",
        "split": "test",
        "data_digest": {"sha256": "b" * 64},
        "status": "scored",
        "measures": {"NDCG@10": 1 / 7, "MAP@10": 0.125, "Recall@100": 0.5},
        "queries": {"judged": 3765, "answered": 3765, "missing": 0, "extra": 0},
    }
    if failed_task:
        second.update(status="failed", measures={}, failure={"code": FailureCode.TIMEOUT, "message": "encoding took over 3600 s"})
    scores = [first["measures"]["NDCG@10"]] + ([] if failed_task else [second["measures"]["NDCG@10"]])
    return build_report(
        benchmark={"name": "example", "version": "1.0", "primary_measure": "NDCG@10"},
        subject={"kind": "run-file", "name": "run.jsonl", "digest": {"sha256": EXAMPLE_DIGEST}},
        tasks=[first, second],
        aggregate={
            "measure": "NDCG@10",
            "score": None if failed_task else sum(scores) / len(scores),
            "complete": not failed_task,
            "groups": {},
        },
        policy="strict",
        started_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
        finished_at=datetime(2025, 1, 2, 3, 14, 5, 250000, tzinfo=UTC),
        labels={"training": "zero-shot"},
    )
