"""Exact search against a brute-force reference, through to trec-ordered runs.

The reference scores every query/document pair with ``math.fsum`` of the
float64 products (each product of two float32 values is exact in float64, so
fsum gives the correctly rounded exact inner product), orders by score
descending then document id descending byte-wise (trec_eval's rule), and cuts
at k. The search's own score (a fixed-order float64 sum) may differ from that
in the last bits only, so where the reference's distinct scores are separated by
far more than that, the rankings must be identical.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from grader.errors import TaskFailure
from grader.retrieval import exact
from grader.retrieval.search import UniqueRows, exact_top_k, faiss_top_k, rankings_to_run, screened, search_run
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


def _fsum_scores(queries: np.ndarray, corpus: np.ndarray) -> np.ndarray:
    q64, d64 = queries.astype(np.float64), corpus.astype(np.float64)
    return np.array([[math.fsum(q * d) for d in d64] for q in q64])


def _trec_key(doc_id: str, score: float) -> tuple:
    return (-score, tuple(-b for b in doc_id.encode("utf-8")) + (1,))


def _reference_rankings(queries, corpus, doc_ids, k) -> list[list[str]]:
    scores = _fsum_scores(queries, corpus)
    return [[doc_ids[j] for j in sorted(range(len(doc_ids)), key=lambda j: _trec_key(doc_ids[j], row[j]))[:k]] for row in scores]


def _ids(run: Run, query_id: str) -> list[str]:
    return [doc for doc, _ in run.ranking(query_id)]


def test_data_has_ties_and_well_separated_distinct_scores() -> None:
    queries, corpus, _, _ = _data()
    scores = np.sort(_fsum_scores(queries, corpus), axis=1)
    gaps = np.diff(scores, axis=1)
    assert np.sum(gaps == 0) > 20  # duplicate rows give exact ties
    assert gaps[gaps > 0].min() > 1e-9  # far above the float64 score's error: the reference order is the order


@pytest.mark.parametrize(("corpus_chunk", "query_chunk"), [(262_144, 8_192), (7, 3), (1, 1), (16, 64), (129, 5)])
@pytest.mark.parametrize("k", [1, 4, 10, 37])
def test_exact_search_matches_the_brute_force_reference(corpus_chunk: int, query_chunk: int, k: int) -> None:
    queries, corpus, query_ids, doc_ids = _data()
    run = search_run(query_ids, doc_ids, queries, corpus, k, corpus_chunk=corpus_chunk)
    expected = _reference_rankings(queries, corpus, doc_ids, k)
    reference = _fsum_scores(queries, corpus)
    position = {doc: j for j, doc in enumerate(doc_ids)}
    bound = exact.gamma(DIM, exact.U64)
    for i, query_id in enumerate(query_ids):
        assert _ids(run, query_id) == expected[i]
        for doc, score in run.ranking(query_id):
            assert abs(score - reference[i, position[doc]]) <= bound * 1.0 + 1e-300
    scores, indices = exact_top_k(queries, corpus, k, corpus_chunk=corpus_chunk, query_chunk=query_chunk)
    assert scores.dtype == np.float64 and indices.dtype == np.int64 and scores.shape == (len(queries), k)
    # The scores are the kernel's, bit for bit.
    rows = np.repeat(np.arange(len(queries)), k)
    np.testing.assert_array_equal(scores.ravel(), exact.score_pairs(queries, corpus, rows, indices.ravel()))


def _documented_order(q: np.ndarray, d: np.ndarray) -> float:
    """The summation order docs/search.md states, in plain Python floats (IEEE binary64)."""
    n = len(q)
    m = n - n % 8
    acc = [0.0] * 8
    for i in range(0, m, 8):
        for j in range(8):
            acc[j] += float(q[i + j]) * float(d[i + j])
    total = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
    for i in range(m, n):
        total += float(q[i]) * float(d[i])
    return total


@pytest.mark.parametrize("dim", [1, 7, 8, 16, 61, 768])
def test_the_kernel_adds_in_the_documented_order_bit_for_bit(dim: int) -> None:
    rng = np.random.default_rng(dim)
    queries = (rng.standard_normal((5, dim)) * np.exp(rng.uniform(-20, 20, (5, dim)))).astype(np.float32)
    corpus = (rng.standard_normal((30, dim)) * np.exp(rng.uniform(-20, 20, (30, dim)))).astype(np.float32)
    q_rows, d_rows = np.repeat(np.arange(5), 30), np.tile(np.arange(30), 5)
    got = exact.score_pairs(queries, corpus, q_rows, d_rows)
    expected = [_documented_order(queries[a], corpus[b]) for a, b in zip(q_rows, d_rows)]
    assert got.tolist() == expected


def test_float32_cannot_separate_what_the_exact_search_orders() -> None:
    """Documents whose scores differ by about 1e-9: float32 sees ties (or the wrong order), the exact search does not."""
    rng = np.random.default_rng(7)
    base = _unit(rng.standard_normal((1, 64)))[0]
    query = base[None, :].copy()
    corpus = np.repeat(base[None, :], 40, axis=0)
    # Each document nudges one coordinate by a float32 ulp or two: exact scores differ, float32 sums round them together.
    for j in range(40):
        c = j % 64
        corpus[j, c] = np.nextafter(corpus[j, c], np.float32(np.inf) if j % 2 else np.float32(-np.inf), dtype=np.float32)
        if j % 3 == 0:
            corpus[j, (c + 5) % 64] = np.nextafter(corpus[j, (c + 5) % 64], np.float32(np.inf), dtype=np.float32)
    doc_ids = [f"d{j:02d}" for j in range(40)]
    expected = _reference_rankings(query, corpus, doc_ids, 10)[0]
    reference = _fsum_scores(query, corpus)[0]
    assert len(set(reference[[doc_ids.index(d) for d in expected]])) > 5  # the reference top 10 is not one tie group
    for order in (np.arange(40), np.random.default_rng(1).permutation(40), np.arange(40)[::-1]):
        run = search_run(["q"], [doc_ids[j] for j in order], query, corpus[order], 10)
        assert _ids(run, "q") == expected


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_identical_vectors_get_identical_scores_at_any_position(seed: int) -> None:
    rng = np.random.default_rng(seed)
    dim = 96
    corpus = _unit(rng.standard_normal((3000, dim)))
    copies = [0, 1, 7, 17, 1023, 1025, 2047, 2999]
    corpus[copies] = corpus[0]
    queries = _unit(rng.standard_normal((45, dim)))
    queries[[5, 21, 44]] = queries[0]
    doc_ids = [f"doc{j:05d}" for j in range(3000)]
    query_ids = [f"q{i:02d}" for i in range(45)]
    runs = []
    for shuffle in range(3):
        d_order = np.arange(3000) if shuffle == 0 else rng.permutation(3000)
        q_order = np.arange(45) if shuffle == 0 else rng.permutation(45)
        runs.append(
            search_run([query_ids[i] for i in q_order], [doc_ids[j] for j in d_order], queries[q_order], corpus[d_order], 3000, corpus_chunk=1000)
        )
    first = runs[0]
    for query_id in query_ids:
        ranking = first.ranking(query_id)
        scores = dict(ranking)
        assert len({scores[doc_ids[j]] for j in copies}) == 1
        # the copies sit together in the ranking, in doc id order (descending)
        positions = sorted(k for k, (doc, _) in enumerate(ranking) if doc in {doc_ids[j] for j in copies})
        assert positions == list(range(positions[0], positions[0] + len(copies)))
        assert [ranking[k][0] for k in positions] == sorted((doc_ids[j] for j in copies), reverse=True)
        for other in runs[1:]:
            assert other.ranking(query_id) == ranking  # bit-identical scores, same order
    for copy in ("q05", "q21", "q44"):
        assert first.ranking(copy) == first.ranking("q00")


def test_k_beyond_the_corpus_ranks_every_document_once() -> None:
    queries, corpus, query_ids, doc_ids = _data(seed=2, n_base=30, n_dups=10, n_queries=6)
    for corpus_chunk, query_chunk in ((262_144, 8_192), (7, 2)):
        scores, indices = exact_top_k(queries, corpus, 1000, corpus_chunk=corpus_chunk, query_chunk=query_chunk)
        assert indices.shape == (6, 40)
        assert all(sorted(row) == list(range(40)) for row in indices.tolist())
        run = rankings_to_run(query_ids, doc_ids, scores, indices)
        assert run.n_entries == 6 * 40
        expected = _reference_rankings(queries, corpus, doc_ids, 1000)
        for i, query_id in enumerate(query_ids):
            assert _ids(run, query_id) == expected[i]


def test_tied_documents_are_ordered_by_doc_id_descending() -> None:
    corpus = _unit(np.array([[1.0, 0.0], [0.6, 0.8], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]))
    queries = _unit(np.array([[1.0, 0.0]]))
    doc_ids = ["b", "c", "é", "a", "z"]  # byte-wise: "é" (0xc3 0xa9) > "z" > "b" > "a"
    run = search_run(["q"], doc_ids, queries, corpus, 10, corpus_chunk=2)
    assert _ids(run, "q") == ["é", "b", "a", "c", "z"]
    assert [s for _, s in run.ranking("q")] == pytest.approx([1.0, 1.0, 1.0, 0.6, 0.0], abs=1e-7)


def test_cut_inside_a_tie_group_keeps_the_trec_first_documents() -> None:
    corpus = _unit(np.array([[1.0, 0.0]] * 4 + [[0.0, 1.0]]))
    queries = _unit(np.array([[1.0, 0.0]]))
    doc_ids = ["a", "b", "c", "d", "e"]
    # trec order of the full ranking is d, c, b, a, e; its top 2 are d and c, whatever the corpus order and chunking.
    for chunk in (1, 2, 5):
        run = search_run(["q"], doc_ids, queries, corpus, 2, corpus_chunk=chunk)
        assert _ids(run, "q") == ["d", "c"]
    shuffled = [4, 2, 0, 3, 1]
    run = search_run(["q"], [doc_ids[i] for i in shuffled], queries, corpus[shuffled], 2)
    assert _ids(run, "q") == ["d", "c"]


def test_distinct_vectors_with_exactly_equal_scores_merge_by_doc_id() -> None:
    """Orthogonal one-hot documents all score exactly 0 against a query on another axis: one tie group of distinct rows."""
    dim = 12
    corpus = np.zeros((40, dim), dtype=np.float32)
    corpus[np.arange(40), np.arange(40) % (dim - 1)] = 1.0  # axes 0..10, several copies each
    query = np.zeros((1, dim), dtype=np.float32)
    query[0, dim - 1] = 1.0
    doc_ids = [f"x{(j * 17) % 40:02d}" for j in range(40)]
    run = search_run(["q"], doc_ids, query, corpus, 15)
    assert _ids(run, "q") == sorted(doc_ids, reverse=True)[:15]
    assert {s for _, s in run.ranking("q")} == {0.0}


def test_a_zero_query_and_a_constant_corpus_are_handled_by_deeper_fetches() -> None:
    """Degenerate encoders: every score equal. The window covers the whole corpus; the cut is by doc id."""
    rng = np.random.default_rng(3)
    corpus = _unit(rng.standard_normal((500, 8)))
    queries = np.zeros((3, 8), dtype=np.float32)
    queries[1] = corpus[10]
    doc_ids = [f"d{(j * 7919) % 500:03d}" for j in range(500)]
    run = search_run(["q0", "q1", "q2"], doc_ids, queries, corpus, 50, corpus_chunk=64)
    assert _ids(run, "q0") == _ids(run, "q2") == sorted(doc_ids, reverse=True)[:50]
    assert _ids(run, "q1") == _reference_rankings(queries[1:2], corpus, doc_ids, 50)[0]
    constant = np.repeat(corpus[:1], 500, axis=0)
    run = search_run(["q0", "q1", "q2"], doc_ids, queries, constant, 50, corpus_chunk=64)
    assert all(_ids(run, q) == sorted(doc_ids, reverse=True)[:50] for q in ("q0", "q1", "q2"))


def test_crafted_hash_collisions_fall_back_to_a_byte_sort(monkeypatch: pytest.MonkeyPatch) -> None:
    queries, corpus, query_ids, doc_ids = _data(seed=4)
    expected = search_run(query_ids, doc_ids, queries, corpus, 20)
    fast = UniqueRows.of(corpus, np.arange(len(corpus)))
    hashes = np.zeros(len(corpus), dtype=np.uint64)
    assert exact.group_rows(corpus, np.arange(len(corpus)), hashes)[1] is False
    monkeypatch.setattr(exact, "row_hashes", lambda vectors: np.zeros(len(vectors), dtype=np.uint64))
    slow = UniqueRows.of(corpus, np.arange(len(corpus)))
    assert sorted(slow.multiplicity.tolist()) == sorted(fast.multiplicity.tolist())
    assert sorted(bytes(corpus[r]) for r in slow.representatives) == sorted(bytes(corpus[r]) for r in fast.representatives)
    collided = search_run(query_ids, doc_ids, queries, corpus, 20)
    assert all(collided.ranking(q) == expected.ranking(q) for q in query_ids)


@pytest.mark.parametrize(
    ("value", "message"),
    [(np.nan, "NaN or infinite"), (np.inf, "NaN or infinite"), (1e30, "L2 norm 1e+30"), (-1e20, "L2 norm 1e+20")],
)
@pytest.mark.parametrize("side", ["query", "document"])
def test_vectors_that_cannot_be_searched_are_refused_with_the_callers_code(value: float, message: str, side: str) -> None:
    queries, corpus, query_ids, doc_ids = _data(seed=5)
    (queries if side == "query" else corpus)[2, 3] = value
    for code in ("OUTPUT_INVALID", "MODEL_ERROR"):
        with pytest.raises(TaskFailure) as caught:
            search_run(query_ids, doc_ids, queries, corpus, 10, fault_code=code)
        assert caught.value.code == code
        assert message in caught.value.detail and f"{side} embeddings: row 2" in caught.value.detail


def test_large_but_accepted_norms_give_finite_exact_scores() -> None:
    queries, corpus, query_ids, doc_ids = _data(seed=6)
    run = search_run(query_ids, doc_ids, queries * np.float32(9e14), corpus * np.float32(9e14), 10)
    assert all(np.isfinite(s) for q in query_ids for _, s in run.ranking(q))
    assert [_ids(run, q) for q in query_ids] == _reference_rankings(queries * np.float32(9e14), corpus * np.float32(9e14), doc_ids, 10)


def test_negative_zero_and_subnormals_are_canonical() -> None:
    """-0.0 and subnormal values count as +0.0: rows differing only there are duplicates with equal scores."""
    corpus = np.array([[1.0, 0.0, 0.5], [1.0, -0.0, 0.5], [1.0, 1e-40, 0.5], [0.0, 1.0, 0.0]], dtype=np.float32)
    assert corpus[2, 1] != 0 and np.signbit(corpus[1, 1])
    query = np.array([[1.0, 1e6, 1.0]], dtype=np.float32)  # 1e6 * 1e-40 would be 1e-34, not 0, were it not flushed
    run = search_run(["q"], ["a", "b", "c", "d"], query, corpus, 4)
    assert run.ranking("q") == [("d", 1e6), ("c", 1.5), ("b", 1.5), ("a", 1.5)]
    clean, _ = screened(corpus, "document", "OUTPUT_INVALID")
    assert len(UniqueRows.of(clean, np.arange(4)).representatives) == 2
    assert not np.signbit(clean[1, 1]) and clean[2, 1] == 0


def test_faiss_top_k_is_plain_float32_search() -> None:
    queries, corpus, _, _ = _data(seed=8)
    scores, indices = faiss_top_k(queries, corpus, 7, corpus_chunk=13, query_chunk=4)
    assert scores.dtype == np.float32 and indices.shape == (len(queries), 7)
    reference = _fsum_scores(queries, corpus)
    np.testing.assert_allclose(scores, -np.sort(-reference, axis=1)[:, :7], atol=1e-6)


def test_rankings_to_run_drops_unfilled_slots() -> None:
    scores = np.array([[0.9, 0.5, -np.inf], [0.3, -np.inf, -np.inf]], dtype=np.float32)
    indices = np.array([[2, 0, -1], [1, -1, -1]], dtype=np.int64)
    run = rankings_to_run(["q1", "q2"], ["a", "b", "c"], scores, indices)
    assert run.ranking("q1") == [("c", pytest.approx(0.9)), ("a", pytest.approx(0.5))]
    assert run.ranking("q2") == [("b", pytest.approx(0.3))]


def test_empty_corpus_and_no_queries_give_empty_rankings() -> None:
    queries = _unit(np.ones((2, 4)))
    scores, indices = exact_top_k(queries, np.zeros((0, 4), dtype=np.float32), 10)
    assert scores.shape == indices.shape == (2, 0)
    run = rankings_to_run(["q1", "q2"], [], scores, indices)
    assert run.ranking("q1") == [] and run.n_entries == 0
    scores, indices = exact_top_k(np.zeros((0, 4), dtype=np.float32), queries, 10)
    assert scores.shape == (0, 2)
