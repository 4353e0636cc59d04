"""Generated vectors through the search: only documented outcomes.

Each case mixes what an encoder or an ``encode``-mode image may return: NaN,
infinities, norms above and just below the limit, ``-0.0``, subnormals, zero
rows, exact duplicates, near-duplicates one ulp apart, and tiny corpora. The
search must either rank exactly as a brute-force ``math.fsum`` reference (in
trec order) or refuse with ``TaskFailure`` and the caller's code; nothing else
(no other exception, no non-finite score).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from grader.errors import TaskFailure
from grader.retrieval.search import search_run
from grader.retrieval.vectors import MAX_NORM


def _case(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    dim = int(rng.choice([1, 3, 8, 13]))
    n_docs, n_queries = int(rng.integers(1, 40)), int(rng.integers(1, 6))
    corpus = rng.standard_normal((n_docs, dim)).astype(np.float32)
    queries = rng.standard_normal((n_queries, dim)).astype(np.float32)
    for _ in range(int(rng.integers(0, 4))):
        target = corpus if rng.random() < 0.7 else queries
        row, col = int(rng.integers(0, len(target))), int(rng.integers(0, dim))
        kind = rng.integers(0, 9)
        if kind == 0:
            target[row, col] = np.nan
        elif kind == 1:
            target[row, col] = np.inf if rng.random() < 0.5 else -np.inf
        elif kind == 2:
            target[row] *= np.float32(1e30)
        elif kind == 3:
            target[row] = target[row] / np.float32(np.linalg.norm(target[row]) or 1) * np.float32(MAX_NORM * 0.5)
        elif kind == 4:
            target[row, col] = -0.0
        elif kind == 5:
            target[row, col] = np.float32(1e-41)
        elif kind == 6:
            target[row] = 0.0
        elif kind == 7 and len(target) > 1:
            target[row] = target[(row + 1) % len(target)]
        else:
            target[row, col] = np.nextafter(target[row, col], np.float32(np.inf), dtype=np.float32)
    return queries, corpus


def _reference(queries: np.ndarray, corpus: np.ndarray, doc_ids: list[str], k: int) -> list[list[str]]:
    clean = lambda a: np.where(np.abs(a) < np.finfo(np.float32).tiny, 0.0, a.astype(np.float64))  # noqa: E731
    q64, d64 = clean(queries), clean(corpus)
    out = []
    for q in q64:
        scores = [math.fsum(q * d) for d in d64]
        order = sorted(range(len(doc_ids)), key=lambda j: (-scores[j], tuple(-b for b in doc_ids[j].encode()) + (1,)))
        out.append([doc_ids[j] for j in order[:k]])
    return out


@pytest.mark.parametrize("seed", range(60))
def test_generated_vectors_give_the_reference_ranking_or_a_coded_refusal(seed: int) -> None:
    rng = np.random.default_rng(seed)
    queries, corpus = _case(rng)
    doc_ids = [f"d{(j * 31) % len(corpus):03d}{'x' * (j % 2)}" for j in range(len(corpus))]
    query_ids = [f"q{i}" for i in range(len(queries))]
    k = int(rng.integers(1, 12))
    code = "OUTPUT_INVALID" if seed % 2 else "MODEL_ERROR"
    finite = np.isfinite(queries).all() and np.isfinite(corpus).all()
    with np.errstate(over="ignore"):
        small = (
            finite
            and max(np.linalg.norm(queries.astype(np.float64), axis=1).max(), np.linalg.norm(corpus.astype(np.float64), axis=1).max()) <= MAX_NORM
        )
    try:
        run = search_run(query_ids, doc_ids, queries, corpus, k, fault_code=code)
    except TaskFailure as failure:
        assert failure.code == code and not small, failure
        return
    assert small
    expected = _reference(queries, corpus, doc_ids, k)
    for i, query_id in enumerate(query_ids):
        ranking = run.ranking(query_id)
        assert all(math.isfinite(s) for _, s in ranking)
        assert [doc for doc, _ in ranking] == expected[i]
