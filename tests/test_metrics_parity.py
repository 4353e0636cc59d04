"""Differential tests of the metric engine against the real pytrec_eval (trec_eval).

* General cases (seeded, adversarial, float32-exact scores, so pytrec-eval-terrier's
  float32 rounding is lossless): ``strict`` must equal pytrec_eval per query (a
  judged query absent from the run scores 0 and counts in the mean) and the
  float64 reference of ``tests/reference_trec.py``; ``coir`` must equal BEIR's
  ``EvaluateRetrieval.evaluate`` (identical ids popped, pytrec_eval, averaged over
  the queries of pytrec_eval's output), per query and in the mean.
* Float32 cases: scores distinct in float64 but equal in float32, so ranking
  differs: ``coir`` must equal pytrec_eval, ``strict`` the float64 reference.
"""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import pytrec_eval

from grader.metrics.measures import parse_measures
from grader.metrics.policy import Policy, evaluate
from grader.runs.run import Run
from tests.parity_cases import N_PARITY_CASES, SMALL_POOL, TOLERANCE, generate_case

try:  # tests/ as a package, or tests/ on sys.path (pytest's default "prepend" mode)
    from tests.reference_trec import CUTOFFS, FAMILIES, evaluate_reference
except ImportError:  # pragma: no cover - depends on how pytest imports the tests
    from reference_trec import CUTOFFS, FAMILIES, evaluate_reference

MEASURES = parse_measures(None)
MEASURE_NAMES = [f"{family}@{k}" for family in FAMILIES for k in CUTOFFS]
_CUTS = ",".join(str(k) for k in CUTOFFS)
PYTREC_MEASURES = {f"ndcg_cut.{_CUTS}", f"map_cut.{_CUTS}", f"recall.{_CUTS}", f"P.{_CUTS}", "recip_rank"}

N_FLOAT64_CASES = 100

# --------------------------------------------------------------------------- oracle


def _from_pytrec(row: dict[str, float]) -> dict[str, float]:
    """pytrec_eval's row, renamed to the grader's measure names; MRR@k cut from recip_rank."""
    out: dict[str, float] = {}
    rr = row["recip_rank"]
    for k in CUTOFFS:
        out[f"NDCG@{k}"] = row[f"ndcg_cut_{k}"]
        out[f"MAP@{k}"] = row[f"map_cut_{k}"]
        out[f"Recall@{k}"] = row[f"recall_{k}"]
        out[f"P@{k}"] = row[f"P_{k}"]
        out[f"MRR@{k}"] = rr if rr > 0 and round(1 / rr) <= k else 0.0
    return out


def pytrec_per_query(qrels, run_map) -> dict[str, dict[str, float]]:
    evaluator = pytrec_eval.RelevanceEvaluator(copy.deepcopy(qrels), PYTREC_MEASURES)
    scores = evaluator.evaluate(copy.deepcopy(run_map))
    return {qid: _from_pytrec(row) for qid, row in scores.items()}


def beir_evaluate(qrels, run_map) -> tuple[dict[str, dict[str, float]], dict[str, float] | None]:
    """BEIR ``EvaluateRetrieval.evaluate(..., ignore_identical_ids=True)``, unrounded.

    Pops from the results every document whose id is its query id, evaluates with
    pytrec_eval and averages over ``len(scores)`` (``None`` where BEIR divides by 0).
    """
    results = copy.deepcopy(run_map)
    for qid, docs in results.items():
        for pid in list(docs):
            if pid == qid:
                docs.pop(pid)
    per_query = pytrec_per_query(qrels, results)
    if not per_query:
        return per_query, None
    means = {name: sum(row[name] for row in per_query.values()) / len(per_query) for name in MEASURE_NAMES}
    return per_query, means


def assert_rows_close(got: dict[str, float], expected: dict[str, float], where: str) -> None:
    bad = {name: (got[name], expected[name]) for name in MEASURE_NAMES if not abs(got[name] - expected[name]) <= TOLERANCE}
    assert not bad, f"{where}: (got, expected) {bad}"


# --------------------------------------------------------------------------- checks


def check_counts(evaluation, expected, policy: Policy) -> None:
    counts = evaluation.counts
    assert counts.judged == len(expected["judged"])
    assert counts.answered == len(expected["ranked"])
    assert counts.missing == len(expected["missing"]) + len(expected["empty"])
    assert counts.extra == len(expected["extra"])
    present = expected["judged"] - expected["missing"]
    assert counts.evaluated == (len(expected["judged"]) if policy is Policy.STRICT else len(present))


def check_strict_against_pytrec(qrels, run_map, expected) -> None:
    evaluation = evaluate(qrels, Run.from_mapping(run_map), MEASURES, Policy.STRICT)
    check_counts(evaluation, expected, Policy.STRICT)
    got = evaluation.per_query.as_dict()
    assert evaluation.per_query.query_ids == tuple(qrels)
    oracle = pytrec_per_query(qrels, run_map)
    assert set(oracle) == expected["judged"] - expected["missing"]  # judged and in the run
    zeros = dict.fromkeys(MEASURE_NAMES, 0.0)
    full = {qid: oracle.get(qid, zeros) for qid in qrels}
    for qid in qrels:
        assert_rows_close(got[qid], full[qid], f"strict query {qid!r}")
    means = evaluation.means()
    for name in MEASURE_NAMES:
        want = sum(full[qid][name] for qid in qrels) / len(qrels)
        assert abs(means[name] - want) <= TOLERANCE, (name, means[name], want)
    return got


def check_strict_against_reference(qrels, run_map) -> None:
    evaluation = evaluate(qrels, Run.from_mapping(run_map), MEASURES, Policy.STRICT)
    got = evaluation.per_query.as_dict()
    reference = evaluate_reference(qrels, run_map)
    for qid in qrels:
        assert_rows_close(got[qid], reference[qid], f"strict vs reference, query {qid!r}")
    means = evaluation.means()
    for name in MEASURE_NAMES:
        want = sum(row[name] for row in reference.values()) / len(reference)
        assert abs(means[name] - want) <= TOLERANCE, (name, means[name], want)


def check_coir_against_beir(qrels, run_map, expected=None) -> None:
    evaluation = evaluate(qrels, Run.from_mapping(run_map), MEASURES, Policy.COIR)
    if expected is not None:
        check_counts(evaluation, expected, Policy.COIR)
    got = evaluation.per_query.as_dict()
    oracle, oracle_means = beir_evaluate(qrels, run_map)
    assert set(got) == set(oracle)
    assert len(evaluation.per_query.query_ids) == len(oracle)
    for qid in oracle:
        assert_rows_close(got[qid], oracle[qid], f"coir query {qid!r}")
    if oracle_means is None:
        return  # BEIR would divide by zero: nothing of the run is judged
    means = evaluation.means()
    for name in MEASURE_NAMES:
        assert abs(means[name] - oracle_means[name]) <= TOLERANCE, (name, means[name], oracle_means[name])


def coir_reference(qrels, run_map) -> tuple[dict[str, dict[str, float]], dict[str, float] | None]:
    """BEIR's procedure with the float64 reference in place of pytrec_eval.

    Identical ids popped, scores rounded to float32 (as pytrec-eval-terrier does),
    judged queries present in the run averaged. For queries pytrec_eval cannot take.
    """
    rounded = {qid: {doc: float(np.float32(score)) for doc, score in docs.items() if doc != qid} for qid, docs in run_map.items() if qid in qrels}
    per_query = evaluate_reference({qid: qrels[qid] for qid in rounded}, rounded)
    if not per_query:
        return per_query, None
    means = {name: sum(row[name] for row in per_query.values()) / len(per_query) for name in MEASURE_NAMES}
    return per_query, means


def check_coir_against_reference(qrels, run_map) -> None:
    evaluation = evaluate(qrels, Run.from_mapping(run_map), MEASURES, Policy.COIR)
    got = evaluation.per_query.as_dict()
    reference, reference_means = coir_reference(qrels, run_map)
    assert set(got) == set(reference)
    for qid in reference:
        assert_rows_close(got[qid], reference[qid], f"coir vs reference, query {qid!r}")
    if reference_means is not None:
        means = evaluation.means()
        for name in MEASURE_NAMES:
            assert abs(means[name] - reference_means[name]) <= TOLERANCE, (name, means[name], reference_means[name])


# --------------------------------------------------------------------------- general parity


@pytest.mark.parametrize("seed", range(N_PARITY_CASES))
def test_parity_with_pytrec_eval(seed: int) -> None:
    qrels, run_map, expected = generate_case(seed)
    check_strict_against_pytrec(qrels, run_map, expected)
    check_strict_against_reference(qrels, run_map)
    check_coir_against_beir(qrels, run_map, expected)
    check_coir_against_reference(qrels, run_map)  # validates the reference's coir replica too


def test_all_negative_judgements_against_reference() -> None:
    """Queries whose judgements are all negative, which pytrec-eval-terrier 0.5.11 cannot take.

    It reads out of bounds (segfaults, reliably for judgements <= -2 after another
    query was evaluated, e.g. qrels {"b": {"x": 1}, "a": {"x": -2}} with run
    {"b": {"y": 1.0}, "a": {}}), so the generator avoids them; the float64
    reference (validated on the parity cases) is the oracle here. Such a query has
    nothing relevant, scores 0, and still counts in both policies' means.
    """
    for seed in range(40):
        qrels, run_map, _ = generate_case(20_000 + seed)
        rng = random.Random(seed)
        for qid in list(qrels)[: rng.randint(1, len(qrels))]:
            qrels[qid] = {doc: rng.choice([-1, -2, -3]) for doc in qrels[qid]}
        check_strict_against_reference(qrels, run_map)
        check_coir_against_reference(qrels, run_map)
        strict = evaluate(qrels, Run.from_mapping(run_map), MEASURES, Policy.STRICT)
        for qid, judged in qrels.items():
            if max(judged.values()) < 0:
                assert set(strict.per_query.as_dict()[qid].values()) == {0.0}


@pytest.mark.parametrize("seed", range(3))
def test_lists_longer_than_the_largest_cutoff(seed: int) -> None:
    """Rankings past 1000 entries: what lies beyond rank 1000 must not count."""
    rng = random.Random(30_000 + seed)
    docs = [f"d{i}" for i in range(1500)] + SMALL_POOL
    qrels, run_map = {}, {}
    for qid in ("q1", "10", "é"):
        ranked = rng.sample(docs, rng.randint(1001, 1400))
        judged = rng.sample(ranked, 60) + rng.sample(docs, 10)
        qrels[qid] = {doc: rng.choice([0, 1, 2, -1]) for doc in judged}
        qrels[qid][judged[0]] = 1
        run_map[qid] = {doc: rng.choice([0.0, 1.0, float(np.float32(rng.random()))]) for doc in ranked}
    # Relevant exactly around the cutoffs (1-based ranks 100, 101, 999, 1000, 1001).
    ranked = rng.sample(docs, 1200)
    run_map["edge"] = {doc: float(1200 - i) for i, doc in enumerate(ranked)}
    qrels["edge"] = {ranked[rank - 1]: rng.choice([1, 2]) for rank in (100, 101, 999, 1000, 1001)}
    expected = {"judged": set(qrels), "missing": set(), "empty": set(), "ranked": set(qrels), "extra": set()}
    check_strict_against_pytrec(qrels, run_map, expected)
    check_coir_against_beir(qrels, run_map, expected)


def test_generator_covers_the_adversarial_features() -> None:
    """The generated cases really contain what the parity tests claim to cover."""
    seen: dict[str, int] = dict.fromkeys(
        ["ties", "missing", "empty", "extra", "all_zero", "negative", "graded", "identical", "long", "beyond_k", "unicode", "numeric"], 0
    )
    for seed in range(N_PARITY_CASES):
        qrels, run_map, expected = generate_case(seed)
        seen["missing"] += bool(expected["missing"])
        seen["empty"] += bool(expected["empty"])
        seen["extra"] += bool(expected["extra"])
        for judged in qrels.values():
            rels = list(judged.values())
            seen["all_zero"] += all(r == 0 for r in rels)
            seen["negative"] += any(r < 0 for r in rels)
            seen["graded"] += any(r >= 2 for r in rels)
        for qid, docs in run_map.items():
            scores = list(docs.values())
            seen["ties"] += len(set(scores)) < len(scores)
            seen["identical"] += qid in docs and qid in qrels
            seen["long"] += len(docs) >= 100
            seen["beyond_k"] += 0 < len(docs) < 10
            seen["unicode"] += any(not d.isascii() for d in docs) and any(d.isascii() for d in docs)
            seen["numeric"] += sum(d in ("9", "10", "010") for d in docs) >= 2
    assert all(count >= 5 for count in seen.values()), seen


# --------------------------------------------------------------------------- float32 vs float64

NEXT_AFTER_01 = float(np.nextafter(0.1, 1.0))
FLOAT32_CASES = {
    # name: (qrels, run); each pair of scores is distinct in float64, equal in float32.
    "1+1e-9_vs_1": ({"q": {"a": 1}}, {"q": {"a": 1.0 + 1e-9, "b": 1.0}}),
    "nextafter_0.1": ({"q": {"x": 1}}, {"q": {"x": NEXT_AFTER_01, "y": 0.1}}),
    "numeric_ids_9_vs_10": ({"q": {"10": 1}}, {"q": {"10": 1.0 + 1e-9, "9": 1.0}}),
    "unicode_e_acute_vs_z": ({"q": {"z": 2}}, {"q": {"z": 2.0 + 2.0**-30, "é": 2.0}}),
    "emoji_vs_cjk": ({"q": {"日本": 1}}, {"q": {"日本": 0.5 + 1e-12, "😀": 0.5}}),
    "beyond_2_pow_24": ({"q": {"a": 1}}, {"q": {"a": 16777217.0, "b": 16777216.0}}),
    "negative_scores": ({"q": {"a": 1}}, {"q": {"a": -3.0 + 1e-10, "b": -3.0, "c": -4.0}}),
    "cutoff_boundary_map_recall": (
        {"q": {"r1": 1, "r2": 3, "n": 0}},
        {"q": {"n": 9.0, "r1": 1.0 + 1e-9, "r9": 1.0, "r2": 0.25, "x": 0.2}},
    ),
    "several_queries": (
        {"q1": {"a": 1, "b": 2}, "q2": {"c": 1}, "q3": {"z": 1}},
        {"q1": {"a": 0.3 + 1e-11, "b": 0.3, "c": 0.3 - 1e-11}, "q2": {"c": 7.0, "d": 6.0}},
    ),
}


@pytest.mark.parametrize("name", list(FLOAT32_CASES))
def test_float32_rounding_decides(name: str) -> None:
    qrels, run_map = FLOAT32_CASES[name]
    # The case is a float32 one: some pair of distinct float64 scores becomes equal.
    for docs in run_map.values():
        scores = list(docs.values())
        if len(set(np.float32(s) for s in scores)) < len(set(scores)):
            break
    else:
        pytest.fail("no score pair collapses in float32")
    check_coir_against_beir(qrels, run_map)
    check_coir_against_reference(qrels, run_map)
    check_strict_against_reference(qrels, run_map)
    strict = evaluate(qrels, Run.from_mapping(run_map), MEASURES, Policy.STRICT).per_query.as_dict()
    coir = evaluate(qrels, Run.from_mapping(run_map), MEASURES, Policy.COIR).per_query.as_dict()
    differences = {(qid, m) for qid in coir for m in MEASURE_NAMES if abs(strict[qid][m] - coir[qid][m]) > 1e-9}
    assert differences, "strict and coir agree: the case does not discriminate float32 from float64"
    # And pytrec_eval itself (no identical ids here) disagrees with the float64 reference.
    oracle = pytrec_per_query(qrels, run_map)
    reference = evaluate_reference(qrels, run_map)
    assert any(abs(oracle[q][m] - reference[q][m]) > 1e-9 for q in oracle for m in MEASURE_NAMES)


@pytest.mark.parametrize("seed", range(N_FLOAT64_CASES))
def test_float64_scores(seed: int) -> None:
    qrels, run_map, expected = generate_case(10_000 + seed, score_mode="f64")
    check_coir_against_beir(qrels, run_map, expected)
    check_coir_against_reference(qrels, run_map)
    check_strict_against_reference(qrels, run_map)


def test_float64_cases_discriminate() -> None:
    """Most float64 cases rank differently once scores are float32: the cases have teeth."""
    discriminating = 0
    for seed in range(N_FLOAT64_CASES):
        qrels, run_map, _ = generate_case(10_000 + seed, score_mode="f64")
        strict = evaluate(qrels, Run.from_mapping(run_map), MEASURES, Policy.STRICT).per_query.as_dict()
        oracle = pytrec_per_query(qrels, run_map)
        discriminating += any(abs(strict[q][m] - oracle[q][m]) > 1e-9 for q in oracle for m in MEASURE_NAMES)
    assert discriminating >= N_FLOAT64_CASES // 4, discriminating
