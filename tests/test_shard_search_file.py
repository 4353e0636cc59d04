"""A shard job's search written a block of queries at a time (grader.retrieval.shard_output) against the whole search.

The reference is what a shard job did before: every query searched at once (:func:`search_blocks`) and the lists cut
and packed whole (:func:`dense_run`). The blocked writer must give the same bytes whatever the block of queries and
the blocks of documents (vectors of small integers: ties everywhere, across the depth too), and hold lists of one
block of queries only.
"""

from __future__ import annotations

import hashlib
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from grader.errors import DimensionMismatch, TaskFailure
from grader.failures import FailureCode
from grader.retrieval.merge import merge_top_k
from grader.retrieval.search import exact_top_k
from grader.retrieval.shard_exchange import dense_run, search_width
from grader.retrieval.shard_output import LIST_COPIES, query_block_for, search_to_file
from grader.retrieval.shard_run import search_blocks


def _blocks(vectors: np.ndarray, rows: int) -> Iterator[tuple[int, np.ndarray]]:
    for first in range(0, len(vectors), rows):
        yield first, vectors[first : first + rows]


def _case(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """Queries, a shard's document vectors, their canonical ranks in a larger corpus, the corpus size and a depth."""
    rng = np.random.default_rng(seed)
    queries, rows, dimension = int(rng.integers(0, 40)), int(rng.integers(1, 70)), int(rng.integers(1, 5))
    documents = rows + int(rng.integers(0, 50))
    ranks = np.sort(rng.choice(documents, size=rows, replace=False)).astype(np.int64)
    rng.shuffle(ranks)  # a shard's rows are in staging order, not canonical order
    query_vectors = rng.integers(-2, 3, size=(queries, dimension)).astype(np.float32)
    doc_vectors = rng.integers(-2, 3, size=(rows, dimension)).astype(np.float32)
    return query_vectors, doc_vectors, ranks, documents, int(rng.integers(1, 12))


@pytest.mark.parametrize("seed", range(16))
def test_the_blocked_search_writes_the_whole_searchs_bytes_whatever_the_blocks(tmp_path: Path, seed: int) -> None:
    query_vectors, doc_vectors, ranks, documents, depth = _case(seed)
    scores, docs = search_blocks(query_vectors, _blocks(doc_vectors, 16), ranks, search_width(depth))
    expected = dense_run(scores, np.where(docs >= 0, ranks[np.maximum(docs, 0)], -1), documents=documents, depth=depth)
    target = tmp_path / "shard.run"
    # Few blocks each way: every exact search of a block costs milliseconds of kernel start.
    for block_queries in sorted({3, 7, max(1, len(query_vectors)), len(query_vectors) + 4}):
        for block_rows in (11, len(doc_vectors)):
            digest = search_to_file(
                query_vectors,
                lambda rows=block_rows: _blocks(doc_vectors, rows),
                ranks,
                target,
                documents=documents,
                depth=depth,
                block_queries=block_queries,
            )
            data = target.read_bytes()
            assert data == expected, (block_queries, block_rows)
            assert digest == hashlib.sha256(data).hexdigest()
    assert [path.name for path in tmp_path.iterdir()] == ["shard.run"], "no temporary file is left behind"


def test_a_dimension_mismatch_is_raised_and_leaves_no_file(tmp_path: Path) -> None:
    queries = np.ones((5, 3), dtype=np.float32)
    documents = np.ones((4, 2), dtype=np.float32)
    with pytest.raises(DimensionMismatch):
        search_to_file(
            queries, lambda: _blocks(documents, 2), np.arange(4, dtype=np.int64), tmp_path / "shard.run", documents=4, depth=2, block_queries=2
        )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("queries", [0, 1, 9])
def test_a_non_finite_document_vector_is_the_models_fault_as_in_the_whole_search(tmp_path: Path, queries: int) -> None:
    """Refused as the whole search refuses it, with no queries too (the vectors are still read), and no file left."""
    query_vectors = np.ones((queries, 3), dtype=np.float32)
    doc_vectors = np.ones((6, 3), dtype=np.float32)
    doc_vectors[4, 1] = np.nan
    ranks = np.arange(6, dtype=np.int64)
    with pytest.raises(TaskFailure) as whole:
        search_blocks(query_vectors, _blocks(doc_vectors, 2), ranks, search_width(2))
    with pytest.raises(TaskFailure) as blocked:
        search_to_file(query_vectors, lambda: _blocks(doc_vectors, 2), ranks, tmp_path / "shard.run", documents=6, depth=2, block_queries=4)
    assert blocked.value.code is whole.value.code is FailureCode.MODEL_ERROR
    assert list(tmp_path.iterdir()) == []


def test_the_lists_held_are_one_block_of_queries_whatever_the_query_count(tmp_path: Path) -> None:
    """20,000 queries at depth 100 are about 33 MB of (queries x width) lists held whole; in blocks of 500 queries the
    search's Python allocations (numpy's included) stay a fraction of that."""
    rng = np.random.default_rng(0)
    depth, queries = 100, 20_000
    query_vectors = rng.standard_normal((queries, 8)).astype(np.float32)
    doc_vectors = rng.standard_normal((300, 8)).astype(np.float32)
    ranks = np.arange(300, dtype=np.int64)
    whole = queries * search_width(depth) * 16
    search_to_file(query_vectors[:10], lambda: _blocks(doc_vectors, 300), ranks, tmp_path / "warm.run", documents=300, depth=depth, block_queries=5)
    tracemalloc.start()
    try:
        search_to_file(query_vectors, lambda: _blocks(doc_vectors, 300), ranks, tmp_path / "shard.run", documents=300, depth=depth, block_queries=500)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < whole / 4, (peak, whole)


def test_the_query_block_fits_the_search_memory() -> None:
    width = search_width(1000)
    block = query_block_for(256 << 20, width)
    assert block * width * 16 * LIST_COPIES <= 256 << 20 < (block + 1) * width * 16 * LIST_COPIES
    assert query_block_for(1, width) == 1


@pytest.mark.parametrize("seed", range(12))
def test_one_blocks_lists_are_what_merging_them_with_nothing_gives(seed: int) -> None:
    # search_blocks takes the first block's lists as they come (no merge): they must already be in the merged order.
    query_vectors, doc_vectors, ranks, _documents, depth = _case(seed)
    doc_vectors[::3] *= -0.0  # signed zeros tie with zeros
    scores, docs = search_blocks(query_vectors, _blocks(doc_vectors, len(doc_vectors)), ranks, depth)
    found_scores, found = exact_top_k(query_vectors, doc_vectors, depth, doc_ranks=ranks)
    empty = np.zeros((len(query_vectors), 0))
    merged_scores, merged_docs = merge_top_k(empty, empty.astype(np.int64), found_scores, found, ranks, depth)
    assert scores.dtype == np.float64 and docs.dtype == np.int64
    assert scores.tobytes() == merged_scores.tobytes() and docs.tobytes() == merged_docs.tobytes()
    # and the lists of blocks of 5 rows, merged, are the same
    blocked_scores, blocked_docs = search_blocks(query_vectors, _blocks(doc_vectors, 5), ranks, depth)
    assert blocked_scores.tobytes() == scores.tobytes() and blocked_docs.tobytes() == docs.tobytes()
