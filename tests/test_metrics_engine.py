"""Hand-derived unit tests of the metric engine, run ordering and the two policies."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from grader.metrics.measures import parse_measures
from grader.metrics.policy import Policy, evaluate
from grader.runs.run import InvalidRun, Run

ALL = parse_measures(None)
LOG2_3 = math.log2(3)
LOG2_5 = math.log2(5)


def scores_of(qrels, run_map, policy=Policy.STRICT, measures=ALL):
    return evaluate(qrels, Run.from_mapping(run_map), measures, policy)


def assert_values(got: dict[str, float], expected: dict[str, float]) -> None:
    for name, want in expected.items():
        assert got[name] == pytest.approx(want, abs=1e-12, rel=0), (name, got[name], want)


# --------------------------------------------------------------------------- hand-derived values


def test_binary_relevance_at_ranks_2_and_4() -> None:
    # Ranking d1..d5; d2 and d4 relevant (rel 1), d1 judged 0 (non-relevant).
    qrels = {"q": {"d2": 1, "d4": 1, "d1": 0}}
    run = {"q": {"d1": 5.0, "d2": 4.0, "d3": 3.0, "d4": 2.0, "d5": 1.0}}
    got = scores_of(qrels, run).per_query.as_dict()["q"]
    assert_values(
        got,
        {
            # DCG@5 = 1/log2(3) + 1/log2(5); ideal (2 relevant) = 1/log2(2) + 1/log2(3).
            "NDCG@5": (1 / LOG2_3 + 1 / LOG2_5) / (1 + 1 / LOG2_3),
            "NDCG@10": (1 / LOG2_3 + 1 / LOG2_5) / (1 + 1 / LOG2_3),
            # DCG@3 = 1/log2(3); ideal@3 = 1 + 1/log2(3).
            "NDCG@3": (1 / LOG2_3) / (1 + 1 / LOG2_3),
            "NDCG@1": 0.0,
            # AP: precision 1/2 at rank 2, 2/4 at rank 4, over 2 relevant.
            "MAP@5": (1 / 2 + 2 / 4) / 2,
            "MAP@3": (1 / 2) / 2,
            "MAP@1": 0.0,
            "Recall@1": 0.0,
            "Recall@3": 1 / 2,
            "Recall@5": 1.0,
            "Recall@1000": 1.0,
            # P@k divides by k, also beyond the list's length.
            "P@1": 0.0,
            "P@3": 1 / 3,
            "P@5": 2 / 5,
            "P@10": 2 / 10,
            "P@100": 2 / 100,
            "P@1000": 2 / 1000,
            # First relevant at rank 2.
            "MRR@1": 0.0,
            "MRR@3": 1 / 2,
            "MRR@1000": 1 / 2,
        },
    )


def test_graded_and_negative_relevance_and_unretrieved_relevant() -> None:
    # Ranking b (rel -1: gain 0, non-relevant), a (3), c (2); u (1) is relevant but not retrieved.
    qrels = {"q": {"a": 3, "b": -1, "c": 2, "u": 1}}
    run = {"q": {"b": 3.0, "a": 2.0, "c": 1.0}}
    got = scores_of(qrels, run).per_query.as_dict()["q"]
    # DCG@3 = 0 + 3/log2(3) + 2/log2(4); ideal gains 3, 2, 1: 3/1 + 2/log2(3) + 1/log2(4).
    ndcg3 = (3 / LOG2_3 + 2 / 2) / (3 + 2 / LOG2_3 + 1 / 2)
    assert_values(
        got,
        {
            "NDCG@1": 0.0,
            "NDCG@3": ndcg3,
            "NDCG@1000": ndcg3,  # nothing more retrieved, and the ideal has only 3 relevant
            # AP: 1/2 at rank 2, 2/3 at rank 3, over 3 relevant (u counts).
            "MAP@3": (1 / 2 + 2 / 3) / 3,
            "Recall@3": 2 / 3,
            "P@1": 0.0,
            "P@3": 2 / 3,
            "MRR@1": 0.0,
            "MRR@3": 1 / 2,
        },
    )


def test_ndcg_ideal_cut_at_k_from_all_judged() -> None:
    # Relevant: x (1) retrieved at rank 1; y (3) unretrieved. Ideal = [3, 1].
    qrels = {"q": {"x": 1, "y": 3}}
    run = {"q": {"x": 1.0}}
    got = scores_of(qrels, run).per_query.as_dict()["q"]
    assert_values(got, {"NDCG@1": 1 / 3, "NDCG@3": 1 / (3 + 1 / LOG2_3), "Recall@1": 1 / 2, "MAP@1": 1 / 2, "P@10": 1 / 10, "MRR@1": 1.0})


def test_query_with_only_non_relevant_judgements_scores_zero() -> None:
    qrels = {"q": {"a": 0, "b": -2, "c": -1}, "r": {"a": 1}}
    run = {"q": {"a": 3.0, "b": 2.0, "c": 1.0}, "r": {"a": 1.0}}
    per_query = scores_of(qrels, run).per_query.as_dict()
    assert all(value == 0.0 for value in per_query["q"].values())
    assert all(value == (1.0 if not name.startswith("P@") else 1 / int(name[2:])) for name, value in per_query["r"].items())


def test_policies_select_queries_and_count_them() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}}
    run = {"x": {"a": 1.0}, "q2": {}, "q1": {"a": 1.0}}
    ndcg = parse_measures(["NDCG@10"])
    strict = scores_of(qrels, run, Policy.STRICT, ndcg)
    # Every judged query: q1 = 1, q2 (empty ranking) = 0, q3 (missing) = 0.
    assert strict.per_query.query_ids == ("q1", "q2", "q3")
    assert strict.per_query.as_dict() == {"q1": {"NDCG@10": 1.0}, "q2": {"NDCG@10": 0.0}, "q3": {"NDCG@10": 0.0}}
    assert strict.means() == {"NDCG@10": 1 / 3}
    assert (strict.counts.judged, strict.counts.answered, strict.counts.missing, strict.counts.extra, strict.counts.evaluated) == (3, 1, 2, 1, 3)
    coir = scores_of(qrels, run, Policy.COIR, ndcg)
    # Judged queries present in the run, an empty ranking included: q1 = 1, q2 = 0.
    assert coir.per_query.query_ids == ("q1", "q2")
    assert coir.means() == {"NDCG@10": 1 / 2}
    assert (coir.counts.judged, coir.counts.answered, coir.counts.missing, coir.counts.extra, coir.counts.evaluated) == (3, 1, 2, 1, 2)


# --------------------------------------------------------------------------- ordering


def docs_in_order(ranking: dict[str, float]) -> list[str]:
    return [doc for doc, _ in Run.from_mapping({"q": ranking}).ranking("q")]


def test_ties_break_by_document_id_descending_byte_wise() -> None:
    # Bytes: "9" (0x39) > "10" (0x31 0x30) > "1" (prefix of "10") > "010" (0x30 ...).
    assert docs_in_order({"10": 1.0, "010": 1.0, "9": 1.0, "1": 1.0}) == ["9", "10", "1", "010"]
    # UTF-8: 😀 F0.. > ～ EF BD 9E > 日本 E6.. > é C3 A9 > z 7A > a 61 > Z 5A.
    # (UTF-16 code units would put 😀 (D83D) below ～ (FF5E).)
    assert docs_in_order(dict.fromkeys(["a", "～", "Z", "é", "😀", "z", "日本"], 0.5)) == ["😀", "～", "日本", "é", "z", "a", "Z"]
    # -0.0 and 0.0 are the same score: a tie.
    assert docs_in_order({"a": 0.0, "b": -0.0}) == ["b", "a"]


def test_scores_rank_before_ids() -> None:
    assert docs_in_order({"a": 2.0, "z": 1.0, "m": 3.0, "b": -1.0}) == ["m", "a", "z", "b"]
    # Ties only within equal scores; other groups keep score order.
    assert docs_in_order({"a": 1.0, "b": 2.0, "c": 1.0, "d": 2.0}) == ["d", "b", "c", "a"]


def test_tie_order_decides_measures() -> None:
    # "9" ranks before "10" on a tie, so a relevant "10" is at rank 2.
    got = scores_of({"q": {"10": 1}}, {"q": {"10": 1.0, "9": 1.0}}).per_query.as_dict()["q"]
    assert got["MRR@10"] == 0.5 and got["P@1"] == 0.0 and got["NDCG@1"] == 0.0


# --------------------------------------------------------------------------- determinism


def random_case(seed: int):
    rng = random.Random(seed)
    qrels = {f"q{i}": {f"d{j}": rng.choice([-1, 0, 1, 2, 3]) for j in rng.sample(range(60), 8)} for i in range(12)}
    run = {f"q{i}": {f"d{j}": rng.choice([0.5, 1.0, rng.random()]) for j in rng.sample(range(60), rng.randint(0, 40))} for i in range(15)}
    return qrels, run


def shuffled(mapping, rng: random.Random):
    items = list(mapping.items())
    rng.shuffle(items)
    return {key: shuffled(value, rng) if isinstance(value, dict) else value for key, value in items}


def bits(values: dict[str, float]) -> dict[str, str]:
    return {name: float(value).hex() for name, value in values.items()}


@pytest.mark.parametrize("policy", list(Policy))
def test_same_inputs_give_bit_identical_results(policy: Policy) -> None:
    qrels, run = random_case(1)
    first = scores_of(qrels, run, policy)
    second = scores_of(qrels, run, policy)
    assert bits(first.means()) == bits(second.means())
    assert first.per_query.as_dict() == second.per_query.as_dict()


@pytest.mark.parametrize("policy", list(Policy))
@pytest.mark.parametrize("seed", range(5))
def test_input_order_does_not_change_results(policy: Policy, seed: int) -> None:
    qrels, run = random_case(seed)
    rng = random.Random(100 + seed)
    base = scores_of(qrels, run, policy)
    permuted = scores_of(shuffled(qrels, rng), shuffled(run, rng), policy)
    assert bits(base.means()) == bits(permuted.means())
    base_rows, permuted_rows = base.per_query.as_dict(), permuted.per_query.as_dict()
    assert set(base_rows) == set(permuted_rows)
    for qid in base_rows:
        assert bits(base_rows[qid]) == bits(permuted_rows[qid])


# --------------------------------------------------------------------------- run validation


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_run_rejects_non_finite_scores(bad: float) -> None:
    with pytest.raises(InvalidRun) as caught:
        Run.from_mapping({"q": {"a": 1.0, "b": bad}})
    assert caught.value.problem.query_id == "q"
    assert caught.value.problem.doc_id == "b"


def test_run_build_rejects_a_document_twice_in_one_ranking() -> None:
    with pytest.raises(InvalidRun) as caught:
        Run.build(["q"], np.array([0, 2]), np.array([0, 0]), ["a"], np.array([1.0, 2.0]))
    assert caught.value.problem.query_id == "q"
    assert caught.value.problem.doc_id == "a"
    # Same scores, same problem.
    with pytest.raises(InvalidRun):
        Run.build(["q", "r"], np.array([0, 1, 4]), np.array([0, 1, 2, 1]), ["a", "b", "c"], np.array([1.0, 1.0, 0.5, 1.0]))


def test_run_build_allows_a_document_in_two_rankings() -> None:
    run = Run.build(["q1", "q2"], np.array([0, 1, 2]), np.array([0, 0]), ["a"], np.array([1.0, 2.0]))
    assert run.ranking("q1") == [("a", 1.0)] and run.ranking("q2") == [("a", 2.0)]


def test_run_build_rejects_a_query_twice() -> None:
    with pytest.raises(InvalidRun):
        Run.build(["q", "q"], np.array([0, 1, 2]), np.array([0, 1]), ["a", "b"], np.array([1.0, 2.0]))


# --------------------------------------------------------------------------- coir: identical ids


def test_coir_drops_identical_ids_but_keeps_them_judged() -> None:
    # The only relevant document has the query's id: BEIR pops it from the run, not from the qrels.
    qrels = {"q1": {"q1": 1}}
    run = {"q1": {"q1": 5.0, "d": 1.0}}
    coir = scores_of(qrels, run, Policy.COIR).per_query.as_dict()["q1"]
    strict = scores_of(qrels, run, Policy.STRICT).per_query.as_dict()["q1"]
    assert coir["NDCG@10"] == 0.0 and coir["Recall@10"] == 0.0 and coir["MRR@10"] == 0.0
    assert strict["NDCG@10"] == 1.0 and strict["Recall@10"] == 1.0


def test_coir_identical_id_stays_in_the_denominators() -> None:
    # After popping q1, d is at rank 1; two relevant judged (q1, d), ideal = [1, 1].
    qrels = {"q1": {"q1": 1, "d": 1}}
    run = {"q1": {"q1": 5.0, "d": 1.0, "e": 0.5}}
    got = scores_of(qrels, run, Policy.COIR).per_query.as_dict()["q1"]
    assert_values(got, {"NDCG@10": 1 / (1 + 1 / LOG2_3), "Recall@10": 1 / 2, "MAP@10": 1 / 2, "P@1": 1.0, "P@3": 1 / 3, "MRR@1": 1.0})
    strict = scores_of(qrels, run, Policy.STRICT).per_query.as_dict()["q1"]
    assert_values(strict, {"NDCG@10": 1.0, "Recall@10": 1.0, "MAP@10": 1.0, "P@3": 2 / 3})


def test_coir_keeps_ids_of_other_queries() -> None:
    qrels = {"q1": {"q2": 1}, "q2": {"q1": 1}}
    run = {"q1": {"q2": 1.0}, "q2": {"q1": 1.0}}
    got = scores_of(qrels, run, Policy.COIR, parse_measures(["NDCG@10"])).per_query.as_dict()
    assert got == {"q1": {"NDCG@10": 1.0}, "q2": {"NDCG@10": 1.0}}


def test_coir_ranking_emptied_by_the_drop_still_counts() -> None:
    # q2 retrieves only itself: empty after the drop, evaluated as 0 (BEIR keeps it).
    qrels = {"q1": {"d": 1}, "q2": {"d": 1}}
    run = {"q1": {"d": 1.0}, "q2": {"q2": 1.0}}
    coir = scores_of(qrels, run, Policy.COIR, parse_measures(["NDCG@10"]))
    assert coir.per_query.as_dict() == {"q1": {"NDCG@10": 1.0}, "q2": {"NDCG@10": 0.0}}
    assert coir.means() == {"NDCG@10": 0.5}
    assert coir.counts.evaluated == 2


@pytest.mark.parametrize("order", ["empty_last", "empty_first", "empty_middle"])
def test_coir_drop_with_empty_rankings_anywhere(order: str) -> None:
    # Regression: counting kept entries per query with np.add.reduceat failed
    # (IndexError) when the last selected query had an empty ranking.
    rankings = {"q1": {"q1": 2.0, "d": 1.0}, "q2": {}, "q3": {"d": 1.0, "q3": 0.5}}
    keys = {"empty_last": ["q1", "q3", "q2"], "empty_first": ["q2", "q1", "q3"], "empty_middle": ["q1", "q2", "q3"]}[order]
    run = {key: rankings[key] for key in keys}
    qrels = {"q1": {"d": 1}, "q2": {"d": 1}, "q3": {"d": 1}}
    coir = scores_of(qrels, run, Policy.COIR, parse_measures(["NDCG@1", "P@3"])).per_query.as_dict()
    assert coir == {
        "q1": {"NDCG@1": 1.0, "P@3": 1 / 3},
        "q2": {"NDCG@1": 0.0, "P@3": 0.0},
        "q3": {"NDCG@1": 1.0, "P@3": 1 / 3},
    }


def test_query_with_empty_judgements_is_not_judged_like_pytrec_eval() -> None:
    import pytrec_eval

    qrels = {"a": {}, "b": {"x": 1}}
    rankings = {"a": {"x": 1.0}, "b": {"x": 1.0}}
    measures = parse_measures(["NDCG@10"])
    pytrec = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(rankings)
    expected = sum(v["ndcg_cut_10"] for v in pytrec.values()) / len(pytrec)
    for policy in (Policy.COIR, Policy.STRICT):
        evaluation = evaluate(qrels, Run.from_mapping(rankings), measures, policy)
        assert evaluation.means()["NDCG@10"] == expected
        assert evaluation.counts.judged == 1 and evaluation.counts.extra == 1
