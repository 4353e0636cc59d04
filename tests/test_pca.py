"""PCA dimensions (CAT) against a straightforward numpy re-implementation.

The reference fits components from the eigenvectors of the covariance matrix
(the grader uses an SVD of the centred data), ranks by cosine with numpy, and
computes MRR by hand; rankings must be equal and MRR within 1e-12.
"""

from __future__ import annotations

import numpy as np
import pytest

from grader.metrics.measures import parse_measure
from grader.metrics.policy import Policy, evaluate
from grader.retrieval.pca import reduce
from grader.retrieval.search import search_run


def _reference_projection(queries: np.ndarray, corpus: np.ndarray, dimension: int) -> tuple[np.ndarray, np.ndarray]:
    stacked = np.vstack([queries, corpus]).astype(np.float64)
    mean = stacked.mean(axis=0)
    covariance = np.cov(stacked - mean, rowvar=False)
    values, vectors = np.linalg.eigh(covariance)
    top = vectors[:, np.argsort(values)[::-1][:dimension]].T
    # the same sign rule: largest-magnitude entry of each component positive
    top *= np.sign(top[np.arange(len(top)), np.argmax(np.abs(top), axis=1)])[:, None]

    def project(x: np.ndarray) -> np.ndarray:
        y = (x.astype(np.float64) - mean) @ top.T
        return (y / np.linalg.norm(y, axis=1, keepdims=True)).astype(np.float32)

    return project(queries), project(corpus)


def _reference_rankings(queries: np.ndarray, corpus: np.ndarray, doc_ids: list[str], depth: int) -> list[list[str]]:
    scores = queries.astype(np.float64) @ corpus.astype(np.float64).T
    rankings = []
    for row in scores:
        order = sorted(range(len(doc_ids)), key=lambda j: (float(np.float32(row[j])), doc_ids[j].encode()), reverse=True)
        rankings.append([doc_ids[j] for j in order[:depth]])
    return rankings


def _reference_mrr(rankings: list[list[str]], relevant: list[str], k: int) -> float:
    total = 0.0
    for ranking, doc in zip(rankings, relevant):
        if doc in ranking[:k]:
            total += 1.0 / (ranking.index(doc) + 1)
    return total / len(rankings)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dimension", [3, 8])
def test_pca_rankings_and_mrr_match_numpy(seed: int, dimension: int) -> None:
    rng = np.random.default_rng(seed)
    native = 24
    # correlated embeddings, so the leading components carry signal
    basis = rng.standard_normal((native, native))
    corpus = (rng.standard_normal((300, native)) * np.linspace(3, 0.1, native)) @ basis
    relevant_rows = rng.choice(300, size=40, replace=False)
    queries = corpus[relevant_rows] + 0.8 * rng.standard_normal((40, native)) @ basis
    corpus, queries = corpus.astype(np.float32), queries.astype(np.float32)
    doc_ids = [f"d{i}" for i in range(300)]
    query_ids = [f"q{i}" for i in range(40)]
    relevant = [doc_ids[r] for r in relevant_rows]

    projection = reduce(queries, corpus, dimension)
    assert projection.applied
    ref_queries, ref_corpus = _reference_projection(queries, corpus, dimension)
    assert np.allclose(projection.queries, ref_queries, atol=1e-5)
    assert np.allclose(projection.corpus, ref_corpus, atol=1e-5)

    run = search_run(query_ids, doc_ids, projection.queries, projection.corpus, 1000)
    expected = _reference_rankings(projection.queries, projection.corpus, doc_ids, 1000)
    for query_id, ranking in zip(query_ids, expected):
        assert [doc for doc, _ in run.ranking(query_id)] == ranking

    qrels = {q: {d: 1} for q, d in zip(query_ids, relevant)}
    mrr = evaluate(qrels, run, [parse_measure("MRR@1000")], Policy.STRICT).means()["MRR@1000"]
    reference = _reference_mrr(_reference_rankings(ref_queries, ref_corpus, doc_ids, 1000), relevant, 1000)
    assert abs(mrr - reference) <= 1e-12
    assert mrr > 0.05  # the reduced embeddings still retrieve (not a degenerate projection)


def test_native_dimension_is_not_reduced() -> None:
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((5, 6)).astype(np.float32)
    corpus = rng.standard_normal((9, 6)).astype(np.float32)
    projection = reduce(queries, corpus, 768)
    assert not projection.applied and projection.explained_variance == 1.0
    assert np.allclose(np.linalg.norm(projection.corpus, axis=1), 1.0, atol=1e-6)
    assert np.allclose(projection.corpus * np.linalg.norm(corpus, axis=1, keepdims=True), corpus, atol=1e-5)


def test_pca_is_deterministic_bit_for_bit() -> None:
    rng = np.random.default_rng(1)
    queries = rng.standard_normal((20, 16)).astype(np.float32)
    corpus = rng.standard_normal((50, 16)).astype(np.float32)
    first, second = reduce(queries, corpus, 4), reduce(queries.copy(), corpus.copy(), 4)
    assert first.queries.tobytes() == second.queries.tobytes()
    assert first.corpus.tobytes() == second.corpus.tobytes()


def test_reduction_does_not_depend_on_row_order() -> None:
    """Fitted and projected in a canonical row order: shuffling queries and corpus permutes the output rows, bit for bit."""
    from grader.retrieval.pca import reduce

    rng = np.random.default_rng(11)
    queries = rng.standard_normal((40, 24)).astype(np.float32)
    corpus = rng.standard_normal((300, 24)).astype(np.float32)
    base = reduce(queries, corpus, 5)
    q_order, d_order = rng.permutation(40), rng.permutation(300)
    shuffled = reduce(queries[q_order], corpus[d_order], 5)
    assert shuffled.explained_variance == base.explained_variance
    np.testing.assert_array_equal(shuffled.queries, base.queries[q_order])
    np.testing.assert_array_equal(shuffled.corpus, base.corpus[d_order])
