"""The score combination of EffectMRR, computed in query blocks so memory stays bounded.

The CAT paper (Phan et al. 2023, arXiv 2308.04693, Formula 6) combines a base
encoder's cosine with an augmented encoder's cosine::

    S = (1 - W) * minmax(cos(Q_b, C_b)) + W * cos(Q_a, C_a)

``minmax`` rescales the base cosine matrix with its *global* minimum and maximum
(over every query and every candidate), not per query. Two passes over query
blocks do it: the first finds the global minimum and maximum, the second
recomputes each block, combines it and keeps every query's top ``k``. Cosines are
inner products of L2-normalised vectors, computed in float64; ties at the cut are
resolved in trec_eval order (score descending, then document id descending).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from grader.errors import UsageError

#: Scores held per matrix block (queries x corpus); a block of float64 is 8 bytes each.
DEFAULT_BLOCK_ELEMENTS = 1 << 22


def query_blocks(n_queries: int, n_docs: int, block_elements: int = DEFAULT_BLOCK_ELEMENTS) -> Iterator[tuple[int, int]]:
    """``(begin, end)`` row ranges with at most ``block_elements`` scores each (at least one row)."""
    rows = max(1, block_elements // max(1, n_docs))
    for begin in range(0, n_queries, rows):
        yield begin, min(begin + rows, n_queries)


def as_float64(vectors: np.ndarray) -> np.ndarray:
    """A C-contiguous float64 copy (or view) of ``vectors``."""
    return np.ascontiguousarray(vectors, dtype=np.float64)


def global_min_max(queries: np.ndarray, corpus: np.ndarray, *, block_elements: int = DEFAULT_BLOCK_ELEMENTS) -> tuple[float, float]:
    """Minimum and maximum of the whole ``queries @ corpus.T`` matrix, one block at a time."""
    queries, corpus = as_float64(queries), as_float64(corpus)
    low, high = np.inf, -np.inf
    for begin, end in query_blocks(len(queries), len(corpus), block_elements):
        block = queries[begin:end] @ corpus.T
        low = min(low, float(block.min()))
        high = max(high, float(block.max()))
    return low, high


def min_max_scale(block: np.ndarray, low: float, high: float) -> np.ndarray:
    """``(block - low) / (high - low)``; all zeros when the matrix is constant (``high == low``)."""
    if high > low:
        return (block - low) / (high - low)
    return np.zeros_like(block)


def top_k_trec(block: np.ndarray, k: int, doc_ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``k`` best columns; a tie group straddling the cut keeps the highest doc ids.

    Returns ``(scores, indices)`` of shape (rows, min(k, columns)), in no particular
    order within a row (:class:`~grader.runs.run.Run` orders them).
    """
    n_rows, n_docs = block.shape
    depth = min(k, n_docs)
    if depth == n_docs:
        return block.copy(), np.broadcast_to(np.arange(n_docs, dtype=np.int64), block.shape).copy()
    if depth == 0:
        return np.empty((n_rows, 0)), np.empty((n_rows, 0), dtype=np.int64)
    kth = n_docs - depth
    chosen = np.argpartition(block, kth, axis=1)[:, kth:].astype(np.int64)
    chosen_scores = np.take_along_axis(block, chosen, axis=1)
    threshold = chosen_scores.min(axis=1)
    chosen_ties = (chosen_scores == threshold[:, None]).sum(axis=1)
    all_ties = (block == threshold[:, None]).sum(axis=1)
    for row in np.flatnonzero(all_ties > chosen_ties):
        values = block[row]
        above = np.flatnonzero(values > threshold[row])
        tied = np.flatnonzero(values == threshold[row])
        tied = tied[np.argsort(-doc_ranks[tied], kind="stable")][: depth - len(above)]
        chosen[row] = np.concatenate([above, tied])
    return np.take_along_axis(block, chosen, axis=1), chosen


@dataclass(frozen=True)
class TopK:
    """Every query's top-k candidates: scores and corpus rows, shape (queries, depth)."""

    scores: np.ndarray
    indices: np.ndarray


@dataclass(frozen=True)
class Combined:
    """The base ranking, the combined ranking and the base cosine range used by min-max."""

    base: TopK
    combined: TopK
    base_min: float
    base_max: float


def combine_rankings(
    base_queries: np.ndarray,
    base_corpus: np.ndarray,
    augmented_queries: np.ndarray,
    augmented_corpus: np.ndarray,
    weight: float,
    k: int,
    doc_ranks: np.ndarray,
    *,
    block_elements: int = DEFAULT_BLOCK_ELEMENTS,
) -> Combined:
    """Top-``k`` of the base cosine and of ``S`` for every query (rows aligned on both sides).

    All four inputs must already be L2-normalised; base and augmented rows must
    describe the same queries and documents in the same order.
    """
    if len(base_queries) != len(augmented_queries) or len(base_corpus) != len(augmented_corpus):
        raise UsageError("base and augmented embeddings do not have the same rows")
    bq, bc, aq, ac = (as_float64(x) for x in (base_queries, base_corpus, augmented_queries, augmented_corpus))
    low, high = global_min_max(bq, bc, block_elements=block_elements)
    n_queries, n_docs = len(bq), len(bc)
    depth = min(k, n_docs)
    out = {name: (np.empty((n_queries, depth)), np.empty((n_queries, depth), dtype=np.int64)) for name in ("base", "combined")}
    for begin, end in query_blocks(n_queries, n_docs, block_elements):
        base_block = bq[begin:end] @ bc.T
        for name, block in (
            ("base", base_block),
            ("combined", (1.0 - weight) * min_max_scale(base_block, low, high) + weight * (aq[begin:end] @ ac.T)),
        ):
            scores, indices = top_k_trec(block, depth, doc_ranks)
            out[name][0][begin:end] = scores
            out[name][1][begin:end] = indices
    return Combined(TopK(*out["base"]), TopK(*out["combined"]), low, high)
