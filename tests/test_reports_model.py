"""Tests of the report model: building, validation with JSON pointers, deterministic bytes."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pytest

import grader
from grader.errors import ReportError
from grader.reports.model import build_report, report_json, validate_report
from grader.schemas import load_schema, validator

START = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


def _inputs() -> dict:
    """Keyword arguments of a valid two-task build_report call."""
    return {
        "benchmark": {"name": "bench", "version": "2", "primary_measure": "NDCG@10", "tasks": ["t1", "t2"]},
        "subject": {"kind": "onnx", "name": "model.onnx", "digest": {"sha256": "c" * 64}, "opset": 17},
        "tasks": [
            {
                "name": "t1",
                "split": "test",
                "data_digest": {"sha256": "d" * 64},
                "status": "scored",
                "measures": {"NDCG@10": 0.1 + 0.2, "MRR@10": 1 / 3},
                "queries": {"judged": 10, "answered": 9, "missing": 1, "extra": 0},
            },
            {
                "name": "t2",
                "split": "dev",
                "data_digest": {"sha256": "e" * 64},
                "status": "scored",
                "failure": None,
                "measures": {"NDCG@10": 2 / 7, "MRR@10": 0.5},
                "queries": {"judged": 4, "answered": 4, "missing": 0, "extra": 3},
            },
        ],
        "aggregate": {"measure": "NDCG@10", "score": ((0.1 + 0.2) + 2 / 7) / 2, "complete": True, "groups": {}},
        "policy": "coir",
        "started_at": START,
        "finished_at": START + timedelta(minutes=5),
        "sandbox": {"cpus": 4},
        "labels": {"training": "supervised"},
    }


def _reverse_dicts(value):
    """The same JSON value with every dict's insertion order reversed."""
    if isinstance(value, dict):
        return {key: _reverse_dicts(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [_reverse_dicts(item) for item in value]
    return value


def test_builds_the_documented_structure():
    inputs = _inputs()
    report = build_report(**inputs)
    assert report["schema_version"] == "2"
    assert report["grader"] == {"name": "grader", "version": grader.__version__}
    # Only the three benchmark fields the report defines are kept.
    assert report["benchmark"] == {"name": "bench", "version": "2", "primary_measure": "NDCG@10"}
    assert report["subject"] == inputs["subject"]
    assert sorted(report["tasks"]) == ["t1", "t2"]
    task = report["tasks"]["t1"]
    assert "name" not in task
    assert task["failure"] is None
    assert task["measures"] == inputs["tasks"][0]["measures"]
    assert report["started_at"] == "2025-03-04T05:06:07Z"
    assert report["finished_at"] == "2025-03-04T05:11:07Z"
    assert report["sandbox"] == {"cpus": 4}
    assert report["labels"] == {"training": "supervised"}
    validate_report(report)


def test_labels_default_to_empty_object_and_sandbox_to_null():
    inputs = _inputs()
    del inputs["labels"], inputs["sandbox"]
    report = build_report(**inputs)
    assert report["labels"] == {}
    assert report["sandbox"] is None


def test_timestamps_are_converted_to_utc_with_z():
    inputs = _inputs()
    plus_two = timezone(timedelta(hours=2))
    inputs["started_at"] = START.astimezone(plus_two)
    inputs["finished_at"] = (START + timedelta(seconds=1, microseconds=5)).astimezone(plus_two)
    report = build_report(**inputs)
    assert report["started_at"] == "2025-03-04T05:06:07Z"
    assert report["finished_at"] == "2025-03-04T05:06:08.000005Z"


def test_naive_or_backwards_timestamps_are_refused():
    inputs = _inputs()
    inputs["started_at"] = datetime(2025, 1, 1)
    with pytest.raises(ReportError, match="time zone"):
        build_report(**inputs)
    inputs = _inputs()
    inputs["finished_at"] = START - timedelta(seconds=1)
    with pytest.raises(ReportError, match="/finished_at"):
        build_report(**inputs)


def test_floats_keep_full_precision():
    inputs = _inputs()
    report = build_report(**inputs)
    text = report_json(report).decode()
    for given in inputs["tasks"][0]["measures"].values():
        assert repr(given) in text
    reread = json.loads(text)
    assert reread["tasks"]["t1"]["measures"] == inputs["tasks"][0]["measures"]
    assert reread["aggregate"]["score"] == inputs["aggregate"]["score"]


def test_numpy_scalars_become_plain_numbers_bit_for_bit():
    inputs = _inputs()
    value = np.float32(1) / np.float32(3)
    inputs["tasks"][0]["measures"]["NDCG@10"] = value
    inputs["tasks"][0]["queries"]["judged"] = np.int64(10)
    inputs["aggregate"]["score"] = np.float64(inputs["aggregate"]["score"])
    report = build_report(**inputs)
    stored = report["tasks"]["t1"]["measures"]["NDCG@10"]
    assert type(stored) is float and stored == float(value)
    assert type(report["tasks"]["t1"]["queries"]["judged"]) is int
    assert type(report["aggregate"]["score"]) is float
    report_json(report)


def test_report_bytes_are_deterministic_and_independent_of_input_order():
    first = report_json(build_report(**_inputs()))
    shuffled = _reverse_dicts(_inputs())
    shuffled["tasks"] = list(reversed(shuffled["tasks"]))
    shuffled["started_at"], shuffled["finished_at"] = START, START + timedelta(minutes=5)
    assert report_json(build_report(**shuffled)) == first
    # Graded again later: only the two timestamp lines differ.
    later = _inputs()
    later["started_at"] += timedelta(days=1)
    later["finished_at"] += timedelta(days=1)
    again = report_json(build_report(**later))
    assert len(first.splitlines()) == len(again.splitlines())
    differing = [pair for pair in zip(first.splitlines(), again.splitlines(), strict=True) if pair[0] != pair[1]]
    assert [a.split(b":")[0].strip() for a, _ in differing] == [b'"finished_at"', b'"started_at"']


def test_report_json_format():
    report = build_report(**_inputs())
    data = report_json(report)
    assert data.endswith(b"}\n") and not data.endswith(b"\n\n")
    assert data == (json.dumps(json.loads(data), sort_keys=True, indent=2) + "\n").encode()
    assert b'\n  "aggregate": {\n    "complete": true,' in data


def test_report_json_refuses_nan():
    report = build_report(**_inputs())
    broken = copy.deepcopy(report)
    broken["aggregate"]["score"] = float("nan")
    with pytest.raises(ReportError):
        report_json(broken)


@pytest.mark.parametrize(
    ("edit", "pointer"),
    [
        (lambda i: i["tasks"][0]["measures"].update(foo=0.5), "/tasks/t1/measures/foo"),
        (lambda i: i["tasks"][0]["measures"].update({"NDCG@0": 0.5}), "/tasks/t1/measures/NDCG@0"),
        (lambda i: i["tasks"][1]["measures"].update({"NDCG@10": 1.5}), "/tasks/t2/measures/NDCG@10"),
        (lambda i: i["tasks"][1]["measures"].update({"NDCG@10": "0.5"}), "/tasks/t2/measures/NDCG@10"),
        (lambda i: i["tasks"][0]["queries"].update(judged=-1), "/tasks/t1/queries/judged"),
        (lambda i: i["tasks"][0].update(name="bad name"), "/tasks/bad name"),
        (lambda i: i["subject"].update(kind="zip"), "/subject/kind"),
        (lambda i: i["subject"]["digest"].update(sha256="ABC"), "/subject/digest/sha256"),
        (lambda i: i.update(policy="lenient"), "/policy"),
        (lambda i: i["benchmark"].update(primary_measure="ndcg"), "/benchmark/primary_measure"),
        (lambda i: i["aggregate"].update(score=None), "/aggregate/score"),
        (lambda i: i["aggregate"]["groups"].update(g=2.0), "/aggregate/groups/g"),
        (lambda i: i["tasks"][0]["measures"].update({"NDCG@10": float("inf")}), "/tasks/t1/measures/NDCG@10"),
    ],
)
def test_invalid_reports_are_refused_naming_the_pointer(edit, pointer):
    inputs = _inputs()
    edit(inputs)
    with pytest.raises(ReportError) as caught:
        build_report(**inputs)
    assert f"at {pointer}:" in str(caught.value)


def test_failed_task_rules():
    inputs = _inputs()
    inputs["tasks"][1].update(status="failed", measures={}, failure={"code": "OOM", "message": "out of memory"})
    inputs["aggregate"].update(score=None, complete=False)
    report = build_report(**inputs)
    assert report["tasks"]["t2"]["failure"] == {"code": "OOM", "message": "out of memory"}

    with_measures = copy.deepcopy(inputs)
    with_measures["tasks"][1]["measures"] = {"NDCG@10": 0.1}
    with pytest.raises(ReportError, match="/tasks/t2/measures"):
        build_report(**with_measures)

    unknown_code = copy.deepcopy(inputs)
    unknown_code["tasks"][1]["failure"]["code"] = "SEGFAULT"
    with pytest.raises(ReportError, match="/tasks/t2/failure"):
        build_report(**unknown_code)

    claims_complete = copy.deepcopy(inputs)
    claims_complete["aggregate"].update(complete=True, score=0.5)
    with pytest.raises(ReportError, match="/aggregate/complete"):
        build_report(**claims_complete)

    scored_with_failure = _inputs()
    scored_with_failure["tasks"][0]["failure"] = {"code": "OOM", "message": "x"}
    with pytest.raises(ReportError, match="/tasks/t1/failure"):
        build_report(**scored_with_failure)


def test_aggregate_agrees_with_failures_and_scored_tasks_need_the_measure():
    inputs = _inputs()
    inputs["tasks"][1].update(status="failed", measures={}, failure={"code": "TIMEOUT", "message": "slow"})
    with pytest.raises(ReportError, match="/aggregate/complete"):
        build_report(**inputs)
    inputs["aggregate"].update(complete=False)
    with pytest.raises(ReportError, match="/aggregate/score"):
        build_report(**inputs)
    inputs["aggregate"].update(score=None)
    assert build_report(**inputs)["aggregate"]["score"] is None
    # a subset of the benchmark graded: scored, but not complete
    subset = _inputs()
    subset["aggregate"].update(complete=False)
    assert build_report(**subset)["aggregate"]["complete"] is False
    inputs = _inputs()
    del inputs["tasks"][0]["measures"]["NDCG@10"]
    with pytest.raises(ReportError, match="/tasks/t1/measures"):
        build_report(**inputs)


def test_duplicate_task_names_are_refused():
    inputs = _inputs()
    inputs["tasks"][1]["name"] = "t1"
    with pytest.raises(ReportError, match="twice"):
        build_report(**inputs)


def test_schema_is_versioned_draft_2020_12():
    schema = load_schema("report")
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].endswith("/v2.json")
    validator("report")  # checks the schema against its metaschema
