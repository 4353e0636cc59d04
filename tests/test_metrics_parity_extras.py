"""Success@k, Rprec@k, bpref@k and the relevance level, against the real pytrec_eval (trec_eval).

The generated adversarial cases of ``tests/test_metrics_parity.py`` (ties, numeric-looking
and unicode ids, graded, zero and negative judgements, missing, empty and extra queries,
float32-exact scores, so pytrec_eval's float32 ranking is the grader's float64 one) are
scored under ``strict`` at relevance levels 1, 2 and 3 (trec_eval's ``-l``) and compared,
per query and in the mean, to 1e-12:

* ``Success@k`` with pytrec_eval's ``success.k``;
* ``Rprec@k`` and ``bpref@k`` ("trec_eval's measure of the ranking cut at k") with
  pytrec_eval's uncut ``Rprec`` and ``bpref`` of each ranking cut to its top k in trec
  order (the whole ranking when it is no longer than k);
* the five default families too, at levels 2 and 3: every measure but NDCG takes
  ``relevance_level``, NDCG's gains stay the judgements (as trec_eval's ``ndcg_cut``).
"""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import pytrec_eval

from grader.errors import UsageError
from grader.metrics.measures import Family, Measure, parse_measure, parse_measures
from grader.metrics.policy import Policy, evaluate
from grader.runs.run import Run

try:  # tests/ as a package, or tests/ on sys.path (pytest's default "prepend" mode)
    from tests.reference_trec import CUTOFFS, trec_sorted
    from tests.test_metrics_parity import N_PARITY_CASES, SMALL_POOL, TOLERANCE, generate_case
except ImportError:  # pragma: no cover - depends on how pytest imports the tests
    from reference_trec import CUTOFFS, trec_sorted
    from test_metrics_parity import N_PARITY_CASES, SMALL_POOL, TOLERANCE, generate_case

EXTRA_FAMILIES = (Family.SUCCESS, Family.RPREC, Family.BPREF)
MEASURES = parse_measures(None) + tuple(Measure(family, k) for family in EXTRA_FAMILIES for k in CUTOFFS)
NAMES = [str(measure) for measure in MEASURES]
_CUTS = ",".join(str(k) for k in CUTOFFS)
PYTREC_MEASURES = {f"ndcg_cut.{_CUTS}", f"map_cut.{_CUTS}", f"recall.{_CUTS}", f"P.{_CUTS}", f"success.{_CUTS}", "recip_rank", "Rprec", "bpref"}
LEVELS = (1, 2, 3)


def _cut(run_map: dict[str, dict[str, float]], k: int) -> dict[str, dict[str, float]]:
    """Each ranking cut to its top k in trec order (scores are float32-exact: pytrec_eval's order too)."""
    return {qid: {doc: docs[doc] for doc in trec_sorted(docs)[:k]} for qid, docs in run_map.items()}


def pytrec_rows(qrels, run_map, level: int) -> dict[str, dict[str, float]]:
    """pytrec_eval's values under the grader's names, for every judged query (0 for one the run lacks)."""
    evaluator = pytrec_eval.RelevanceEvaluator(copy.deepcopy(qrels), PYTREC_MEASURES, relevance_level=level)
    full = evaluator.evaluate(copy.deepcopy(run_map))
    cut = {k: full if all(len(docs) <= k for docs in run_map.values()) else evaluator.evaluate(_cut(run_map, k)) for k in CUTOFFS}
    rows: dict[str, dict[str, float]] = {}
    for qid in qrels:
        row = full.get(qid)
        if row is None:
            rows[qid] = dict.fromkeys(NAMES, 0.0)
            continue
        rr = row["recip_rank"]
        out: dict[str, float] = {}
        for k in CUTOFFS:
            out[f"NDCG@{k}"] = row[f"ndcg_cut_{k}"]
            out[f"MAP@{k}"] = row[f"map_cut_{k}"]
            out[f"Recall@{k}"] = row[f"recall_{k}"]
            out[f"P@{k}"] = row[f"P_{k}"]
            out[f"MRR@{k}"] = rr if rr > 0 and round(1 / rr) <= k else 0.0
            out[f"Success@{k}"] = row[f"success_{k}"]
            out[f"Rprec@{k}"] = cut[k][qid]["Rprec"]
            out[f"bpref@{k}"] = cut[k][qid]["bpref"]
        rows[qid] = out
    return rows


def check_against_pytrec(qrels, run_map, level: int) -> dict[str, dict[str, float]]:
    evaluation = evaluate(qrels, Run.from_mapping(run_map), MEASURES, Policy.STRICT, relevance_level=level)
    got = evaluation.per_query.as_dict()
    want = pytrec_rows(qrels, run_map, level)
    for qid in qrels:
        bad = {name: (got[qid][name], want[qid][name]) for name in NAMES if not abs(got[qid][name] - want[qid][name]) <= TOLERANCE}
        assert not bad, f"level {level}, query {qid!r}: (got, pytrec_eval) {bad}"
    means = evaluation.means()
    for name in NAMES:
        mean = sum(want[qid][name] for qid in qrels) / len(qrels)
        assert abs(means[name] - mean) <= TOLERANCE, (level, name, means[name], mean)
    return got


@pytest.mark.parametrize("seed", range(0, N_PARITY_CASES, 2))
def test_parity_with_pytrec_eval(seed: int) -> None:
    qrels, run_map, _ = generate_case(seed)
    for level in LEVELS:
        check_against_pytrec(qrels, run_map, level)


def test_the_cases_exercise_the_new_measures() -> None:
    """bpref's preferences, Rprec's cut at R and the levels all matter on the generated cases."""
    seen = dict.fromkeys(["bpref_partial", "rprec_partial", "success_differs_from_p", "level_changes_bpref", "level_keeps_ndcg"], 0)
    for seed in range(0, N_PARITY_CASES, 2):
        qrels, run_map, _ = generate_case(seed)
        run = Run.from_mapping(run_map)
        by_level = {level: evaluate(qrels, run, MEASURES, Policy.STRICT, relevance_level=level).per_query.as_dict() for level in (1, 2)}
        for row, row2 in zip(by_level[1].values(), by_level[2].values(), strict=True):
            seen["bpref_partial"] += 0 < row["bpref@1000"] < 1
            seen["rprec_partial"] += 0 < row["Rprec@1000"] < 1
            seen["success_differs_from_p"] += row["Success@10"] != row["P@10"]
            seen["level_changes_bpref"] += row["bpref@1000"] != row2["bpref@1000"]
            seen["level_keeps_ndcg"] += row["NDCG@10"] == row2["NDCG@10"] > 0 and row["P@10"] != row2["P@10"]
    assert all(count >= 5 for count in seen.values()), seen


def test_rankings_longer_than_the_cutoffs() -> None:
    """Rprec@k and bpref@k see only the top k; beyond rank 1000 nothing counts."""
    rng = random.Random(40_000)
    docs = [f"d{i}" for i in range(1500)] + SMALL_POOL
    qrels, run_map = {}, {}
    for qid in ("q1", "10", "é"):
        ranked = rng.sample(docs, rng.randint(1001, 1400))
        judged = rng.sample(ranked, 200) + rng.sample(docs, 20)
        qrels[qid] = {doc: rng.choice([0, 0, 1, 2, 3, -1]) for doc in judged}
        qrels[qid][judged[0]] = 2
        run_map[qid] = {doc: rng.choice([0.0, 1.0, float(np.float32(rng.random()))]) for doc in ranked}
    for level in LEVELS:
        check_against_pytrec(qrels, run_map, level)


def test_ties_are_broken_as_trec_eval_breaks_them() -> None:
    """All scores equal: the order is doc id descending, byte-wise; bpref counts the non-relevant above."""
    qrels = {"q": {"b": 1, "a": 0, "c": 0, "10": 1, "9": 0}}
    run_map = {"q": dict.fromkeys(["a", "b", "c", "9", "10"], 1.0)}  # trec order: c b a 9 10
    got = check_against_pytrec(qrels, run_map, 1)["q"]
    # b follows one non-relevant (c): 1 - 1/2; 10 follows three: 1 - min(3, 2)/2 = 0.
    assert got["bpref@1000"] == (1 - 1 / 2 + 0.0) / 2
    assert got["Rprec@1000"] == 1 / 2 and got["Success@1"] == 0.0 and got["Success@3"] == 1.0


def test_names_and_levels() -> None:
    assert parse_measure("success_10") == Measure(Family.SUCCESS, 10) == parse_measure("SUCCESS@10")
    assert parse_measure("rprec@5") == Measure(Family.RPREC, 5) and str(Measure(Family.BPREF, 1000)) == "bpref@1000"
    assert Measure(Family.SUCCESS, 5).trec_name == "success_5" and Measure(Family.BPREF, 5).trec_name is None
    assert not {Family.SUCCESS, Family.RPREC, Family.BPREF} & {measure.family for measure in parse_measures(None)}
    with pytest.raises(UsageError, match="relevance level must be at least 1"):
        evaluate({"q": {"a": 1}}, Run.from_mapping({"q": {"a": 1.0}}), MEASURES, relevance_level=0)
