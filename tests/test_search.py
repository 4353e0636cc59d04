"""Exact search with faiss against plain numpy, through to trec-ordered runs.

The reference ranks every corpus row for every query with numpy (float64 inner
products of the float32 vectors), orders by score descending then document id
descending byte-wise (trec_eval's rule), and cuts at k.
"""

from __future__ import annotations

import numpy as np
import pytest

from grader.retrieval.search import search_run, exact_top_k, rankings_to_run
from grader.runs.run import Run

DIM = 16


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _data(seed: int = 1, n_base: int = 90, n_dups: int = 40, n_queries: int = 25):
    """Normalised random vectors; the corpus repeats some rows (exact score ties)."""
    rng = np.random.default_rng(seed)
    base = _unit(rng.standard_normal((n_base, DIM)))
    corpus = np.concatenate([base, base[rng.integers(0, n_base, n_dups)]])
    corpus = corpus[rng.permutation(len(corpus))]
    queries = _unit(rng.standard_normal((n_queries, DIM)))
    queries[0] = corpus[3]  # a query that is itself a (possibly duplicated) document
    # Ids whose byte order disagrees with corpus order and with code point tricks.
    doc_ids = [f"{'D' if i % 3 == 0 else 'd'}{(i * 37) % len(corpus)}-{'é' if i % 5 == 0 else 'e'}" for i in range(len(corpus))]
    assert len(set(doc_ids)) == len(doc_ids)
    query_ids = [f"q{i}" for i in range(n_queries)]
    return queries, corpus, query_ids, doc_ids


def _reference_scores(queries: np.ndarray, corpus: np.ndarray) -> np.ndarray:
    # Elementwise product and a last-axis sum: identical rows give identical scores.
    return (queries.astype(np.float64)[:, None, :] * corpus.astype(np.float64)[None, :, :]).sum(axis=2)


def _reference_rankings(queries, corpus, doc_ids, k) -> list[list[str]]:
    scores = _reference_scores(queries, corpus)
    out = []
    for row in scores:
        order = sorted(range(len(doc_ids)), key=lambda j: (-row[j], tuple(-b for b in doc_ids[j].encode("utf-8"))))
        out.append([doc_ids[j] for j in order[:k]])
    return out


def _numpy_top_k(queries, corpus, k):
    """Plain numpy exact search with the same output shapes as exact_top_k."""
    scores = _reference_scores(queries, corpus)
    depth = min(k, corpus.shape[0])
    indices = np.argsort(-scores, axis=1, kind="stable")[:, :depth]
    return np.take_along_axis(scores, indices, axis=1), indices


def _ids(run: Run, query_id: str) -> list[str]:
    return [doc for doc, _ in run.ranking(query_id)]


def _check_against_reference(ranking: list[str], reference: list[tuple[str, float]], k: int) -> bool:
    """``ranking`` is the reference's top ``k`` in trec order.

    Where the cut falls inside a group of tied scores, which tied documents make
    it is tested separately (below); here they must come from that group, in doc
    id order. Returns whether the cut split a tie group.
    """
    threshold = reference[k - 1][1]
    above = [doc for doc, score in reference if score > threshold]
    tied = {doc for doc, score in reference if score == threshold}
    assert len(ranking) == k
    assert ranking[: len(above)] == above
    rest = ranking[len(above) :]
    assert set(rest) <= tied
    assert rest == sorted(rest, key=lambda d: d.encode("utf-8"), reverse=True)
    return len(above) + len(tied) > k


def test_data_has_ties_and_well_separated_distinct_scores() -> None:
    queries, corpus, _, _ = _data()
    scores = np.sort(_reference_scores(queries, corpus), axis=1)
    gaps = np.diff(scores, axis=1)
    assert np.sum(gaps == 0) > 20  # duplicate rows give exact ties
    assert gaps[gaps > 0].min() > 1e-6  # float32 search cannot reorder distinct scores


@pytest.mark.parametrize(("corpus_chunk", "query_chunk"), [(262_144, 8_192), (7, 3), (1, 1), (16, 64), (129, 5)])
@pytest.mark.parametrize("k", [1, 4, 10, 37])
def test_faiss_matches_numpy_exact_search(corpus_chunk: int, query_chunk: int, k: int) -> None:
    queries, corpus, query_ids, doc_ids = _data()
    scores, indices = exact_top_k(queries, corpus, k, corpus_chunk=corpus_chunk, query_chunk=query_chunk)
    assert scores.shape == indices.shape == (len(queries), k)
    assert scores.dtype == np.float32 and indices.dtype == np.int64
    assert np.all(np.diff(scores, axis=1) <= 0)  # best first
    reference = _reference_scores(queries, corpus)
    np.testing.assert_allclose(scores, np.take_along_axis(reference, indices, axis=1), atol=1e-6)
    np.testing.assert_allclose(scores, -np.sort(-reference, axis=1)[:, :k], atol=1e-6)

    faiss_run = rankings_to_run(query_ids, doc_ids, scores, indices)
    numpy_run = rankings_to_run(query_ids, doc_ids, *_numpy_top_k(queries, corpus, k))
    expected = _reference_rankings(queries, corpus, doc_ids, len(doc_ids))
    position = {doc: j for j, doc in enumerate(doc_ids)}
    whole = 0
    for i, query_id in enumerate(query_ids):
        full = [(doc, reference[i][position[doc]]) for doc in expected[i]]
        split = _check_against_reference(_ids(faiss_run, query_id), full, k)
        assert _check_against_reference(_ids(numpy_run, query_id), full, k) == split
        if not split:
            whole += 1
            assert _ids(faiss_run, query_id) == _ids(numpy_run, query_id) == expected[i][:k]
    assert whole >= len(query_ids) // 2  # most cuts split no tie group: exact parity there


@pytest.mark.parametrize(("corpus_chunk", "query_chunk"), [(262_144, 8_192), (7, 2)])
def test_k_beyond_the_corpus_ranks_every_document_once(corpus_chunk: int, query_chunk: int) -> None:
    queries, corpus, query_ids, doc_ids = _data(seed=2, n_base=30, n_dups=10, n_queries=6)
    scores, indices = exact_top_k(queries, corpus, 1000, corpus_chunk=corpus_chunk, query_chunk=query_chunk)
    assert indices.shape == (6, 40)
    assert all(sorted(row) == list(range(40)) for row in indices.tolist())
    run = rankings_to_run(query_ids, doc_ids, scores, indices)
    assert run.n_entries == 6 * 40
    expected = _reference_rankings(queries, corpus, doc_ids, 1000)
    for i, query_id in enumerate(query_ids):
        assert _ids(run, query_id) == expected[i]
        ranked = run.ranking(query_id)
        assert ranked == sorted(ranked, key=lambda e: (-e[1], tuple(-b for b in e[0].encode())))


def test_tied_documents_are_ordered_by_doc_id_descending() -> None:
    corpus = _unit(np.array([[1.0, 0.0], [0.6, 0.8], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]))
    queries = _unit(np.array([[1.0, 0.0]]))
    doc_ids = ["b", "c", "é", "a", "z"]  # byte-wise: "é" (0xc3 0xa9) > "z" > "b" > "a"
    run = rankings_to_run(["q"], doc_ids, *exact_top_k(queries, corpus, 10, corpus_chunk=2))
    assert _ids(run, "q") == ["é", "b", "a", "c", "z"]
    assert [s for _, s in run.ranking("q")] == pytest.approx([1.0, 1.0, 1.0, 0.6, 0.0], abs=1e-7)


def test_rankings_to_run_drops_unfilled_slots() -> None:
    scores = np.array([[0.9, 0.5, -np.inf], [0.3, -np.inf, -np.inf]], dtype=np.float32)
    indices = np.array([[2, 0, -1], [1, -1, -1]], dtype=np.int64)
    run = rankings_to_run(["q1", "q2"], ["a", "b", "c"], scores, indices)
    assert run.ranking("q1") == [("c", pytest.approx(0.9)), ("a", pytest.approx(0.5))]
    assert run.ranking("q2") == [("b", pytest.approx(0.3))]


def test_empty_corpus_gives_empty_rankings() -> None:
    queries = _unit(np.ones((2, 4)))
    scores, indices = exact_top_k(queries, np.zeros((0, 4), dtype=np.float32), 10)
    assert scores.shape == indices.shape == (2, 0)
    run = rankings_to_run(["q1", "q2"], [], scores, indices)
    assert run.ranking("q1") == [] and run.n_entries == 0


def test_cut_inside_a_tie_group_keeps_the_trec_first_documents() -> None:
    corpus = _unit(np.array([[1.0, 0.0]] * 4 + [[0.0, 1.0]]))
    queries = _unit(np.array([[1.0, 0.0]]))
    doc_ids = ["a", "b", "c", "d", "e"]
    # trec order of the full ranking is d, c, b, a, e; its top 2 are d and c,
    # whatever the corpus order and the chunking.
    for chunk in (1, 2, 5):
        run = search_run(["q"], doc_ids, queries, corpus, 2, corpus_chunk=chunk)
        assert _ids(run, "q") == ["d", "c"]
    shuffled = [4, 2, 0, 3, 1]
    run = search_run(["q"], [doc_ids[i] for i in shuffled], queries, corpus[shuffled], 2)
    assert _ids(run, "q") == ["d", "c"]
    # no tie at the cut: the plain top-k, no full re-search needed
    run = search_run(["q"], doc_ids, queries, corpus, 4)
    assert _ids(run, "q") == ["d", "c", "b", "a"]
