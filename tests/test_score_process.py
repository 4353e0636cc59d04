"""The server's scoring processes (grader/grading/score_process.py): a report, a refusal, an overrun, and recovery after it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from grader.data.registry import resolve_benchmark
from grader.errors import TaskFailure
from grader.failures import FailureCode
from grader.grading.score_process import score_in_child
from grader.reports.model import format_timestamp
from grader.runs.compact import canonical_order, encode_run
from grader.runs.run import Run

pytestmark = pytest.mark.slow  # it spawns the scoring processes


def _job(tmp_path: Path) -> dict[str, Any]:
    task = resolve_benchmark("mini").task("text2code")
    judged = task.qrels("test")
    corpus = canonical_order([d.id for d in task.iter_corpus()])
    queries = canonical_order([q.id for q in task.iter_queries() if q.id in judged])
    # each query's judged documents by relevance, the ideal ranking: every query scores NDCG@10 = 1 (by definition, not by the scorer)
    ranked = {q: sorted(judged[q].items(), key=lambda item: -item[1]) for q in queries}
    run = Run.from_mapping({q: {doc: float(len(docs) - i) for i, (doc, _rel) in enumerate(docs)} for q, docs in ranked.items()})
    (tmp_path / "text2code.run").write_bytes(encode_run(run, corpus=corpus, queries=queries, depth=1000))
    now = format_timestamp(datetime.now(UTC))
    facts = {
        "subject": {"name": "x", "kind": "onnx", "digest": {"sha256": "0" * 64}},
        "sandbox": None,
        "labels": {},
        "started_at": now,
        "finished_at": now,
    }
    facts["tasks"] = {"text2code": {"failure": None}}
    return {
        "benchmark": "mini",
        "split": "test",
        "tasks": ["text2code"],
        "facts": facts,
        "runs": {"text2code": str(tmp_path / "text2code.run")},
        "top_k": 1000,
        "policy": "strict",
    }


def test_scores_refuses_and_recovers_after_an_overrun(tmp_path: Path) -> None:
    job = _job(tmp_path)
    assert all(judgements for judgements in resolve_benchmark("mini").task("text2code").qrels("test").values())
    assert score_in_child(job)["tasks"]["text2code"]["measures"]["NDCG@10"] == 1.0
    with pytest.raises(TaskFailure) as refused:
        score_in_child({**job, "tasks": ["code2code"]})
    assert refused.value.code is FailureCode.INFRA and "do not name the job's tasks" in str(refused.value)
    with pytest.raises(TaskFailure, match="took longer"):
        score_in_child(job, timeout_s=0.001)
    assert score_in_child(job)["aggregate"]["score"] == 1.0  # a new pool after the overrun


def test_a_claimed_grade_warms_a_scoring_process_with_the_scorer_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.grading import score_process
    from tests.score_probe import loaded

    monkeypatch.setattr(score_process, "_pool", None)  # a pool of its own: no process another test warmed
    warmed = score_process.warm()
    assert warmed is not None
    warmed.result(timeout=120)
    pool = score_process._current_pool()
    try:
        # The warm job is done, so its process is idle and takes this job too (no second process is started).
        assert pool.submit(loaded, "grader.grading.scoring").result(timeout=120)
        assert len(pool._processes) == 1  # type: ignore[attr-defined]
    finally:
        score_process._discard(pool)
