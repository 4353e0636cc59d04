"""Exact, order-independent inner-product search: faiss candidates, float64 re-scoring, trec-order cuts.

A score is a function of the query vector and the document vector alone
(:func:`grader.retrieval.exact.score`, a fixed-order float64 sum), so identical
vectors always get identical scores, and rankings follow trec order (score
descending, then document id descending, byte-wise) whatever the corpus and
query order, the thread count or the CPU. How (``docs/search.md``):

1. vectors are screened (:mod:`grader.retrieval.vectors`): non-finite values or
   norms above 1e15 are refused, ``-0.0`` and subnormals become ``+0.0``;
2. identical corpus rows are stored once, in byte order, with their multiplicity
   and their documents sorted by doc id descending;
3. faiss (``IndexFlatIP``, float32, corpus chunks so memory stays bounded) returns
   each query's best ``k`` + a margin unique rows;
4. every row whose float32 score is within the proven error bound of the k-th
   is re-scored exactly (rows beyond the fetched depth that could still be in
   range make that query fetch deeper), then the documents are cut at ``k`` in
   trec order, duplicates expanded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import faiss
import numpy as np

from grader.errors import TaskFailure
from grader.failures import FailureCode
from grader.retrieval import exact
from grader.retrieval.vectors import MAX_NORM, canonical_float32
from grader.runs.ordering import byte_order_ranks
from grader.runs.run import Run

#: Entries (query rows x fetched depth) held at once when queries must fetch deeper.
DEEP_FETCH_ENTRIES = 1 << 24
#: Rows gathered at once when faiss indexes the distinct rows of a corpus with duplicates.
GATHER_ROWS = 16_384


def faiss_top_k(
    queries: np.ndarray, corpus: np.ndarray, depth: int, corpus_chunk: int = 262_144, query_chunk: int = 8_192, *, rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Plain faiss: top-``depth`` float32 inner products over corpus chunks, merged; best first, -1 pads.

    With ``rows``, the corpus is ``corpus[rows]`` (gathered one chunk at a time)
    and the indices returned are positions in ``rows``. Peak memory is one
    chunk's index plus the running lists. This is what the exact search builds
    on, and the baseline of ``bench/search.py``.
    """
    n_queries, dimension = queries.shape
    n_corpus = len(corpus) if rows is None else len(rows)
    best_scores = np.full((n_queries, depth), -np.inf, dtype=np.float32)
    best_indices = np.full((n_queries, depth), -1, dtype=np.int64)
    for begin in range(0, n_corpus, corpus_chunk):
        block_rows = min(corpus_chunk, n_corpus - begin)
        index = faiss.IndexFlatIP(dimension)
        if rows is None:
            index.add(corpus[begin : begin + block_rows])
        else:  # gather in slices, so the copy never adds more than a slice to the index's own memory
            for slice_begin in range(begin, begin + block_rows, GATHER_ROWS):
                index.add(corpus[rows[slice_begin : min(slice_begin + GATHER_ROWS, begin + block_rows)]])
        block_depth = min(depth, block_rows)
        for q_begin in range(0, n_queries, query_chunk):
            q_end = min(q_begin + query_chunk, n_queries)
            scores, indices = index.search(queries[q_begin:q_end], block_depth)
            if begin == 0 and block_depth == depth:
                best_scores[q_begin:q_end], best_indices[q_begin:q_end] = scores, indices
                continue
            merged_scores = np.concatenate([best_scores[q_begin:q_end], scores], axis=1)
            merged_indices = np.concatenate([best_indices[q_begin:q_end], np.where(indices >= 0, indices + begin, -1)], axis=1)
            keep = np.argsort(-merged_scores, axis=1, kind="stable")[:, :depth]
            best_scores[q_begin:q_end] = np.take_along_axis(merged_scores, keep, axis=1)
            best_indices[q_begin:q_end] = np.take_along_axis(merged_indices, keep, axis=1)
        del index
    return best_scores, best_indices


@dataclass(frozen=True)
class UniqueRows:
    """The corpus with identical rows counted once, and the documents behind each.

    Unique row ``u`` is corpus row ``representatives[u]``; no vectors are copied.
    """

    representatives: np.ndarray  # (unique,) int64 corpus rows
    multiplicity: np.ndarray  # (unique,) int64
    group_offsets: np.ndarray  # (unique + 1,) int64: documents of row u are group_docs[offsets[u]:offsets[u + 1]]
    group_docs: np.ndarray  # corpus row numbers, by doc rank descending within a group
    identity: bool  # no duplicates: representatives is 0..n-1

    @classmethod
    def of(cls, corpus: np.ndarray, doc_ranks: np.ndarray) -> UniqueRows:
        """Group identical rows by their bytes (screened vectors: equal values have equal bytes)."""
        n = len(corpus)
        hashes = exact.row_hashes(corpus)
        group, fast = exact.group_rows(corpus, np.argsort(hashes, kind="stable"), hashes)
        if not fast:  # crafted hash collisions: sort the rows' bytes instead
            keys = corpus.view(np.dtype((np.void, corpus.dtype.itemsize * corpus.shape[1]))).ravel()
            group = np.unique(keys, return_inverse=True)[1].reshape(-1).astype(np.int64)
        n_unique = int(group.max()) + 1 if n else 0
        if n_unique == n:  # no duplicates
            identity = np.arange(n, dtype=np.int64)
            return cls(identity, np.ones(n, dtype=np.int64), np.arange(n + 1, dtype=np.int64), identity, True)
        group_docs = np.lexsort((-doc_ranks, group)).astype(np.int64)
        counts = np.bincount(group, minlength=n_unique).astype(np.int64)
        offsets = np.zeros(n_unique + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return cls(group_docs[offsets[:-1]], counts, offsets, group_docs, False)


def screened(vectors: np.ndarray, side: str, fault_code: FailureCode) -> tuple[np.ndarray, np.ndarray]:
    """``vectors`` as canonical float32 rows (see :mod:`grader.retrieval.vectors`) and their norms; refused with ``fault_code``."""
    array = np.asarray(vectors)
    if array.ndim != 2 or (array.shape[1] == 0 and array.shape[0] > 0):
        raise TaskFailure(fault_code, f"{side} embeddings have shape {array.shape}; (rows, dim) with dim >= 1 is required")
    array = np.ascontiguousarray(array, dtype=np.float32)
    norms, finite, odd = exact.scan_rows(array, float(np.finfo(np.float32).tiny))
    if not finite.all():
        raise TaskFailure(fault_code, f"{side} embeddings: row {int(np.flatnonzero(~finite)[0])} contains NaN or infinite values")
    if len(norms) and norms.max() > MAX_NORM:
        row = int(np.argmax(norms))
        raise TaskFailure(fault_code, f"{side} embeddings: row {row} has L2 norm {norms[row]:.3g}, above the limit of {MAX_NORM:.0e}")
    return (canonical_float32(array) if odd.any() else array), norms


def exact_top_k(
    queries: np.ndarray,
    corpus: np.ndarray,
    k: int,
    *,
    doc_ranks: np.ndarray | None = None,
    corpus_chunk: int = 262_144,
    query_chunk: int = 8_192,
    fault_code: FailureCode = FailureCode.OUTPUT_INVALID,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` corpus rows by exact inner product for every query row, in trec order.

    Returns ``(scores, indices)`` of shape (queries, min(k, corpus)), float64 and
    int64, best first: score descending, then ``doc_ranks`` descending (the
    byte-order ranks of the document ids; without them, the row number stands
    in). Vectors that cannot be searched (:func:`screened`: NaN, infinities, norms
    above 1e15) raise :class:`TaskFailure` with ``fault_code``.
    """
    queries, q_norms = screened(queries, "query", fault_code)
    corpus, d_norms_all = screened(corpus, "document", fault_code)
    if queries.shape[1] != corpus.shape[1] and len(corpus) and len(queries):
        raise TaskFailure(fault_code, f"query embeddings have {queries.shape[1]} columns, document embeddings {corpus.shape[1]}")
    n_queries, n_docs = len(queries), len(corpus)
    depth = min(k, n_docs)
    out_scores = np.full((n_queries, depth), -np.inf, dtype=np.float64)
    out_docs = np.full((n_queries, depth), -1, dtype=np.int64)
    if depth == 0 or n_queries == 0:
        return out_scores, out_docs
    ranks = np.arange(n_docs, dtype=np.int64) if doc_ranks is None else np.ascontiguousarray(doc_ranks, dtype=np.int64)
    unique = UniqueRows.of(corpus, ranks)
    n_unique = len(unique.representatives)
    coefficient, eta = exact.error_coefficients(corpus.shape[1])
    d_norms = d_norms_all if unique.identity else d_norms_all[unique.representatives]
    # k unique rows always hold at least k documents; the margin catches most rows near the k-th score at once.
    fetch = min(n_unique, depth + max(32, depth // 16))
    pending = np.arange(n_queries, dtype=np.int64)
    while len(pending):
        step = max(1, min(query_chunk, DEEP_FETCH_ENTRIES // fetch)) if fetch > depth + max(32, depth // 16) else query_chunk
        still: list[np.ndarray] = []
        for begin in range(0, len(pending), step):
            rows = pending[begin : begin + step]
            selected = queries if len(rows) == n_queries else queries[rows]
            scores, found = faiss_top_k(
                selected, corpus, fetch, corpus_chunk=corpus_chunk, query_chunk=query_chunk, rows=None if unique.identity else unique.representatives
            )
            done = np.zeros(len(rows), dtype=np.bool_)
            exact.finish_rows(
                rows, queries, q_norms, scores, found, corpus, unique.representatives, d_norms, float(d_norms.max()), unique.multiplicity,
                unique.group_offsets, unique.group_docs, ranks, n_unique, depth, coefficient, eta,
                out_scores, out_docs, done,
            )  # fmt: skip
            still.append(rows[~done])
        pending = np.concatenate(still)
        fetch = min(n_unique, fetch * 4)
    if not np.isfinite(out_scores).all() or (out_docs < 0).any():  # cannot happen with screened vectors: a guard
        raise TaskFailure(fault_code, "search produced non-finite scores")
    return out_scores, out_docs


def rankings_to_run(
    query_ids: Sequence[str], doc_ids: Sequence[str], scores: np.ndarray, indices: np.ndarray, *, doc_ranks: np.ndarray | None = None
) -> Run:
    """Turn search output (arrays) into a :class:`Run`, straight to the metrics engine."""
    valid = indices >= 0
    lengths = valid.sum(axis=1)
    offsets = np.zeros(len(query_ids) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Run.build(query_ids, offsets, indices[valid], doc_ids, scores[valid].astype(np.float64), doc_ranks=doc_ranks, doc_ids_checked=True)


def search_run(
    query_ids: Sequence[str],
    doc_ids: Sequence[str],
    query_vectors: np.ndarray,
    corpus_vectors: np.ndarray,
    k: int,
    *,
    corpus_chunk: int = 262_144,
    fault_code: FailureCode = FailureCode.OUTPUT_INVALID,
) -> Run:
    """Exact top-``k`` search with trec-order cuts, as a :class:`Run`.

    ``fault_code`` is the failure code for vectors that cannot be searched:
    ``MODEL_ERROR`` where the grader's own encoder produced them, ``OUTPUT_INVALID``
    where a submission's image returned them.
    """
    doc_ranks = byte_order_ranks(doc_ids)
    scores, indices = exact_top_k(query_vectors, corpus_vectors, k, doc_ranks=doc_ranks, corpus_chunk=corpus_chunk, fault_code=fault_code)
    return rankings_to_run(query_ids, doc_ids, scores, indices, doc_ranks=doc_ranks)
