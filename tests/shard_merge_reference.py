"""The whole-run shard merge and check as the server ran them before they were streamed (commit 706f746), frozen: the
reference tests/test_shard_stream.py holds :mod:`grader.retrieval.shard_stream` to, byte for byte and refusal for refusal.

Copied verbatim (names prefixed ``reference_``), so that a later change to the module's own whole-run functions cannot
move the reference with it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import numpy as np

from grader.errors import TaskFailure
from grader.failures import FailureCode
from grader.retrieval.merge import merge_top_k
from grader.runs.compact import HEADER_BYTES, MAGIC, VERSION, WITH_SCORES, CompactRun, decode_run
from grader.runs.ties import tie_slack


def search_width(depth: int) -> int:
    return depth + tie_slack(depth)


def reference_dense_run(scores: np.ndarray, docs: np.ndarray, *, documents: int, depth: int) -> bytes:
    """Dense (queries, width) lists in trec order (``-1``: empty) as a compact run with scores: each query's first ``depth`` hits and its boundary ties.

    ``docs`` are canonical indexes of the whole corpus of ``documents``.
    """
    docs = docs.copy()
    if docs.shape[1] > depth:
        tied = scores[:, depth:] == scores[:, depth - 1 : depth]  # trec order: the tied hits follow the depth-th
        docs[:, depth:][~tied] = -1
    return _encode(scores, docs, documents=documents, depth=depth)


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


def reference_check_shard_run(data: bytes, *, documents: int, queries: int, depth: int) -> None:
    """A shard job's output holds as a shard run: a compact run with scores over ``documents`` that lists all ``queries``
    (what :func:`dense_run` writes), each validated as the merge validates it; refused with :class:`TaskFailure` ``INFRA``.

    What the server checks when a shard's output is put, so that a bad one re-runs that job alone rather than failing
    its task at the merge.
    """
    run = decode_run(data, documents=documents, queries=queries, depth=depth)
    if run.scores is None:
        raise TaskFailure(FailureCode.INFRA, "a shard's run carries no scores: shards cannot be merged without them")
    if len(run.queries) != queries:
        raise TaskFailure(FailureCode.INFRA, f"a shard's run lists {len(run.queries)} queries; the task has {queries}")


def reference_merge_compact_runs(parts: Iterable[bytes], *, documents: int, queries: int, depth: int) -> bytes:
    """The exact top ``depth`` and boundary ties of the union of shard runs (each decoded and validated; each must carry scores), whatever their order.

    A shard run without scores, or two shards naming one document, is refused (INFRA: a worker's or our fault).
    ``parts`` is consumed one at a time (a generator that reads each from disk holds one shard's run at a time).
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
    return reference_dense_run(scores, docs, documents=documents, depth=depth)
