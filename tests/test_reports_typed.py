"""A report read back through ``Report.from_json``: checked against the schema first, then typed."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest

from grader.errors import ReportError
from grader.reports.model import Report, build_report

START = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


def _report(*, members: bool = True) -> dict:
    values = {"q1": 0.25, "q2": 0.75}
    aggregate = {"measure": "NDCG@10", "score": None, "complete": False, "groups": {"g": 0.5}}
    if members:
        aggregate["group_members"] = {"g": ["t1"]}
    return build_report(
        benchmark={"name": "bench", "version": "2", "primary_measure": "NDCG@10"},
        subject={"kind": "onnx", "name": "model.onnx", "digest": {"sha256": "c" * 64}},
        tasks=[
            {
                "name": "t1",
                "split": "test",
                "data_digest": {"sha256": "d" * 64},
                "status": "scored",
                "measures": {"NDCG@10": 0.5, "MRR@10": 0.25},
                "queries": {"judged": 2, "answered": 2, "missing": 0, "extra": 0},
                "per_query": {"measure": "NDCG@10", "values": values},
            },
            {
                "name": "t2",
                "split": "test",
                "data_digest": {"sha256": "e" * 64},
                "status": "failed",
                "failure": {"code": "TIMEOUT", "message": "too slow"},
                "queries": {"judged": 4, "answered": 0, "missing": 4, "extra": 0},
            },
        ],
        aggregate=aggregate,
        policy="strict",
        started_at=START,
        finished_at=START,
    )


def test_a_report_reads_back_typed() -> None:
    data = _report()
    report = Report.from_json(data)
    assert report.data is data and report.grader_version == data["grader"]["version"]
    assert (report.subject_kind, report.subject_name, report.subject_digest, report.policy) == ("onnx", "model.onnx", "c" * 64, "strict")
    scored, failed = report.tasks["t1"], report.tasks["t2"]
    assert scored.scored and scored.failure_code is None and scored.data_digest == "d" * 64 and scored.measures["MRR@10"] == 0.25
    assert scored.per_query is not None and scored.per_query.measure == "NDCG@10" and dict(scored.per_query.values) == {"q1": 0.25, "q2": 0.75}
    assert not failed.scored and failed.failure_code == "TIMEOUT" and failed.per_query is None and dict(failed.measures) == {}
    aggregate = report.aggregate
    assert (aggregate.measure, aggregate.score, aggregate.complete) == ("NDCG@10", None, False)
    assert aggregate.group_members == {"g": ("t1",)} and aggregate.members_recorded
    older = Report.from_json(_report(members=False)).aggregate  # reports before group_members was recorded
    assert older.group_members == {} and not older.members_recorded and older.groups == {"g": 0.5}


@pytest.mark.parametrize(
    ("change", "pointer"),
    [
        (lambda r: r["tasks"]["t1"].pop("split"), "/tasks/t1"),
        (lambda r: r["tasks"]["t1"]["per_query"]["values"].update(q3=1.5), "/tasks/t1/per_query/values/q3"),
        (lambda r: r["aggregate"].update(measure="nDCG"), "/aggregate/measure"),
        (lambda r: r.pop("subject"), "/"),
    ],
)
def test_a_report_that_breaks_the_schema_is_refused_with_its_pointer(change, pointer: str) -> None:  # type: ignore[no-untyped-def]
    data = copy.deepcopy(_report())
    change(data)
    with pytest.raises(ReportError, match=f"invalid report at {pointer}:"):
        Report.from_json(data)
    with pytest.raises(ReportError, match="invalid report at /:"):
        Report.from_json(["not", "a", "report"])
