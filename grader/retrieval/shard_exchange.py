"""What shard jobs exchange with the server: query vectors, a shard's top-k as a compact run with scores, their merge.

Shards as jobs (``docs/scale.md``): a task's queries are encoded once, by a
job of their own, whose vectors every shard job of the task receives (:func:`pack_vectors`,
checked by :func:`unpack_vectors` against their digest and a size cap before use). A shard job
returns its per-shard top ``k`` with float64 scores as a compact run (:mod:`grader.runs.compact`)
over the *whole* corpus's canonical index space (:func:`shard_compact_run`), so the server needs no
shard's vocabulary: canonical indexes are byte order, the order trec_eval breaks ties in, so
:func:`merge_compact_runs` merges the shards' lists by (score descending, index descending), exactly
what :func:`grader.retrieval.merge.merge_rankings` does with ids. Since a score depends only on the
query and the document, the merge equals the unsharded search bit for bit.

Ties at the depth (:mod:`grader.runs.ties`): a worker ranks a pseudonymous copy, so, as an unsharded
worker does, every shard run and the merge carry each query's first ``depth`` hits *and* its boundary
tie group (up to ``tie_slack(depth)`` more, :func:`dense_run`); the server cuts at the depth under the
real ids. A shard searched to ``depth + tie_slack(depth)`` keeps every document of the whole corpus's
boundary group that lies in it (its own depth-th score is at most the corpus's), so the merge of the
shards' runs, cut the same way, keeps exactly the unsharded worker's hits.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from grader.errors import TaskFailure
from grader.failures import FailureCode
from grader.retrieval.merge import ShardRanking, merge_top_k
from grader.runs.compact import HEADER_BYTES, MAGIC, VERSION, WITH_SCORES, CompactRun, decode_run
from grader.runs.ties import tie_slack

_VECTORS = struct.Struct("<4sII")  # magic, rows, dimension
VECTORS_MAGIC = b"GQVF"
#: The largest embedding dimension a shard job accepts from the runner image (bounds query vectors and a block's row).
MAX_DIMENSION = 8192


def search_width(depth: int) -> int:
    """How many hits a shard searches for per query: the depth and its boundary tie group's slack."""
    return depth + tie_slack(depth)


def dense_run(scores: np.ndarray, docs: np.ndarray, *, documents: int, depth: int) -> bytes:
    """Dense (queries, width) lists in trec order (``-1``: empty) as a compact run with scores: each query's first ``depth`` hits and its boundary ties.

    ``docs`` are canonical indexes of the whole corpus of ``documents``.
    """
    lengths, hits, hit_scores = boundary_lists(scores, docs, depth=depth)
    header = struct.pack("<4sBBHIIIIQ", MAGIC, VERSION, WITH_SCORES, 0, documents, len(docs), depth, 0, len(hits))
    assert len(header) == HEADER_BYTES
    return b"".join(
        [header, np.arange(len(docs), dtype="<u4").tobytes(), lengths.tobytes(), hits.astype("<u4").tobytes(), hit_scores.astype("<f8").tobytes()]
    )


def boundary_lists(scores: np.ndarray, docs: np.ndarray, *, depth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense (queries, width) lists in trec order (``-1``: empty) cut to each query's first ``depth`` hits and its
    boundary ties: each query's hit count (u4), then the hits and their scores, query by query (a compact run's sections).
    """
    docs = docs.copy()
    if docs.shape[1] > depth:
        tied = scores[:, depth:] == scores[:, depth - 1 : depth]  # trec order: the tied hits follow the depth-th
        docs[:, depth:][~tied] = -1
    valid = docs >= 0
    return valid.sum(axis=1).astype("<u4"), docs[valid], scores[valid]


def pack_vectors(vectors: np.ndarray) -> bytes:
    """Query vectors (rows in the canonical query order) as bytes: a 12-byte header, then little-endian float32 rows."""
    rows, dimension = vectors.shape
    return _VECTORS.pack(VECTORS_MAGIC, rows, dimension) + np.ascontiguousarray(vectors, dtype="<f4").tobytes()


def vectors_size(rows: int, dimension: int) -> int:
    """The bytes of :func:`pack_vectors` of a ``rows`` x ``dimension`` matrix."""
    return _VECTORS.size + 4 * rows * dimension


def _refuse(what: str) -> TaskFailure:
    """Query vectors another worker returned do not hold: the platform's fault (a broken or dishonest worker), INFRA."""
    return TaskFailure(FailureCode.INFRA, f"query vectors refused: {what}")


def _vectors_shape(header: bytes, size: int, *, rows: int) -> int:
    """The dimension the 12-byte ``header`` of ``size`` bytes of packed vectors announces, after its magic, rows and exact size are checked."""
    if len(header) < _VECTORS.size:
        raise _refuse("truncated header")
    magic, n_rows, dimension = _VECTORS.unpack_from(header)
    if magic != VECTORS_MAGIC or n_rows != rows or size != vectors_size(n_rows, dimension):
        raise _refuse(f"not {rows} rows of float32 vectors ({n_rows} x {dimension}, {size} bytes)")
    if not 1 <= dimension <= MAX_DIMENSION:
        raise _refuse(f"{dimension} dimensions: a model's vectors have 1 to {MAX_DIMENSION}")
    return int(dimension)


def unpack_vectors(data: bytes, *, sha256: str, rows: int, max_bytes: int) -> np.ndarray:
    """The query vectors of ``data`` after its size, its digest and its shape are checked (a mismatch is the platform's fault: INFRA)."""
    if len(data) > max_bytes:
        raise _refuse(f"{len(data)} bytes, more than the cap of {max_bytes}")
    if hashlib.sha256(data).hexdigest() != sha256:
        raise _refuse("their sha256 is not the one the query job returned")
    dimension = _vectors_shape(data[: _VECTORS.size], len(data), rows=rows)
    return np.frombuffer(data, dtype="<f4", offset=_VECTORS.size).reshape(rows, dimension).astype(np.float32)


def check_vectors_file(path: Path, *, rows: int, block_bytes: int = 1 << 20) -> int:
    """The dimension of the packed query vectors in ``path`` once they hold: the header's magic, ``rows`` rows, the exact
    size, 1 to :data:`MAX_DIMENSION` dimensions, every value finite (read in blocks: the file is never whole in memory).

    What the server checks when a query job's output is put, before any shard job searches with it; a refusal is
    :class:`TaskFailure` ``INFRA`` (a worker sent it: never the participant's fault).
    """
    size = path.stat().st_size
    with open(path, "rb") as stream:
        dimension = _vectors_shape(stream.read(_VECTORS.size), size, rows=rows)
        block = max(4, block_bytes - block_bytes % 4)  # whole float32 values per read
        while chunk := stream.read(block):
            values = np.frombuffer(chunk, dtype="<f4")
            if not np.isfinite(values).all():
                raise _refuse("a value is NaN or infinite")
    return dimension


def shard_compact_run(ranking: ShardRanking, corpus: Sequence[str], depth: int) -> bytes:
    """A shard's top-k (every query of the task, canonical query order) as a compact run with scores over the canonical ``corpus``.

    ``ranking`` is searched to :func:`search_width`; the run keeps the first ``depth`` hits and the boundary ties (:func:`dense_run`).
    """
    index = {doc_id: i for i, doc_id in enumerate(corpus)}
    to_global = np.asarray([index[doc_id] for doc_id in ranking.doc_ids] + [-1], dtype=np.int64)  # -1 maps to -1
    return dense_run(ranking.scores, to_global[ranking.docs], documents=len(corpus), depth=depth)


def _dense(run: CompactRun, n_queries: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """A decoded run as dense (queries, width) float64 scores and int64 docs (``-1`` and ``-inf`` where empty)."""
    scores = np.full((n_queries, width), -np.inf, dtype=np.float64)
    docs = np.full((n_queries, width), -1, dtype=np.int64)
    assert run.scores is not None
    lengths = np.diff(run.offsets)
    rows = np.repeat(run.queries, lengths)
    columns = np.arange(len(run.docs)) - np.repeat(run.offsets[:-1], lengths)
    scores[rows, columns] = run.scores
    docs[rows, columns] = run.docs
    return scores, docs


def check_shard_run(data: bytes, *, documents: int, queries: int, depth: int) -> None:
    """A shard job's output holds as a shard run: a compact run with scores over ``documents`` that lists all ``queries``
    (what :func:`dense_run` writes), each validated as the merge validates it; refused with :class:`TaskFailure` ``INFRA``.

    The whole run in memory: the server checks a shard's output when it is put (so that a bad one re-runs that job
    alone rather than failing its task at the merge) with :func:`grader.retrieval.shard_stream.check_shard_file`, the
    same refusals a block of queries at a time.
    """
    run = decode_run(data, documents=documents, queries=queries, depth=depth)
    if run.scores is None:
        raise TaskFailure(FailureCode.INFRA, "a shard's run carries no scores: shards cannot be merged without them")
    if len(run.queries) != queries:
        raise TaskFailure(FailureCode.INFRA, f"a shard's run lists {len(run.queries)} queries; the task has {queries}")


def merge_compact_runs(parts: Iterable[bytes], *, documents: int, queries: int, depth: int) -> bytes:
    """The exact top ``depth`` and boundary ties of the union of shard runs (each decoded and validated; each must carry scores), whatever their order.

    A shard run without scores, or two shards naming one document, is refused (INFRA: a worker's or our fault).
    ``parts`` is consumed one at a time (a generator that reads each from disk holds one shard's run at a time).
    Every run is decoded whole into dense (queries x width) arrays: the server merges with
    :func:`grader.retrieval.shard_stream.merge_shard_files` instead, the same bytes a block of queries at a time.
    """
    ranks = np.arange(documents, dtype=np.int64)  # canonical indexes are byte order: an index is its rank
    scores = np.full((queries, 0), -np.inf, dtype=np.float64)
    docs = np.full((queries, 0), -1, dtype=np.int64)
    seen = np.zeros(documents, dtype=bool)
    width = search_width(depth)
    for data in parts:
        run = decode_run(data, documents=documents, queries=queries, depth=depth)
        if run.scores is None:
            raise TaskFailure(FailureCode.INFRA, "a shard's run carries no scores: shards cannot be merged without them")
        named = np.unique(run.docs)
        if seen[named].any():
            raise TaskFailure(FailureCode.INFRA, "two shards name one document: they must partition the corpus")
        part_scores, part_docs = _dense(run, queries, width)
        scores, docs = merge_top_k(scores, docs, part_scores, part_docs, ranks, width)
        seen[named] = True
    return dense_run(scores, docs, documents=documents, depth=depth)
