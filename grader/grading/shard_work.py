"""The work of one shard job of an ONNX submission's task: encode the queries once, or rank one shard.

A task of a competition with ``[sharding] shard_documents`` is cut by
:func:`grader.retrieval.shards.plan_shards` into shards of whole encoding chunks, a pure
function of the corpus and the setting. Its jobs are: the *query job* (number ``-1``), which
encodes the judged queries once and returns their vectors (:func:`encode_query_job`), and
one job per shard (:func:`rank_shard_job`), which encodes its documents to a spool file,
searches them exactly in bounded blocks against the query vectors and returns its top ``k``
with float64 scores as a compact run over the whole corpus's canonical indexes. The server
merges the shards' runs (:func:`grader.retrieval.shard_exchange.merge_compact_runs`) and
scores the merge as it scores a whole run.

A served grade runs these jobs in the runner container instead (:mod:`grader.grading.shard_sandbox`,
over a worker's pseudonymous copy); :func:`encode_query_job` and :func:`rank_shard_job` are the
in-process reference the bit-identity test (``tests/test_shard_jobs_work.py``) checks the merge with.

Query vectors are in the canonical (byte-wise) order of the judged query ids, the order a
compact run lists queries in; the encoder batches the queries exactly as the unsharded grade
does (the same texts, ids and order), so every vector bit is the unsharded one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from grader.data.task import Document, Query, document_text
from grader.errors import UsageError
from grader.retrieval.encoder import OnnxEncoder
from grader.retrieval.shard_exchange import pack_vectors, search_width, shard_compact_run
from grader.retrieval.shard_run import DEFAULT_SEARCH_MEMORY, rank_shard
from grader.retrieval.shards import plan_shards
from grader.runs.compact import canonical_order
from grader.runs.ordering import byte_order_ranks

#: The number of the query job of a task (shards are numbered from 0).
QUERY_JOB = -1


def shard_count(documents: Sequence[Document], *, chunk_size: int, shard_documents: int | None) -> int:
    """How many shard jobs the task's corpus is cut into (a function of the corpus and the setting only)."""
    texts = [document_text(d.title, d.text) for d in documents]
    return len(plan_shards(texts, [d.id for d in documents], chunk_size=chunk_size, shard_documents=shard_documents))


def encode_query_job(encoder: OnnxEncoder, queries: Sequence[Query], *, prefix: str) -> bytes:
    """The judged queries' vectors, rows in canonical query order, packed (:func:`grader.retrieval.shard_exchange.pack_vectors`)."""
    vectors, _stats = encoder.encode([q.text for q in queries], ids=[q.id for q in queries], prefix=prefix)
    ranks = byte_order_ranks([q.id for q in queries])
    ordered = np.empty_like(vectors)
    ordered[ranks] = vectors  # row i of the input goes to its canonical place
    return pack_vectors(ordered)


def rank_shard_job(
    encoder: OnnxEncoder,
    documents: Sequence[Document],
    queries: Sequence[Query],
    number: int,
    query_vectors: np.ndarray,
    *,
    shard_documents: int | None,
    depth: int,
    folder: Path,
    prefix: str,
    search_memory: int = DEFAULT_SEARCH_MEMORY,
) -> bytes:
    """Shard ``number``'s top ``depth`` and boundary ties for every judged query, as a compact run with scores (its spool deleted before it returns)."""
    texts = [document_text(d.title, d.text) for d in documents]
    ids = [d.id for d in documents]
    shards = plan_shards(texts, ids, chunk_size=encoder.batching.chunk_size, shard_documents=shard_documents)
    if not 0 <= number < len(shards):
        raise UsageError(f"the corpus has {len(shards)} shard(s); there is no shard {number}")
    if len(query_vectors) != len(queries):
        raise UsageError(f"{len(query_vectors)} query vectors for {len(queries)} queries")
    ranking, _stats = rank_shard(
        encoder, texts, ids, shards[number], query_vectors, search_width(depth), folder=folder, prefix=prefix, search_memory=search_memory
    )
    return shard_compact_run(ranking, canonical_order(ids), depth)
