"""Dedup-aware measures against values worked out by hand here, and the official numbers left unchanged."""

from __future__ import annotations

import json
import math

import pytest

from grader.integrity.dedup_measures import evaluate_dedup_aware, rewrite_rankings
from grader.metrics.measures import parse_measures
from grader.metrics.policy import evaluate
from grader.metrics.policy_name import Policy
from grader.runs.run import Run
from tests.cli_support import invoke

QRELS = {
    "q1": {"d1": 2, "d2": 1, "n1": 0},
    "q2": {"e1": 1},
    "q3": {"f1": 1},
}
# c1 is a copy of d1; c2 a copy of d2; g1 is a copy of e1 (q2's relevant one); nothing of q3 is copied.
CLUSTERS = [["c1", "d1"], ["c2", "d2"], ["e1", "g1"]]
RUN = {
    "q1": {"c1": 10.0, "x": 9.0, "d1": 8.0, "c2": 7.0, "d2": 6.0},
    "q2": {"g1": 5.0, "e1": 4.0},
    "q3": {"y": 3.0, "f1": 2.0},
}


def dcg(gains):
    return sum(gain / math.log2(rank + 2) for rank, gain in enumerate(gains))


def test_rewritten_rankings_by_hand():
    rewritten = rewrite_rankings(QRELS, Run.from_mapping(RUN), CLUSTERS, Policy.STRICT)
    # q1: c1 -> d1 (credited), x stays, d1 was credited already and its cluster has nothing left -> a fresh id,
    # c2 -> d2 (credited), d2 met again -> a fresh id. q2: g1 -> e1, e1 again -> fresh. q3 unchanged.
    assert rewritten["q1"][:2] == ["d1", "x"] and rewritten["q1"][3] == "d2"
    assert rewritten["q1"][2].startswith("dedup-aware:") and rewritten["q1"][4].startswith("dedup-aware:")
    assert rewritten["q2"][0] == "e1" and rewritten["q2"][1].startswith("dedup-aware:")
    assert rewritten["q3"] == ["y", "f1"]


def test_dedup_aware_ndcg_recall_mrr_equal_hand_computation():
    measures = parse_measures(["NDCG@10", "NDCG@3", "Recall@3", "MRR@10"])
    result = evaluate_dedup_aware(QRELS, Run.from_mapping(RUN), measures, Policy.STRICT, CLUSTERS).means()
    ideal_q1 = dcg([2, 1])
    ndcg10 = [dcg([2, 0, 0, 1, 0]) / ideal_q1, 1.0, dcg([0, 1]) / 1.0]
    ndcg3 = [dcg([2, 0, 0]) / ideal_q1, 1.0, dcg([0, 1]) / 1.0]
    recall3 = [1 / 2, 1.0, 1.0]
    mrr = [1.0, 1.0, 1 / 2]
    assert result["NDCG@10"] == pytest.approx(sum(ndcg10) / 3, abs=1e-12)
    assert result["NDCG@3"] == pytest.approx(sum(ndcg3) / 3, abs=1e-12)
    assert result["Recall@3"] == pytest.approx(sum(recall3) / 3, abs=1e-12)
    assert result["MRR@10"] == pytest.approx(sum(mrr) / 3, abs=1e-12)
    # The official ones by hand: copies earn nothing.
    official = evaluate(QRELS, Run.from_mapping(RUN), measures, Policy.STRICT).means()
    assert official["NDCG@10"] == pytest.approx((dcg([0, 0, 2, 0, 1]) / ideal_q1 + dcg([0, 1]) + dcg([0, 1])) / 3, abs=1e-12)


def test_no_clusters_gives_the_official_numbers():
    measures = parse_measures(None)
    for policy in Policy:
        official = evaluate(QRELS, Run.from_mapping(RUN), measures, policy).means()
        assert evaluate_dedup_aware(QRELS, Run.from_mapping(RUN), measures, policy, []).means() == pytest.approx(official, abs=1e-15)


def test_score_cli_prints_dedup_aware_beside_unchanged_official_numbers(tmp_path):
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, docs in QRELS.items() for d, g in docs.items()))
    run = tmp_path / "run.json"
    run.write_text(json.dumps(RUN))
    lint = tmp_path / "lint.json"
    task = {
        "task": "t",
        "data_digest": "0" * 64,
        "documents": 9,
        "queries": 3,
        "test_queries": 3,
        "candidate_pairs": 0,
        "checked_pairs": 0,
        "findings": {
            name: {"count": 0, "test_queries": 0, "share": 0.0, "examples": []}
            for name in (
                "exact_duplicate_documents",
                "near_duplicate_documents",
                "cross_split_queries",
                "relevant_document_duplicated",
                "empty_texts",
                "oversized_texts",
                "missing_judged_ids",
            )
        },
        "clusters": CLUSTERS,
    }
    settings = {
        "threshold": 0.8,
        "shingle_size": {"code": 10, "text": 5},
        "permutations": 96,
        "bands": 16,
        "rows": 6,
        "code_symbol_share": 0.25,
        "max_chars": 10,
        "examples": 1,
    }
    lint.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "kind": "grader-lint-report",
                "grader_version": "x",
                "created_at": "x",
                "benchmark": {"name": "b", "version": "1"},
                "subject": {"name": "b", "digest": {"sha256": "0" * 64}},
                "split": "test",
                "settings": settings,
                "tasks": [task],
            }
        )
    )
    plain = json.loads(invoke("score", "--qrels", qrels, "--run", run, "--measure", "NDCG@10", "--format", "json").stdout)
    both = json.loads(invoke("score", "--qrels", qrels, "--run", run, "--measure", "NDCG@10", "--format", "json", "--dedup-aware", lint).stdout)
    assert {k: v for k, v in both.items() if k != "dedup_aware"} == plain
    expected = (dcg([2, 0, 0, 1, 0]) / dcg([2, 1]) + 1.0 + dcg([0, 1])) / 3
    assert both["dedup_aware"]["measures"]["NDCG@10"] == pytest.approx(expected, abs=1e-12)
    table = invoke("score", "--qrels", qrels, "--run", run, "--measure", "NDCG@10", "--dedup-aware", lint).stdout
    assert "dedup-aware" in table and f"{plain['measures']['NDCG@10']:.6f}" in table
