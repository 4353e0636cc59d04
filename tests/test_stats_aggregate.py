"""The benchmark's own aggregation over per-query values: CoIR's groups, subsets, mismatched entries."""

from __future__ import annotations

import json
import math
from datetime import UTC
from pathlib import Path

import numpy as np
import pytest

from grader.data.benchmark import BenchmarkSpec
from grader.errors import UsageError
from grader.stats.aggregate import ScoreTable
from grader.stats.compare import compare

COIR = Path(__file__).resolve().parent.parent / "grader" / "bundled" / "coir" / "benchmark.json"


def coir_table(seed: int = 0, entries: int = 2) -> tuple[ScoreTable, BenchmarkSpec, list[dict[str, dict[str, float]]]]:
    spec = BenchmarkSpec.from_json(json.loads(COIR.read_text()), path=COIR)
    rng = np.random.default_rng(seed)
    sizes = {task: int(rng.integers(5, 40)) for task in spec.tasks}
    per_entry = [{task: {f"{task}-q{i}": float(rng.random()) for i in range(size)} for task, size in sizes.items()} for _ in range(entries)]
    table = ScoreTable.from_values([f"e{i}" for i in range(entries)], "NDCG@10", per_entry, spec.groups)
    return table, spec, per_entry


def test_coir_score_averages_the_codesearchnet_languages_first() -> None:
    table, spec, per_entry = coir_table()
    for row, entry in enumerate(per_entry):
        task_scores = {task: math.fsum(values.values()) / len(values) for task, values in entry.items()}
        # Exactly the benchmark's own aggregate: 10 units, the two CodeSearchNet groups averaged first.
        assert table.score(row) == spec.aggregate(task_scores)["score"]
        by_hand = [
            task_scores[t]
            for t in (
                "apps",
                "cosqa",
                "synthetic-text2sql",
                "codetrans-dl",
                "codetrans-contest",
                "stackoverflow-qa",
                "codefeedback-st",
                "codefeedback-mt",
            )
        ]
        for group in ("CodeSearchNet", "CodeSearchNet-ccr"):
            by_hand.append(sum(task_scores[t] for t in spec.groups[group]) / 6)
        assert table.score(row) == pytest.approx(sum(by_hand) / 10, abs=1e-15)
        # The linear form the bootstrap uses gives the same number.
        assert float(table.layout.query_weights @ table.values[row]) == pytest.approx(table.score(row), abs=1e-14)
    weights = dict(zip(table.layout.leaves, table.layout.leaf_weights))
    assert weights["apps"] == pytest.approx(1 / 10) and weights["CodeSearchNet-go"] == pytest.approx(1 / 60)
    assert table.layout.leaf_weights.sum() == pytest.approx(1.0, abs=1e-15)


def test_bootstrap_interval_of_a_grouped_benchmark_holds_its_score() -> None:
    table, _, _ = coir_table(1, entries=3)
    result = compare(table, resamples=999, seed=0)
    for entry in result.entries:
        assert entry.ci_low < entry.score < entry.ci_high
    assert [e.rank for e in result.entries] == [1, 2, 3]
    assert len(result.pairs) == 3


def test_restrict_scores_a_subset_of_queries() -> None:
    table, _, per_entry = coir_table(2)
    keep = {task: [q for i, q in enumerate(sorted(values)) if i % 3 == 0] for task, values in per_entry[0].items()}
    keep["apps"] = []  # a task with no kept query leaves the aggregation
    part = table.restrict(keep)
    assert "apps" not in part.layout.leaves and part.layout.total == sum(len(v) for v in keep.values())
    spec = part.layout.spec("NDCG@10")
    for row, entry in enumerate(per_entry):
        task_scores = {t: math.fsum(entry[t][q] for q in ids) / len(ids) for t, ids in keep.items() if ids}
        assert part.score(row) == spec.aggregate(task_scores)["score"]


def test_entries_over_different_queries_are_refused() -> None:
    a = {"t": {"q1": 0.5, "q2": 0.25}}
    with pytest.raises(UsageError, match=r"not over the same queries of task 't' \(2 vs 2 queries; e.g. 'q2' is in only one\)"):
        ScoreTable.from_values(["a", "b"], "NDCG@10", [a, {"t": {"q1": 0.5, "q3": 0.25}}])
    with pytest.raises(UsageError, match="not over the same tasks"):
        ScoreTable.from_values(["a", "b"], "NDCG@10", [a, {"u": {"q1": 0.5, "q2": 0.25}}])
    with pytest.raises(UsageError, match="2 vs 3 queries|3 vs 2 queries"):
        ScoreTable.from_values(["a", "b"], "NDCG@10", [a, {"t": {"q1": 0.5, "q2": 0.25, "q3": 0.0}}])


def test_the_server_example_in_the_docs_runs() -> None:
    import re

    from grader.stats.partition import new_secret

    docs = (Path(__file__).resolve().parent.parent / "docs" / "statistics.md").read_text()
    block = re.search(r"## Calling it from a server.*?```python\n(.*?)```", docs, re.DOTALL)
    assert block, "docs/statistics.md lost its server example"
    rng = np.random.default_rng(0)
    per_entry = [{t: {f"{t}{i}": float(rng.random()) for i in range(40)} for t in ("a", "b", "c")} for _ in range(3)]
    scope = {"names": ["x", "y", "z"], "per_entry": per_entry, "groups": {"G": ["a", "b"]}, "secret": new_secret()}
    exec(block.group(1).replace("resamples=10_000", "resamples=999"), scope)
    board = scope["board"]
    assert board.queries == 3 * 12 and len(board.pairs) == 3  # 0.3 of 40 queries per task are public


def test_reports_name_the_members_of_each_graded_group() -> None:
    from datetime import datetime

    from grader.reports.model import build_report

    spec = BenchmarkSpec.from_json(json.loads(COIR.read_text()), path=COIR)
    graded = ["apps", "CodeSearchNet-go", "CodeSearchNet-ruby"]
    aggregate = spec.aggregate({"apps": 0.5, "CodeSearchNet-go": 0.25, "CodeSearchNet-ruby": 0.75}, tasks=graded)
    assert aggregate["group_members"] == {"CodeSearchNet": ["CodeSearchNet-go", "CodeSearchNet-ruby"]}
    assert "group_members" not in spec.aggregate({"apps": 0.5}, tasks=["apps"])  # nothing grouped was graded
    now = datetime.now(UTC)
    tasks = [
        {
            "name": t,
            "split": "test",
            "data_digest": {"sha256": "0" * 64},
            "status": "scored",
            "measures": {"NDCG@10": v},
            "queries": {"judged": 1, "answered": 1, "missing": 0, "extra": 0},
            "per_query": {"measure": "NDCG@10", "values": {"q": v}},
        }
        for t, v in (("apps", 0.5), ("CodeSearchNet-go", 0.25), ("CodeSearchNet-ruby", 0.75))
    ]
    report = build_report(
        benchmark={"name": "coir", "version": "v", "primary_measure": "NDCG@10"},
        subject={"kind": "run-file", "name": "r", "digest": {"sha256": "1" * 64}},
        tasks=tasks,
        aggregate=aggregate,
        policy="strict",
        started_at=now,
        finished_at=now,
    )
    from grader.stats.reports import table_from_reports

    table = table_from_reports(["r.json"], [report])
    assert table.layout.groups == {"CodeSearchNet": ("CodeSearchNet-go", "CodeSearchNet-ruby")}
    assert table.score(0) == report["aggregate"]["score"] == 0.5
