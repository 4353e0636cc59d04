"""Exact merge of top-k lists searched over disjoint parts of a corpus (shards, or blocks of one).

A score is a function of the query vector and the document vector alone
(``docs/search.md``), so a document's score is the same whichever part it was
searched in, and every document of the whole corpus's top ``k`` is in its own
part's top ``k``. Merging the parts' lists in trec order, score descending then
document id descending (byte-wise), and cutting at ``k`` is what
:func:`grader.retrieval.search.exact_top_k` breaks ties by too, so the merge of
any partition equals the unpartitioned search, bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from grader.errors import UsageError
from grader.retrieval.search import rankings_to_run
from grader.runs.ordering import byte_order_ranks
from grader.runs.run import Run

#: Entries (queries x merged width) sorted at once: bounds the merge's temporaries.
MERGE_ENTRIES = 1 << 20


def merge_top_k(
    scores: np.ndarray, docs: np.ndarray, more_scores: np.ndarray, more_docs: np.ndarray, doc_ranks: np.ndarray | None, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Two (queries, width) lists merged and cut at ``k``: score descending, then ``doc_ranks[doc]`` descending.

    ``docs`` index ``doc_ranks``; ``-1`` marks an empty slot (its score is
    ``-inf``), which sorts last. ``doc_ranks`` None: a document's index is its
    rank (canonical indexes), with no array of the corpus's size. Returns float64 scores and int64 docs of width
    ``min(k, filled width)``.
    """
    n_queries = len(scores)
    width = min(k, scores.shape[1] + more_scores.shape[1])
    out_scores = np.empty((n_queries, width), dtype=np.float64)
    out_docs = np.empty((n_queries, width), dtype=np.int64)
    # A slice of queries at a time, so the temporaries stay bounded whatever the number of queries.
    step = max(1, MERGE_ENTRIES // max(1, scores.shape[1] + more_scores.shape[1]))
    for begin in range(0, n_queries, step):
        part = slice(begin, begin + step)
        all_scores = np.concatenate([np.asarray(scores[part], dtype=np.float64), np.asarray(more_scores[part], dtype=np.float64)], axis=1)
        all_docs = np.concatenate([np.asarray(docs[part], dtype=np.int64), np.asarray(more_docs[part], dtype=np.int64)], axis=1)
        ranks = all_docs if doc_ranks is None else np.where(all_docs >= 0, doc_ranks[np.maximum(all_docs, 0)], -1)
        # lexsort: the last key is primary. -score ascending = score descending; -0.0 and 0.0 tie, as in exact.py.
        order = np.lexsort((-ranks, -all_scores), axis=1)[:, :width]
        out_scores[part] = np.take_along_axis(all_scores, order, axis=1)
        out_docs[part] = np.take_along_axis(all_docs, order, axis=1)
    return out_scores, out_docs


def select_top_k(parts: Sequence[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Many (queries, width) lists over disjoint documents merged at once and cut at ``k``: what chaining
    :func:`merge_top_k` (``doc_ranks`` None) over ``parts`` returns, bit for bit, without re-sorting the kept top ``k``
    once per part.

    The order is strict (score descending, then the document's canonical index descending; empty slots, ``-1`` at
    ``-inf``, last), so the top ``k`` of a union is the same however the union is grouped. Per row, only the entries
    scoring at least the row's ``k``-th best score can be kept (every other entry has ``k`` strictly better): those
    are found by a partition (linear), brought to the front by a stable radix sort of a boolean, and only they are
    sorted. Temporaries are bounded by :data:`MERGE_ENTRIES` per slice of queries.
    """
    n_queries = len(parts[0][0])
    total = sum(scores.shape[1] for scores, _docs in parts)
    width = min(k, total)
    out_scores = np.empty((n_queries, width), dtype=np.float64)
    out_docs = np.empty((n_queries, width), dtype=np.int64)
    step = max(1, MERGE_ENTRIES // max(1, total))
    for begin in range(0, n_queries, step):
        rows = slice(begin, begin + step)
        all_scores = np.concatenate([np.asarray(scores[rows], dtype=np.float64) for scores, _docs in parts], axis=1)
        all_docs = np.concatenate([np.asarray(docs[rows], dtype=np.int64) for _scores, docs in parts], axis=1)
        if 0 < width < total:
            kth = -np.partition(-all_scores, width - 1, axis=1)[:, width - 1 : width]  # each row's k-th best score
            kept = all_scores >= kth  # -0.0 and 0.0 compare equal, as they tie in the sort below
            front = np.argsort(~kept, axis=1, kind="stable")[:, : int(kept.sum(axis=1).max())]
            all_scores = np.take_along_axis(all_scores, front, axis=1)
            all_docs = np.take_along_axis(all_docs, front, axis=1)
        order = np.lexsort((-all_docs, -all_scores), axis=1)[:, :width]
        out_scores[rows] = np.take_along_axis(all_scores, order, axis=1)
        out_docs[rows] = np.take_along_axis(all_docs, order, axis=1)
    return out_scores, out_docs


@dataclass(frozen=True)
class ShardRanking:
    """One shard's (or block's) top-k: row ``q`` lists ``doc_ids[docs[q, j]]`` with float64 ``scores[q, j]``, best first.

    Queries are the task's, in one fixed order shared by every shard. ``-1`` in
    ``docs`` is an empty slot (a shard with fewer than ``k`` documents).
    """

    doc_ids: tuple[str, ...]
    scores: np.ndarray  # (queries, width) float64
    docs: np.ndarray  # (queries, width) int64 into doc_ids, or -1

    def __post_init__(self) -> None:
        if self.scores.shape != self.docs.shape or self.scores.ndim != 2:
            raise UsageError(f"scores {self.scores.shape} and docs {self.docs.shape} must be equal (queries, width) matrices")

    def compact(self) -> ShardRanking:
        """The same lists with ``doc_ids`` cut to the documents they name (what a shard sends back: at most queries x k ids)."""
        used = np.unique(self.docs[self.docs >= 0])
        if len(used) == len(self.doc_ids):
            return self
        recode = np.full(len(self.doc_ids) + 1, -1, dtype=np.int64)  # the last slot maps -1 to -1
        recode[used] = np.arange(len(used), dtype=np.int64)
        return ShardRanking(tuple(self.doc_ids[i] for i in used), self.scores, recode[self.docs])


def merge_rankings(parts: Iterable[ShardRanking], k: int, n_queries: int) -> ShardRanking:
    """The exact top ``k`` of the union of ``parts`` (disjoint sets of documents), whatever their order.

    Document ids are renumbered into one vocabulary sorted byte-wise, so the
    result does not depend on the order the parts arrive in.
    """
    parts = list(parts)
    # Python orders str by code point, the same order as UTF-8 bytes (lone surrogates included).
    vocabulary = sorted({doc_id for part in parts for doc_id in part.doc_ids})
    if len(vocabulary) != sum(len(part.doc_ids) for part in parts):
        raise UsageError("shards share a document: they must partition the corpus")
    code = {doc_id: i for i, doc_id in enumerate(vocabulary)}
    ranks = np.arange(len(vocabulary), dtype=np.int64)  # the vocabulary is in byte order: a code is its rank
    scores = np.full((n_queries, 0), -np.inf, dtype=np.float64)
    docs = np.full((n_queries, 0), -1, dtype=np.int64)
    for part in parts:
        if len(part.scores) != n_queries:
            raise UsageError(f"a shard ranks {len(part.scores)} queries, not {n_queries}")
        recode = np.asarray([code[doc_id] for doc_id in part.doc_ids] + [-1], dtype=np.int64)  # -1 maps to -1
        scores, docs = merge_top_k(scores, docs, part.scores, recode[part.docs], ranks, k)
    return ShardRanking(tuple(vocabulary), scores, docs).compact()


def ranking_to_run(query_ids: Sequence[str], ranking: ShardRanking) -> Run:
    """A merged ranking as a :class:`Run` for the metrics engine (as :func:`grader.retrieval.search.search_run` builds one)."""
    ranks = byte_order_ranks(ranking.doc_ids)  # merged vocabularies are sorted already; a ranking from elsewhere may not be
    return rankings_to_run(query_ids, ranking.doc_ids, ranking.scores, ranking.docs, doc_ranks=ranks)
