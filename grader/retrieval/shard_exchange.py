"""What shard jobs exchange with the server: query vectors, a shard's top-k as a compact run with scores, their merge.

Shards as jobs (issue 23 item 1, ``docs/scale.md``): a task's queries are encoded once, by a
job of their own, whose vectors every shard job of the task receives (:func:`pack_vectors`,
checked by :func:`unpack_vectors` against their digest and a size cap before use). A shard job
returns its per-shard top ``k`` with float64 scores as a compact run (:mod:`grader.runs.compact`)
over the *whole* corpus's canonical index space (:func:`shard_compact_run`), so the server needs no
shard's vocabulary: canonical indexes are byte order, the order trec_eval breaks ties in, so
:func:`merge_compact_runs` merges the shards' lists by (score descending, index descending), exactly
what :func:`grader.retrieval.merge.merge_rankings` does with ids, and cuts at the depth. Since a
score depends only on the query and the document, the merge equals the unsharded search bit for bit.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

import numpy as np

from grader.errors import TaskFailure
from grader.failures import FailureCode
from grader.retrieval.merge import ShardRanking, merge_top_k
from grader.runs.compact import HEADER_BYTES, MAGIC, VERSION, WITH_SCORES, CompactRun, decode_run

_VECTORS = struct.Struct("<4sII")  # magic, rows, dimension
VECTORS_MAGIC = b"GQVF"


def pack_vectors(vectors: np.ndarray) -> bytes:
    """Query vectors (rows in the canonical query order) as bytes: a 12-byte header, then little-endian float32 rows."""
    rows, dimension = vectors.shape
    return _VECTORS.pack(VECTORS_MAGIC, rows, dimension) + np.ascontiguousarray(vectors, dtype="<f4").tobytes()


def vectors_size(rows: int, dimension: int) -> int:
    """The bytes of :func:`pack_vectors` of a ``rows`` x ``dimension`` matrix."""
    return _VECTORS.size + 4 * rows * dimension


def unpack_vectors(data: bytes, *, sha256: str, rows: int, max_bytes: int) -> np.ndarray:
    """The query vectors of ``data`` after its size, its digest and its shape are checked (a mismatch is the platform's fault: INFRA)."""

    def refuse(what: str) -> TaskFailure:
        return TaskFailure(FailureCode.INFRA, f"query vectors refused: {what}")

    if len(data) > max_bytes:
        raise refuse(f"{len(data)} bytes, more than the cap of {max_bytes}")
    if hashlib.sha256(data).hexdigest() != sha256:
        raise refuse("their sha256 is not the one the query job returned")
    if len(data) < _VECTORS.size:
        raise refuse("truncated header")
    magic, n_rows, dimension = _VECTORS.unpack_from(data)
    if magic != VECTORS_MAGIC or n_rows != rows or len(data) != vectors_size(n_rows, dimension):
        raise refuse(f"not {rows} rows of float32 vectors ({n_rows} x {dimension}, {len(data)} bytes)")
    return np.frombuffer(data, dtype="<f4", offset=_VECTORS.size).reshape(n_rows, dimension).astype(np.float32)


def shard_compact_run(ranking: ShardRanking, corpus: Sequence[str], depth: int) -> bytes:
    """A shard's top-k (every query of the task, canonical query order) as a compact run with scores over the canonical ``corpus``."""
    index = {doc_id: i for i, doc_id in enumerate(corpus)}
    to_global = np.asarray([index[doc_id] for doc_id in ranking.doc_ids] + [-1], dtype=np.int64)  # -1 maps to -1
    return _encode(ranking.scores, to_global[ranking.docs], documents=len(corpus), depth=depth)


def _encode(scores: np.ndarray, docs: np.ndarray, *, documents: int, depth: int) -> bytes:
    """Dense (queries, width) lists (``-1``: empty slot, sorting last) as a compact run with scores; every query listed."""
    valid = docs >= 0
    lengths = valid.sum(axis=1).astype("<u4")
    n_queries = len(docs)
    header = struct.pack("<4sBBHIIIIQ", MAGIC, VERSION, WITH_SCORES, 0, documents, n_queries, depth, 0, int(lengths.sum()))
    assert len(header) == HEADER_BYTES
    return b"".join(
        [
            header,
            np.arange(n_queries, dtype="<u4").tobytes(),
            lengths.tobytes(),
            docs[valid].astype("<u4").tobytes(),
            scores[valid].astype("<f8").tobytes(),
        ]
    )


def _dense(run: CompactRun, n_queries: int) -> tuple[np.ndarray, np.ndarray]:
    """A decoded run as dense (queries, depth) float64 scores and int64 docs (``-1`` and ``-inf`` where empty)."""
    scores = np.full((n_queries, run.depth), -np.inf, dtype=np.float64)
    docs = np.full((n_queries, run.depth), -1, dtype=np.int64)
    assert run.scores is not None
    lengths = np.diff(run.offsets)
    rows = np.repeat(run.queries, lengths)
    columns = np.arange(len(run.docs)) - np.repeat(run.offsets[:-1], lengths)
    scores[rows, columns] = run.scores
    docs[rows, columns] = run.docs
    return scores, docs


def merge_compact_runs(parts: Sequence[bytes], *, documents: int, queries: int, depth: int) -> bytes:
    """The exact top ``depth`` of the union of shard runs (each decoded and validated; each must carry scores), whatever their order.

    A shard run without scores, or two shards naming one document, is refused (INFRA: a worker's or our fault).
    """
    ranks = np.arange(documents, dtype=np.int64)  # canonical indexes are byte order: an index is its rank
    scores = np.full((queries, 0), -np.inf, dtype=np.float64)
    docs = np.full((queries, 0), -1, dtype=np.int64)
    seen = np.zeros(documents, dtype=bool)
    for data in parts:
        run = decode_run(data, documents=documents, queries=queries, depth=depth)
        if run.scores is None:
            raise TaskFailure(FailureCode.INFRA, "a shard's run carries no scores: shards cannot be merged without them")
        named = np.unique(run.docs)
        if seen[named].any():
            raise TaskFailure(FailureCode.INFRA, "two shards name one document: they must partition the corpus")
        part_scores, part_docs = _dense(run, queries)
        scores, docs = merge_top_k(scores, docs, part_scores, part_docs, ranks, depth)
        seen[named] = True
    return _encode(scores, docs, documents=documents, depth=depth)
