"""``Success@k`` in a report is MTEB's ``hit_rate_at_k``: the export writes it for any k MTEB evaluates."""

from __future__ import annotations

import pytrec_eval

from grader.export.mteb import mteb_scores
from grader.metrics.measures import parse_measures
from grader.metrics.policy import Policy, evaluate
from grader.runs.run import Run

QRELS = {"q1": {"a": 1, "b": 2}, "q2": {"c": 1}, "q3": {"d": 0, "e": 3}, "q4": {"f": 1}, "q5": {"g": -1, "h": 1}}
RUN = {
    "q1": {"x": 3.0, "a": 2.0, "b": 1.0},
    "q2": {"c": 1.0},
    "q3": {f"n{i}": float(30 - i) for i in range(14)} | {"e": 0.5},  # e at rank 15
    "q4": {"w": 3.0, "x": 2.0, "y": 1.0, "f": 0.5},  # f at rank 4
    "q5": {"g": 2.0, "h": 1.0},
}


def test_success_at_k_is_mtebs_hit_rate() -> None:
    # MTEB's parse_metrics_from_scores: pytrec_eval's success_k, summed over its queries, / their number, rounded to 5.
    scores = pytrec_eval.RelevanceEvaluator(QRELS, {"success.1,3,5,10,20"}).evaluate(RUN)
    mteb = {k: round(sum(row[f"success_{k}"] for row in scores.values()) / len(scores), 5) for k in (1, 3, 5, 10, 20)}
    assert len(set(mteb.values())) >= 3
    measures = parse_measures(["Success@1,Success@3,Success@5,Success@10,Success@20,Success@7,P@1"])
    means = evaluate(QRELS, Run.from_mapping(RUN), measures, Policy.STRICT).means()
    exported = mteb_scores(means)
    assert {k: exported[f"hit_rate_at_{k}"] for k in mteb} == mteb
    assert "hit_rate_at_7" not in exported  # MTEB evaluates k in 1, 3, 5, 10, 20, 100, 1000 only
