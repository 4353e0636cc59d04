"""Exact inner-product search with faiss, in corpus chunks so memory stays bounded."""

from __future__ import annotations

from collections.abc import Sequence

import faiss
import numpy as np

from grader.runs.run import Run


def exact_top_k(queries: np.ndarray, corpus: np.ndarray, k: int, *, corpus_chunk: int = 262_144, query_chunk: int = 8_192) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` corpus rows by inner product for every query row.

    Returns ``(scores, indices)`` of shape (queries, min(k, corpus)), best first.
    Each corpus chunk gets its own ``IndexFlatIP``; per-chunk top-k lists are
    merged, so peak memory is one chunk's index plus the running top-k.
    """
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    corpus = np.ascontiguousarray(corpus, dtype=np.float32)
    n_queries, dimension = queries.shape
    depth = min(k, len(corpus))
    best_scores = np.full((n_queries, depth), -np.inf, dtype=np.float32)
    best_indices = np.full((n_queries, depth), -1, dtype=np.int64)
    if depth == 0:
        return best_scores, best_indices
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


def rankings_to_run(query_ids: Sequence[str], doc_ids: Sequence[str], scores: np.ndarray, indices: np.ndarray) -> Run:
    """Turn search output (arrays) into a :class:`Run`, straight to the metrics engine."""
    valid = indices >= 0
    lengths = valid.sum(axis=1)
    offsets = np.zeros(len(query_ids) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Run.build(query_ids, offsets, indices[valid], doc_ids, scores[valid].astype(np.float64), doc_ids_checked=True)
