"""Exact inner-product search with faiss, in corpus chunks so memory stays bounded.

The cut at depth k follows trec_eval's order too: when documents tied on score
straddle the cut, the ones with the highest ids (byte-wise) are kept, so the
result never depends on where a document sits in the corpus.
"""

from __future__ import annotations

from collections.abc import Sequence

import faiss
import numpy as np

from grader.metrics.ordering import byte_order_ranks
from grader.runs.run import Run


def _search_chunks(queries: np.ndarray, corpus: np.ndarray, depth: int, corpus_chunk: int, query_chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``depth`` by inner product over corpus chunks, merged; best first."""
    n_queries, dimension = queries.shape
    best_scores = np.full((n_queries, depth), -np.inf, dtype=np.float32)
    best_indices = np.full((n_queries, depth), -1, dtype=np.int64)
    for begin in range(0, len(corpus), corpus_chunk):
        block = corpus[begin : begin + corpus_chunk]
        index = faiss.IndexFlatIP(dimension)
        index.add(block)
        block_depth = min(depth, len(block))
        for q_begin in range(0, n_queries, query_chunk):
            q_end = min(q_begin + query_chunk, n_queries)
            scores, indices = index.search(queries[q_begin:q_end], block_depth)
            merged_scores = np.concatenate([best_scores[q_begin:q_end], scores], axis=1)
            merged_indices = np.concatenate([best_indices[q_begin:q_end], indices + begin], axis=1)
            keep = np.argsort(-merged_scores, axis=1, kind="stable")[:, :depth]
            best_scores[q_begin:q_end] = np.take_along_axis(merged_scores, keep, axis=1)
            best_indices[q_begin:q_end] = np.take_along_axis(merged_indices, keep, axis=1)
        del index
    return best_scores, best_indices


def _trec_cut(scores: np.ndarray, indices: np.ndarray, doc_ranks: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``k`` of one query's candidates in trec order (score desc, doc rank desc)."""
    order = np.lexsort((-doc_ranks[indices], -scores))[:k]
    return scores[order], indices[order]


def exact_top_k(
    queries: np.ndarray,
    corpus: np.ndarray,
    k: int,
    *,
    doc_ranks: np.ndarray | None = None,
    corpus_chunk: int = 262_144,
    query_chunk: int = 8_192,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` corpus rows by inner product for every query row.

    Returns ``(scores, indices)`` of shape (queries, min(k, corpus)), best first.
    Each corpus chunk gets its own ``IndexFlatIP``; per-chunk lists are merged, so
    peak memory is one chunk's index plus the running lists. With ``doc_ranks``
    (byte-order ranks of the corpus ids), a tie group straddling the cut is
    resolved by trec order: one extra candidate is fetched to detect it, and only
    such queries are searched again in full.
    """
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    corpus = np.ascontiguousarray(corpus, dtype=np.float32)
    depth = min(k, len(corpus))
    if depth == 0:
        return np.empty((len(queries), 0), dtype=np.float32), np.empty((len(queries), 0), dtype=np.int64)
    fetch = min(depth + 1, len(corpus)) if doc_ranks is not None else depth
    scores, indices = _search_chunks(queries, corpus, fetch, corpus_chunk, query_chunk)
    if doc_ranks is None or fetch == depth:
        if doc_ranks is not None:  # the whole corpus was fetched: just order it
            for row in range(len(queries)):
                scores[row], indices[row] = _trec_cut(scores[row], indices[row], doc_ranks, depth)
        return scores[:, :depth], indices[:, :depth]
    straddling = np.flatnonzero(scores[:, depth - 1] == scores[:, depth])
    out_scores, out_indices = scores[:, :depth].copy(), indices[:, :depth].copy()
    if len(straddling):
        full_scores, full_indices = _search_chunks(queries[straddling], corpus, len(corpus), corpus_chunk, query_chunk)
        for position, row in enumerate(straddling):
            out_scores[row], out_indices[row] = _trec_cut(full_scores[position], full_indices[position], doc_ranks, depth)
    return out_scores, out_indices


def rankings_to_run(query_ids: Sequence[str], doc_ids: Sequence[str], scores: np.ndarray, indices: np.ndarray, *, doc_ranks: np.ndarray | None = None) -> Run:
    """Turn search output (arrays) into a :class:`Run`, straight to the metrics engine."""
    valid = indices >= 0
    lengths = valid.sum(axis=1)
    offsets = np.zeros(len(query_ids) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Run.build(query_ids, offsets, indices[valid], doc_ids, scores[valid].astype(np.float64), doc_ranks=doc_ranks, doc_ids_checked=True)


def search_run(query_ids: Sequence[str], doc_ids: Sequence[str], query_vectors: np.ndarray, corpus_vectors: np.ndarray, k: int, *, corpus_chunk: int = 262_144) -> Run:
    """Exact top-``k`` search with trec-order cuts, as a :class:`Run`."""
    doc_ranks = byte_order_ranks(doc_ids)
    scores, indices = exact_top_k(query_vectors, corpus_vectors, k, doc_ranks=doc_ranks, corpus_chunk=corpus_chunk)
    return rankings_to_run(query_ids, doc_ids, scores, indices, doc_ranks=doc_ranks)
