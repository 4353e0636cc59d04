"""Typed report pieces: valid when constructed, serialised in one place, and the assembled report still schema-checked."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from grader.errors import ReportError
from grader.failures import FailureCode
from grader.reports.assemble import failed_task, scored_task
from grader.reports.model import build_report, schema_violation
from grader.reports.pieces import Digest, Failure, QueryCoverage, TaskEntry

DIGEST = "ab" * 32
COVERAGE = QueryCoverage(judged=3, answered=2, missing=1, extra=0)


def entry(**changes: object) -> TaskEntry:
    fields: dict = {"name": "cosqa", "split": "test", "data_digest": Digest(DIGEST), "queries": COVERAGE, "measures": {"NDCG@10": 0.5}}
    fields.update(changes)
    return TaskEntry(**fields)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: Digest("AB" * 32), "hex digits"),
        (lambda: Digest("ab"), "hex digits"),
        (lambda: QueryCoverage(judged=1, answered=-1, missing=0, extra=0), "queries.answered"),
        (lambda: QueryCoverage(judged=1, answered=0, missing=2, extra=0), "2 missing of 1 judged"),
        (lambda: Failure("NOT_A_CODE", "x"), "not a failure code"),  # type: ignore[arg-type]
        (lambda: entry(name="../x"), "is not a name"),
        (lambda: entry(split=""), "split"),
        (lambda: entry(measures={"nDCG-10": 0.5}), "is not a measure"),
        (lambda: entry(measures={"NDCG@10": float("nan")}), "not a score"),
        (lambda: entry(measures={"NDCG@10": 1.5}), "not a score"),
        (lambda: entry(failure=Failure(FailureCode.TIMEOUT, "slow")), "a failed task has no measures"),
        (lambda: entry(extra={"status": "scored"}), "would overwrite"),
    ],
)
def test_a_piece_refuses_what_the_schema_would(make, words: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ReportError, match=words):
        make()


def test_pieces_serialise_to_what_the_assemblers_wrote_before() -> None:
    failed = TaskEntry(
        "apps", "test", Digest(DIGEST), QueryCoverage.none_answered(4), failure=Failure(FailureCode.OOM, "killed\x1b[2J", stderr="boom")
    )
    assert failed.status == "failed"
    assert failed.as_json() == {
        "name": "apps",
        "split": "test",
        "data_digest": {"sha256": DIGEST},
        "status": "failed",
        "failure": {"code": "OOM", "message": "killed\\x1b[2J", "stderr": "boom"},
        "measures": {},
        "queries": {"judged": 4, "answered": 0, "missing": 4, "extra": 0},
    }
    assert failed.as_json() == failed_task("apps", split="test", data_digest=DIGEST, code="OOM", message="killed\x1b[2J", judged=4, stderr="boom")
    assert entry(extra={"encoding": {"dimension": 8}}).as_json()["encoding"] == {"dimension": 8}


def test_a_report_of_pieces_is_schema_valid_and_mixes_with_dict_entries() -> None:
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    from grader.data.qrels import Qrels
    from grader.metrics.measures import parse_measures
    from grader.metrics.policy import Policy, evaluate
    from grader.runs.run import Run

    evaluation = evaluate(Qrels({"q1": {"d1": 1}}), Run.from_mapping({"q1": {"d1": 1.0}}), parse_measures(["NDCG@10"]), Policy.STRICT)
    run = Run.from_mapping({"q1": {"d1": 1.0}})
    scored = scored_task("alpha", split="test", data_digest=DIGEST, evaluation=evaluation, run=run)
    report = build_report(
        benchmark={"name": "b", "version": "1", "primary_measure": "NDCG@10"},
        subject={"kind": "run-file", "name": "run", "digest": {"sha256": DIGEST}},
        tasks=[entry(name="beta"), scored],
        aggregate={"measure": "NDCG@10", "score": 0.75, "complete": True, "groups": {}},
        policy="strict",
        started_at=moment,
        finished_at=moment,
    )
    assert schema_violation(report) is None
    assert report["tasks"]["beta"]["measures"] == {"NDCG@10": 0.5} and report["tasks"]["alpha"]["measures"] == {"NDCG@10": 1.0}
