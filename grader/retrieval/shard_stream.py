"""Shard runs checked and merged from disk a block of queries at a time: the server's memory bounded by the block.

:func:`~grader.retrieval.shard_exchange.merge_compact_runs` decodes each shard run whole into dense
(queries x width) arrays, 32 bytes per slot, about 64 KB per query at depth 1,000 and over 10 GB for a task of
162k queries. Here each shard file stays on disk: its header is checked, then each block of ``block_queries``
consecutive query indexes is read from every shard (:class:`ShardFileReader`: that block's slice of the query
indexes, counts, hits and scores, ``os.pread`` at their offsets), validated as :func:`~grader.runs.compact.decode_run`
validates a whole run (it *is* ``decode_run``, on a compact run of the block), merged with the blocks of the other
shards (:func:`~grader.retrieval.merge.select_top_k`, :data:`MERGE_GROUP` shards at a time) and appended to the output. A query's merge reads only its own
rows, so the bytes written are those of the whole-run merge whatever the block size (tests/test_shard_stream.py
holds them equal).

What stays O(queries) is the output file itself, never memory; the one O(documents) array is which shard named each
document (a byte per document up to 255 shards), which the "two shards name one document" refusal needs across
blocks.
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grader.errors import TaskFailure
from grader.failures import FailureCode
from grader.retrieval.merge import MERGE_ENTRIES, select_top_k
from grader.retrieval.shard_exchange import boundary_lists, search_width
from grader.runs.compact import HEADER_BYTES, MAGIC, VERSION, WITH_SCORES, CompactRun, check_header, decode_run

_HEADER = struct.Struct("<4sBBHIIIIQ")
#: Shards' blocks held before they are merged with the top so far (one selection: :func:`select_top_k`); the merge's
#: blocks are smaller to match (:func:`merge_block`).
MERGE_GROUP = 8
#: Bytes read or copied per system call when a file is hashed or assembled.
_CHUNK = 1 << 20


def default_block(depth: int) -> int:
    """Queries per block: the merge of two shards' blocks is at most :data:`MERGE_ENTRIES` slots (about 100 MB of temporaries)."""
    return max(1, MERGE_ENTRIES // (2 * search_width(depth)))


def merge_block(depth: int) -> int:
    """Queries per block of the merge: the blocks of :data:`MERGE_GROUP` shards and the top so far held at once are as
    many slots as two shards' blocks of :func:`default_block` (the server's memory as with a merge two at a time)."""
    return max(1, 2 * default_block(depth) // (MERGE_GROUP + 1))


def _refuse(what: str) -> TaskFailure:
    return TaskFailure(FailureCode.INFRA, f"compact run refused: {what}")


def _pread(fd: int, size: int, at: int) -> bytes:
    """Exactly ``size`` bytes of ``fd`` from ``at`` (a file that shrank under us reads short: refused as changed)."""
    parts, done = [], 0
    while done < size:
        chunk = os.pread(fd, size - done, at + done)
        if not chunk:
            raise TaskFailure(FailureCode.INFRA, "a shard's run ended early: it changed on disk while it was read")
        parts.append(chunk)
        done += len(chunk)
    return b"".join(parts)


def _pwrite(fd: int, data: bytes | memoryview, at: int) -> None:
    view = memoryview(data)
    while len(view):
        written = os.pwrite(fd, view, at)
        view, at = view[written:], at + written


class ShardFileReader:
    """One shard run's file (an open descriptor), read a block of query indexes at a time.

    The header is checked when it is opened (:func:`~grader.runs.compact.check_header`); each :meth:`take` returns the
    run's queries below an index, decoded and validated; :meth:`finish` checks that the blocks accounted for every query
    and hit the header announced. Together they refuse exactly what :func:`~grader.runs.compact.decode_run` refuses.
    """

    def __init__(self, fd: int, *, documents: int, queries: int, depth: int, block_queries: int) -> None:
        size = os.fstat(fd).st_size
        self._fd, self._documents, self._queries, self._depth = fd, documents, queries, depth
        self._block = block_queries
        self.header = check_header(_pread(fd, min(size, HEADER_BYTES), 0), size, documents=documents, queries=queries, depth=depth)
        listed = self.header.queries
        self._lengths_at = HEADER_BYTES + 4 * listed
        self._docs_at = HEADER_BYTES + 8 * listed
        self._scores_at = self._docs_at + 4 * self.header.hits
        self._query = 0  # the next listed query (its position in the run)
        self._hit = 0  # the next hit
        self._last = -1  # the last query index taken

    def take(self, end: int) -> CompactRun:
        """The run's listed queries with an index below ``end`` (past every earlier call's), validated."""
        listed = self.header.queries
        count = min(self._block, listed - self._query)
        ids = np.frombuffer(_pread(self._fd, 4 * count, HEADER_BYTES + 4 * self._query), dtype="<u4").astype(np.int64)
        if count and (ids[0] <= self._last or ids.max() >= self._queries or np.any(np.diff(ids) <= 0)):
            raise _refuse("a query index outside the staged queries, or queries not each once in canonical order")
        count = int(np.searchsorted(ids, end))
        raw_lengths = _pread(self._fd, 4 * count, self._lengths_at + 4 * self._query)
        lengths = np.frombuffer(raw_lengths, dtype="<u4")
        width = search_width(self._depth)
        if count and int(lengths.max()) > width:
            raise _refuse(f"a query has {int(lengths.max())} hits, more than the depth {self._depth} and its tie slack")
        hits = int(lengths.sum(dtype=np.int64))
        if self._hit + hits > self.header.hits:
            raise _refuse(f"the queries' hit counts add up to more than {self.header.hits}, the header says {self.header.hits}")
        parts = [
            _HEADER.pack(MAGIC, VERSION, self.header.flags, 0, self._documents, count, self._depth, 0, hits),
            ids[:count].astype("<u4").tobytes(),
            raw_lengths,
            _pread(self._fd, 4 * hits, self._docs_at + 4 * self._hit),
        ]
        if self.header.scores:
            parts.append(_pread(self._fd, 8 * hits, self._scores_at + 8 * self._hit))
        run = decode_run(b"".join(parts), documents=self._documents, queries=self._queries, depth=self._depth)
        self._query += count
        self._hit += hits
        if count:
            self._last = int(ids[count - 1])
        return run

    def finish(self) -> None:
        """Refuse a run whose blocks left queries unread (an index at or past the staged queries) or hits unaccounted for."""
        if self._query != self.header.queries:
            raise _refuse("a query index outside the staged queries, or queries not each once in canonical order")
        if self._hit != self.header.hits:
            raise _refuse(f"the queries' hit counts add up to {self._hit}, the header says {self.header.hits}")


def _dense_block(run: CompactRun, begin: int, rows: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """A block's decoded run as dense (rows, width) float64 scores and int64 docs, row ``q - begin`` for query ``q``."""
    scores = np.full((rows, width), -np.inf, dtype=np.float64)
    docs = np.full((rows, width), -1, dtype=np.int64)
    assert run.scores is not None
    lengths = np.diff(run.offsets)
    row = np.repeat(run.queries - begin, lengths)
    column = np.arange(len(run.docs)) - np.repeat(run.offsets[:-1], lengths)
    scores[row, column] = run.scores
    docs[row, column] = run.docs
    return scores, docs


class RunWriter:
    """A compact run with scores (the bytes :func:`~grader.retrieval.shard_exchange.dense_run` makes of the whole), written
    a block of queries at a time into a temporary file beside ``target`` and renamed over it at the end.

    Each section's place is known from the query count but for the scores', which follows the hits: the scores go to a
    second temporary file, appended once the hits are all written, before the header (which counts them).
    """

    def __init__(self, target: Path, stack: ExitStack, *, documents: int, queries: int, depth: int) -> None:
        self._target, self._documents, self._queries, self._depth = target, documents, queries, depth
        target.parent.mkdir(parents=True, exist_ok=True)
        self._fd, self._name = self._temporary(stack, ".tmp")
        self._scores_fd, _ = self._temporary(stack, ".scores.tmp")
        self._docs_at = HEADER_BYTES + 8 * queries
        self._hits = 0

    def _temporary(self, stack: ExitStack, suffix: str) -> tuple[int, str]:
        fd, name = tempfile.mkstemp(prefix=f".{self._target.name}.", suffix=suffix, dir=self._target.parent)
        stack.callback(os.close, fd)
        stack.callback(lambda: Path(name).unlink(missing_ok=True))  # after a rename there is nothing left to remove
        return fd, name

    def write(self, begin: int, lengths: np.ndarray, docs: np.ndarray, scores: np.ndarray) -> None:
        """Queries ``begin``, ``begin + 1``, ... with their hit counts, hits and scores."""
        _pwrite(self._fd, np.arange(begin, begin + len(lengths), dtype="<u4").tobytes(), HEADER_BYTES + 4 * begin)
        _pwrite(self._fd, lengths.astype("<u4").tobytes(), HEADER_BYTES + 4 * (self._queries + begin))
        _pwrite(self._fd, docs.astype("<u4").tobytes(), self._docs_at + 4 * self._hits)
        _pwrite(self._scores_fd, scores.astype("<f8").tobytes(), 8 * self._hits)
        self._hits += len(docs)

    def commit(self) -> str:
        """Append the scores, write the header, flush, and rename over the target; the sha256 of the bytes on disk."""
        at = self._docs_at + 4 * self._hits
        for offset in range(0, 8 * self._hits, _CHUNK):
            _pwrite(self._fd, _pread(self._scores_fd, min(_CHUNK, 8 * self._hits - offset), offset), at + offset)
        header = _HEADER.pack(MAGIC, VERSION, WITH_SCORES, 0, self._documents, self._queries, self._depth, 0, self._hits)
        _pwrite(self._fd, header, 0)
        os.fsync(self._fd)
        digest = _sha256(self._fd)  # read back: the digest names the bytes the grade will read
        os.replace(self._name, self._target)
        return digest


def _sha256(fd: int) -> str:
    digest, at = hashlib.sha256(), 0
    while chunk := os.pread(fd, _CHUNK, at):
        digest.update(chunk)
        at += len(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class StoredShard:
    """A shard's stored run: its file, the sha256 its job returned, and how a refusal names it (``shard 3 of task``)."""

    path: Path
    sha256: str
    name: str


def _open_checked(shard: StoredShard, stack: ExitStack) -> tuple[int, os.stat_result]:
    """The shard file open, once its bytes hash to the digest its job returned; its status then, to see it unchanged at the end."""
    fd = os.open(shard.path, os.O_RDONLY | os.O_CLOEXEC)
    stack.callback(os.close, fd)
    if _sha256(fd) != shard.sha256:
        raise TaskFailure(FailureCode.INFRA, f"{shard.name} changed on disk after it was stored")
    return fd, os.fstat(fd)


def _unchanged(before: os.stat_result, after: os.stat_result) -> bool:
    return (before.st_size, before.st_mtime_ns, before.st_ctime_ns) == (after.st_size, after.st_mtime_ns, after.st_ctime_ns)


def merge_shard_files(
    shards: Sequence[StoredShard], target: Path, *, documents: int, queries: int, depth: int, block_queries: int | None = None
) -> str:
    """Merge the shard runs on disk into ``target`` (atomically) a block of queries at a time; the merge's sha256.

    The bytes are :func:`~grader.retrieval.shard_exchange.merge_compact_runs`'s for the same runs, and what it refuses
    is refused (:class:`TaskFailure` ``INFRA``), as is a shard file whose bytes are not its digest (checked before any is
    decoded) or that changes while it is merged (checked before the rename): ``target`` is then left as it was.
    """
    block = block_queries or merge_block(depth)
    width = search_width(depth)
    with ExitStack() as stack:
        opened = [_open_checked(shard, stack) for shard in shards]
        readers = [ShardFileReader(fd, documents=documents, queries=queries, depth=depth, block_queries=block) for fd, _ in opened]
        if any(not reader.header.scores for reader in readers):
            raise TaskFailure(FailureCode.INFRA, "a shard's run carries no scores: shards cannot be merged without them")
        owner = np.zeros(documents, dtype=np.min_scalar_type(len(shards)))  # 1 + the shard that named a document; 0: none
        output = RunWriter(target, stack, documents=documents, queries=queries, depth=depth)
        for begin in range(0, queries, block):
            end = min(queries, begin + block)
            kept: list[tuple[np.ndarray, np.ndarray]] = [
                (np.full((end - begin, 0), -np.inf, dtype=np.float64), np.full((end - begin, 0), -1, dtype=np.int64))
            ]
            for number, reader in enumerate(readers, start=1):
                part = reader.take(end)
                named = owner[part.docs]
                if np.any((named != 0) & (named != number)):
                    raise TaskFailure(FailureCode.INFRA, "two shards name one document: they must partition the corpus")
                owner[part.docs] = number
                kept.append(_dense_block(part, begin, end - begin, width))
                if len(kept) > MERGE_GROUP:  # the top so far and MERGE_GROUP shards' blocks: one selection
                    kept = [select_top_k(kept, width)]
            output.write(begin, *boundary_lists(*select_top_k(kept, width), depth=depth))
        for reader in readers:
            reader.finish()
        for shard, (fd, before) in zip(shards, opened):
            if not _unchanged(before, os.fstat(fd)):
                raise TaskFailure(FailureCode.INFRA, f"{shard.name} changed on disk while it was merged")
        return output.commit()


def check_shard_file(path: Path, *, documents: int, queries: int, depth: int, block_queries: int | None = None) -> None:
    """:func:`~grader.retrieval.shard_exchange.check_shard_run` of the run in ``path``, read a block of queries at a time:
    the same refusals (:class:`TaskFailure` ``INFRA``), with memory bounded by the block whatever the task's query count.
    """
    block = block_queries or default_block(depth)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        reader = ShardFileReader(fd, documents=documents, queries=queries, depth=depth, block_queries=block)
        if not reader.header.scores:
            raise TaskFailure(FailureCode.INFRA, "a shard's run carries no scores: shards cannot be merged without them")
        if reader.header.queries != queries:
            raise TaskFailure(FailureCode.INFRA, f"a shard's run lists {reader.header.queries} queries; the task has {queries}")
        for begin in range(0, queries, block):
            reader.take(min(queries, begin + block))
        reader.finish()
    finally:
        os.close(fd)
