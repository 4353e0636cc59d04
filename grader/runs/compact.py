"""The compact binary run a worker returns to the server: u32 indexes into the pinned data's canonical order.

A hosted worker does not score (the judgements stay on the server); it returns each
task's ranking in this form, and the server validates it (:func:`decode_run`) before
scoring it. Layout (little-endian; docs/protocol.md, "The compact run"):

========  =====================  ==============================================
offset    field                  meaning
========  =====================  ==============================================
0         ``b"GRUN"``            magic
4         u8 version             :data:`VERSION`
5         u8 flags               bit 0: a float64 score per hit follows
6         u16 reserved           0
8         u32 documents          the corpus size (must be the pinned corpus's)
12        u32 queries            how many queries the run ranks
16        u32 depth              the report's ``top_k``: the hits a query may have, besides its boundary tie group
20        u32 reserved           0
24        u64 hits               the total number of hits
32        u32[queries]           each query's index in the canonical query order, strictly increasing
…         u32[queries]           each query's number of hits (``depth`` and at most ``tie_slack(depth)`` tied)
…         u32[hits]              the hits, query by query, in trec order, as canonical document indexes
…         f64[hits]              (flag bit 0 only) each hit's score
========  =====================  ==============================================

The *canonical order* of a set of ids is their byte-wise (UTF-8) sorted order, the order
trec_eval breaks ties in; both sides compute it from the data alone. Without scores the
order of the hits *is* the ranking: the server rebuilds a :class:`Run` whose scores fall
with the rank, which every measure under the ``strict`` policy reads the same way (it
reads only the order). Scores are carried only where an exact merge or the ``coir``
policy (which re-ranks on float32-rounded scores) needs them.

A query may carry hits beyond the depth only as its boundary tie group (every one of them
tied with its depth-th hit; with scores; :mod:`grader.runs.ties`): the server cuts at the
depth after renaming, so which tied documents make the cut does not follow the pseudonyms.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from grader.errors import InternalError, TaskFailure
from grader.failures import FailureCode
from grader.runs.ordering import byte_order_ranks, first_repeat
from grader.runs.run import Run
from grader.runs.ties import only_boundary_ties, tie_slack

MAGIC = b"GRUN"
VERSION = 1
#: Flag bit 0: a float64 score follows each hit.
WITH_SCORES = 1
_HEADER = struct.Struct("<4sBBHIIIIQ")
HEADER_BYTES = _HEADER.size  # 32
#: Bytes per query (its index and its count) and per hit (its document index; its score).
QUERY_BYTES = 8
HIT_BYTES = 4
SCORE_BYTES = 8


def canonical_order(ids: Sequence[str]) -> tuple[str, ...]:
    """``ids`` in canonical order: sorted by their UTF-8 bytes (the position of an id there is its index)."""
    ranks = byte_order_ranks(list(ids))
    ordered: list[str] = [""] * len(ids)
    for identifier, rank in zip(ids, ranks.tolist()):
        ordered[rank] = identifier
    return tuple(ordered)


def compact_size(queries: int, depth: int, *, scores: bool = False) -> int:
    """The largest compact run of ``queries`` queries at ``depth``: the bound a server holds a body to."""
    return HEADER_BYTES + QUERY_BYTES * queries + (HIT_BYTES + (SCORE_BYTES if scores else 0)) * queries * depth


def run_digest(data: bytes) -> str:
    """The sha256 (hex) of a compact run's bytes: what a worker signs and a report names."""
    return hashlib.sha256(data).hexdigest()


def encode_run(run: Run, *, corpus: Sequence[str], queries: Sequence[str], depth: int, scores: bool = False) -> bytes:
    """``run`` (validated, trec-ordered) as a compact run over canonically ordered ``corpus`` and ``queries``.

    ``corpus`` and ``queries`` are the canonical orders (:func:`canonical_order`) of the staged
    documents and queries. A run naming an id outside them, or a query with more than ``depth``
    hits besides its boundary tie group, is a bug of the caller (collect has validated the run): :class:`InternalError`.
    """
    doc_index = {doc_id: i for i, doc_id in enumerate(corpus)}
    query_index = {query_id: i for i, query_id in enumerate(queries)}
    try:
        vocab_to_canonical = np.fromiter((doc_index[d] for d in run.doc_vocab), dtype=np.uint32, count=len(run.doc_vocab))
        ranked = sorted((query_index[q], i) for i, q in enumerate(run.query_ids))
    except KeyError as error:
        raise InternalError(f"the run names {error.args[0]!r}, which is not in the staged data") from None
    lengths = np.diff(run.offsets)
    if len(lengths) and int(lengths.max()) > depth + tie_slack(depth):
        raise InternalError(f"a query has {int(lengths.max())} hits, more than the depth {depth} and its tie slack")
    if not only_boundary_ties(run.offsets, run.scores if scores else None, depth):
        raise InternalError(f"a query has more than {depth} hits beyond its boundary tie group, or no scores to show the ties")
    order = np.asarray([i for _, i in ranked], dtype=np.int64)
    hits = [vocab_to_canonical[run.doc_codes[run.offsets[i] : run.offsets[i + 1]]] for i in order]
    docs = np.concatenate(hits) if hits else np.zeros(0, dtype=np.uint32)
    header = _HEADER.pack(MAGIC, VERSION, WITH_SCORES if scores else 0, 0, len(corpus), len(order), depth, 0, len(docs))
    parts = [
        header,
        np.asarray([q for q, _ in ranked], dtype="<u4").tobytes(),
        lengths[order].astype("<u4").tobytes(),
        docs.astype("<u4").tobytes(),
    ]
    if scores:
        chosen = [run.scores[run.offsets[i] : run.offsets[i + 1]] for i in order]
        parts.append((np.concatenate(chosen) if chosen else np.zeros(0)).astype("<f8").tobytes())
    return b"".join(parts)


def has_ties(run: Run) -> bool:
    """Whether two hits of one query share a score: then the order of their ids decides, and a compact run must carry the scores.

    A worker's ids are pseudonyms; the server re-sorts each ranking under the real ids, where a
    tie may break the other way. Without ties the order alone is the ranking under any ids.
    """
    if len(run.scores) < 2:
        return False
    same = run.scores[:-1] == run.scores[1:]
    starts = run.offsets[1:-1]
    same[starts[(starts > 0) & (starts < len(run.scores))] - 1] = False  # the last hit of a query vs the first of the next
    return bool(same.any())


@dataclass(frozen=True, eq=False)
class CompactRun:
    """A decoded, validated compact run: canonical query indexes, CSR offsets, document indexes, optional scores."""

    queries: np.ndarray
    offsets: np.ndarray
    docs: np.ndarray
    scores: np.ndarray | None
    depth: int

    def to_run(self, corpus: Sequence[str], queries: Sequence[str]) -> Run:
        """The :class:`Run` it ranks, over the canonical ``corpus`` and ``queries`` it was decoded against.

        Without scores, each hit scores minus its rank: the trec order of the rebuilt run is
        the order the worker sent, which is all the ``strict`` policy reads.
        """
        if self.scores is not None:
            scores = self.scores.astype(np.float64)
        else:
            starts = np.repeat(self.offsets[:-1], np.diff(self.offsets))
            scores = -(np.arange(len(self.docs), dtype=np.float64) - starts)
        return Run.build(
            [queries[i] for i in self.queries.tolist()],
            self.offsets,
            self.docs.astype(np.int64),
            corpus,
            scores,
            doc_ranks=np.arange(len(corpus), dtype=np.int64),  # canonical order is byte order
            doc_ids_checked=True,  # the pinned corpus's own ids
            in_place=True,
        )


def decode_run(data: bytes, *, documents: int, queries: int, depth: int, fault: FailureCode = FailureCode.INFRA) -> CompactRun:
    """Read and validate a compact run over a corpus of ``documents`` and ``queries`` staged queries, at most ``depth`` hits each.

    Refused, as :class:`TaskFailure` with ``fault`` (``INFRA`` when a worker sent it: a
    broken or dishonest worker, never the participant): a bad header, truncated or
    oversized bytes, another corpus size, a query index outside the staged queries or
    out of order, more hits than ``depth`` besides a boundary tie group (:mod:`grader.runs.ties`),
    a document index outside the corpus, a
    document twice for one query, and (with scores) a non-finite score or hits not in trec order.
    """

    def refuse(what: str) -> TaskFailure:
        return TaskFailure(fault, f"compact run refused: {what}")

    header = check_header(data[:HEADER_BYTES], len(data), documents=documents, queries=queries, depth=depth, fault=fault)
    n_queries, hits, flags = header.queries, header.hits, header.flags
    at = HEADER_BYTES
    query_ids = np.frombuffer(data, dtype="<u4", count=n_queries, offset=at).astype(np.int64)
    at += 4 * n_queries
    lengths = np.frombuffer(data, dtype="<u4", count=n_queries, offset=at).astype(np.int64)
    at += 4 * n_queries
    docs = np.frombuffer(data, dtype="<u4", count=hits, offset=at).astype(np.int64)
    at += 4 * hits
    scores = np.frombuffer(data, dtype="<f8", count=hits, offset=at).copy() if flags & WITH_SCORES else None
    if n_queries and (query_ids.max() >= queries or np.any(np.diff(query_ids) <= 0)):
        raise refuse("a query index outside the staged queries, or queries not each once in canonical order")
    if n_queries and lengths.max() > depth + tie_slack(depth):
        raise refuse(f"a query has {int(lengths.max())} hits, more than the depth {depth} and its tie slack")
    if int(lengths.sum()) != hits:
        raise refuse(f"the queries' hit counts add up to {int(lengths.sum())}, the header says {hits}")
    if hits and docs.max() >= documents:
        raise refuse(f"document index {int(docs.max())} is outside the corpus of {documents}")
    offsets = np.zeros(n_queries + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    repeat = first_repeat(offsets, docs)
    if repeat is not None:
        raise refuse(f"document {repeat[1]} appears twice for query index {int(query_ids[repeat[0]])}")
    if scores is not None:
        _check_scores(offsets, docs, scores, refuse)
    if not only_boundary_ties(offsets, scores, depth):
        raise refuse(f"a query has hits beyond the depth {depth} that do not tie with its {depth}-th (or no scores to show it)")
    return CompactRun(query_ids, offsets, docs, scores, depth)


@dataclass(frozen=True)
class Header:
    """A compact run's header once it holds for its file: what it announces."""

    flags: int
    queries: int
    hits: int

    @property
    def scores(self) -> bool:
        """Whether a float64 score follows each hit."""
        return bool(self.flags & WITH_SCORES)


def check_header(header: bytes, size: int, *, documents: int, queries: int, depth: int, fault: FailureCode = FailureCode.INFRA) -> Header:
    """The first :data:`HEADER_BYTES` of a compact run of ``size`` bytes, validated as :func:`decode_run` validates them
    (magic, version, flags, the corpus size, the depth, the query count, the hit bound and the exact size).

    What a reader that takes a run's sections a block at a time checks before it reads any (the refusals are
    :func:`decode_run`'s, word for word).
    """

    def refuse(what: str) -> TaskFailure:
        return TaskFailure(fault, f"compact run refused: {what}")

    if len(header) < HEADER_BYTES:
        raise refuse(f"truncated: {size} bytes, shorter than the {HEADER_BYTES}-byte header")
    magic, version, flags, reserved, n_docs, n_queries, run_depth, reserved2, hits = _HEADER.unpack_from(header)
    if magic != MAGIC or version != VERSION:
        raise refuse(f"not a compact run of version {VERSION} (magic {magic!r}, version {version})")
    if flags & ~WITH_SCORES or reserved or reserved2:
        raise refuse(f"unknown flags {flags:#x} or non-zero reserved fields")
    if n_docs != documents:
        raise refuse(f"made over {n_docs} documents; the pinned corpus has {documents}")
    if run_depth != depth:
        raise refuse(f"depth {run_depth}; the job's depth is {depth}")
    if n_queries > queries:
        raise refuse(f"ranks {n_queries} queries; {queries} were staged")
    if hits > n_queries * (depth + tie_slack(depth)):
        raise refuse(f"{hits} hits for {n_queries} queries at depth {depth}")
    per_hit = HIT_BYTES + (SCORE_BYTES if flags & WITH_SCORES else 0)
    expected = HEADER_BYTES + QUERY_BYTES * n_queries + per_hit * hits
    if size != expected:
        raise refuse(f"{'truncated' if size < expected else 'oversized'}: {size} bytes where the header announces {expected}")
    return Header(flags, n_queries, hits)


def _check_scores(offsets: np.ndarray, docs: np.ndarray, scores: np.ndarray, refuse: Callable[[str], TaskFailure]) -> None:
    """Scores finite, and each query's hits in trec order: score descending, ties by document index descending."""
    if not np.isfinite(scores).all():
        raise refuse("a score is not a finite number")
    if len(docs) < 2:
        return
    same = np.ones(len(docs) - 1, dtype=bool)
    starts = offsets[1:-1]
    same[starts[(starts > 0) & (starts < len(docs))] - 1] = False  # the last hit of a query vs the first of the next
    ordered = (scores[:-1] > scores[1:]) | ((scores[:-1] == scores[1:]) & (docs[:-1] > docs[1:]))
    if np.any(same & ~ordered):
        raise refuse("hits are not in trec order (score descending, then document index descending)")
