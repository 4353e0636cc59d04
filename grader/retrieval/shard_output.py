"""A shard job's search written to its output file a block of queries at a time: its memory bounded whatever the task's query count.

A shard's run lists every judged query of its task (up to about 53,000 in CoIR): held whole, its (queries x width)
lists, their merge and the compact run built from them came to 3.9 GiB in one shard job's process at CoIR's full
scale (bench/coir_shape.py --scale 1, 2026-12-04). Here the queries are searched a block at a time against the
shard's document vectors (read again for each block: from the page cache, a fraction of the search's work) and each
block's lists are cut and appended to the run on disk (:class:`~grader.retrieval.shard_stream.RunWriter`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from grader.failures import FailureCode
from grader.retrieval.shard_exchange import boundary_lists, search_width
from grader.retrieval.shard_run import search_blocks
from grader.retrieval.shard_stream import RunWriter

#: Copies of a block's (queries x width) lists a shard's search holds at once (its lists, the merge's concatenation
#: and sort, the cut to the depth): what :func:`query_block_for` divides the search memory by.
LIST_COPIES = 4


def query_block_for(search_memory: int, width: int) -> int:
    """Queries searched at once by :func:`search_to_file`: their (queries x width) lists, float64 scores and int64
    documents, and the merge's and the cut's copies of them (:data:`LIST_COPIES`) fit in ``search_memory`` bytes."""
    return max(1, search_memory // (LIST_COPIES * 16 * max(1, width)))


def search_to_file(
    query_vectors: np.ndarray,
    blocks: Callable[[], Iterable[tuple[int, np.ndarray]]],
    ranks: np.ndarray,
    target: Path,
    *,
    documents: int,
    depth: int,
    block_queries: int,
    fault_code: FailureCode = FailureCode.MODEL_ERROR,
) -> str:
    """A shard's run, searched and written a block of queries at a time: the bytes of
    :func:`~grader.retrieval.shard_exchange.dense_run` over the whole search, in ``target`` (atomically); their sha256.

    ``blocks()`` yields the shard's document vectors as (first row, rows) blocks, read again for each block of
    queries; ``ranks``: each row's canonical index in the whole corpus of ``documents``. A query's hits do not depend
    on the other queries searched with it, so the bytes are the same whatever ``block_queries``; the lists held are
    ``block_queries`` rows, whatever the task's query count.
    """
    width = search_width(depth)
    with ExitStack() as stack:
        output = RunWriter(target, stack, documents=documents, queries=len(query_vectors), depth=depth)
        for begin in range(0, max(1, len(query_vectors)), block_queries):  # no queries: the vectors are still read and checked
            scores, docs = search_blocks(query_vectors[begin : begin + block_queries], blocks(), ranks, width, fault_code=fault_code)
            output.write(begin, *boundary_lists(scores, np.where(docs >= 0, ranks[np.maximum(docs, 0)], -1), depth=depth))
            del scores, docs
        return output.commit()
