"""Grade one shard: encode its documents to disk, search them exactly in bounded blocks, return its top-k.

The steps a shard job runs (``docs/search.md``, "Shards" and "Memory"):

1. :func:`encode_shard` encodes the shard one encoding chunk at a time (the
   chunks of the whole corpus's canonical order, so every batch, hence every
   vector bit, is the unsharded one) and appends each chunk's vectors to a
   :class:`~grader.retrieval.spool.SpoolWriter`;
2. :func:`search_spool` reads the spool back block by block, each block
   verified by its digest before it is searched, searches each block exactly
   (:func:`~grader.retrieval.search.exact_top_k`) and merges the blocks' lists
   (:func:`~grader.retrieval.merge.merge_top_k`): the shard's top ``k``, float64;
3. the spool is deleted.

The shards' lists are then merged by :func:`~grader.retrieval.merge.merge_rankings`.
Resident memory is one chunk of vectors while encoding and about
``search_memory`` while searching, plus the query vectors and the (queries x k)
lists, whatever the size of the corpus.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grader.errors import DimensionMismatch, UsageError
from grader.failures import FailureCode
from grader.retrieval.encoder import EncodingStats, OnnxEncoder
from grader.retrieval.merge import ShardRanking, merge_top_k
from grader.retrieval.search import exact_top_k
from grader.retrieval.shards import Shard
from grader.retrieval.spool import Spool, SpoolWriter
from grader.runs.ordering import byte_order_ranks

#: Copies of one block the search may hold at once (the read buffer, faiss's index, a screened copy, row groups).
BLOCK_COPIES = 4
#: Default bound of the search's block buffers.
DEFAULT_SEARCH_MEMORY = 256 << 20


def block_rows_for(search_memory: int, dimension: int) -> int:
    """Rows of one search block, so that :data:`BLOCK_COPIES` blocks of float32 rows fit in ``search_memory`` bytes."""
    return max(1, search_memory // (BLOCK_COPIES * max(1, dimension) * 4))


@dataclass(frozen=True)
class EncodedShard:
    """A shard's vectors on disk (row ``i`` is document ``doc_ids[i]``), and what encoding them counted."""

    spool: Spool
    doc_ids: tuple[str, ...]
    stats: EncodingStats


def encode_shard(
    encoder: OnnxEncoder,
    texts: Sequence[str],
    ids: Sequence[str],
    shard: Shard,
    *,
    folder: Path,
    prefix: str = "",
    search_memory: int = DEFAULT_SEARCH_MEMORY,
) -> EncodedShard:
    """Encode ``shard`` of the corpus (``texts``, ``ids``) one chunk at a time into a spool file in ``folder``."""
    chunk = encoder.batching.chunk_size
    if shard.begin % chunk:
        raise UsageError(f"shard {shard.number} starts at {shard.begin}, not on a chunk boundary of {chunk}: its batches would differ")
    writer = SpoolWriter(folder / f"shard-{shard.number}.f32", encoder.dimension, block_rows_for(search_memory, encoder.dimension))
    truncated = 0
    try:
        for start in range(0, shard.size, chunk):
            rows = shard.rows[start : start + chunk]
            # Already in canonical order and one whole chunk: encode() forms the batches the whole corpus forms here.
            vectors, stats = encoder.encode([texts[r] for r in rows], ids=[ids[r] for r in rows], prefix=prefix)
            writer.append(vectors)
            truncated += stats.truncated
    except BaseException:
        writer.abandon()
        raise
    return EncodedShard(writer.finish(), tuple(ids[r] for r in shard.rows), EncodingStats(shard.size, truncated))


def search_blocks(
    query_vectors: np.ndarray,
    blocks: Iterable[tuple[int, np.ndarray]],
    ranks: np.ndarray,
    k: int,
    *,
    fault_code: FailureCode = FailureCode.MODEL_ERROR,
) -> tuple[np.ndarray, np.ndarray]:
    """The exact top ``k`` over ``(first row, block)`` pairs, float64, trec order (``ranks``: each row's byte-order rank); docs are rows (``-1``: empty)."""
    scores = np.full((len(query_vectors), 0), -np.inf, dtype=np.float64)
    docs = np.full((len(query_vectors), 0), -1, dtype=np.int64)
    for first, block in blocks:
        if block.shape[1] != query_vectors.shape[1]:
            raise DimensionMismatch(fault_code, queries=query_vectors.shape[1], documents=block.shape[1])
        block_ranks = ranks[first : first + len(block)]
        found_scores, found = exact_top_k(query_vectors, block, k, doc_ranks=block_ranks, fault_code=fault_code)
        found = np.where(found >= 0, found + first, -1)
        if scores.shape[1] == 0:
            # The first block's lists are already in the merged order (score, then rank, descending): a merge with
            # nothing would re-sort them all (a second per shard of 1,000 queries at depth 1,000), for the same bytes.
            scores, docs = np.asarray(found_scores, dtype=np.float64), np.asarray(found, dtype=np.int64)
            continue
        scores, docs = merge_top_k(scores, docs, found_scores, found, ranks, k)
    return scores, docs


def search_spool(
    query_vectors: np.ndarray, spool: Spool, doc_ids: Sequence[str], k: int, *, fault_code: FailureCode = FailureCode.MODEL_ERROR
) -> ShardRanking:
    """The exact top ``k`` of every query over the spool's documents, block by verified block, float64 scores.

    The result names only the documents it ranks (:meth:`ShardRanking.compact`).
    """
    scores, docs = search_blocks(query_vectors, spool.blocks(), byte_order_ranks(doc_ids), k, fault_code=fault_code)
    return ShardRanking(tuple(doc_ids), scores, docs).compact()


def rank_shard(
    encoder: OnnxEncoder,
    texts: Sequence[str],
    ids: Sequence[str],
    shard: Shard,
    query_vectors: np.ndarray,
    k: int,
    *,
    folder: Path,
    prefix: str = "",
    search_memory: int = DEFAULT_SEARCH_MEMORY,
) -> tuple[ShardRanking, EncodingStats]:
    """Encode, search and forget one shard: its top-``k`` lists and its encoding counts."""
    encoded = encode_shard(encoder, texts, ids, shard, folder=folder, prefix=prefix, search_memory=search_memory)
    try:
        return search_spool(query_vectors, encoded.spool, encoded.doc_ids, k), encoded.stats
    finally:
        encoded.spool.delete()
