"""The server's shard merge and put check, streamed a block of queries at a time, against the whole-run code they replace.

:func:`merge_shard_files` must write the bytes the whole-run merge wrote (a grade must not depend on shard boundaries
or block sizes) and refuse what it refused, ``INFRA``; :func:`check_shard_file` likewise for the put check. The
reference is the pre-stream code, frozen in tests/shard_merge_reference.py. Random runs carry many ties (scores from
four values), ties across the depth, empty queries, shards that list only some queries; block sizes from 1 past the
query count.
"""

from __future__ import annotations

import hashlib
import os
import struct
import tracemalloc
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from grader.errors import TaskFailure
from grader.failures import FailureCode
from grader.retrieval.merge import merge_top_k, select_top_k
from grader.retrieval.shard_stream import MERGE_GROUP, StoredShard, check_shard_file, merge_shard_files
from grader.runs.compact import HEADER_BYTES, MAGIC, VERSION, WITH_SCORES
from tests.shard_merge_reference import reference_check_shard_run, reference_merge_compact_runs, search_width

DEPTH = 3
WIDTH = search_width(DEPTH)
_HEADER = struct.Struct("<4sBBHIIIIQ")


def _encode(lists: list[tuple[np.ndarray, np.ndarray] | None], documents: int, *, depth: int = DEPTH) -> bytes:
    """A compact run with scores of per-query (docs, scores) in trec order; ``None``: the query is not listed."""
    listed = [(q, entry) for q, entry in enumerate(lists) if entry is not None]
    docs = [entry[0] for _, entry in listed]
    scores = [entry[1] for _, entry in listed]
    hits = sum(len(d) for d in docs)
    return b"".join(
        [
            _HEADER.pack(MAGIC, VERSION, WITH_SCORES, 0, documents, len(listed), depth, 0, hits),
            np.asarray([q for q, _ in listed], dtype="<u4").tobytes(),
            np.asarray([len(d) for d in docs], dtype="<u4").tobytes(),
            np.concatenate(docs + [np.zeros(0)]).astype("<u4").tobytes(),
            np.concatenate(scores + [np.zeros(0)]).astype("<f8").tobytes(),
        ]
    )


def _query_hits(rng: np.random.Generator, pool: np.ndarray, depth: int = DEPTH) -> tuple[np.ndarray, np.ndarray]:
    """One query's hits among ``pool`` as a shard returns them: trec order, the first ``depth`` and the boundary ties."""
    count = int(rng.integers(0, min(len(pool), search_width(depth)) + 1))
    docs = rng.choice(pool, size=count, replace=False).astype(np.int64)
    scores = rng.integers(0, 4, size=count).astype(np.float64) / 2  # few values: ties everywhere, across the depth too
    order = np.lexsort((-docs, -scores))
    docs, scores = docs[order], scores[order]
    keep = np.arange(count) < depth
    if count > depth:
        keep |= scores == scores[depth - 1]
    return docs[keep], scores[keep]


def _shard_runs(rng: np.random.Generator, *, documents: int, queries: int, shards: int, sparse: bool = False) -> list[bytes]:
    """``shards`` runs over a random partition of ``documents``; ``sparse``: each query listed only now and then."""
    owner = rng.integers(0, shards, size=documents)
    runs = []
    for shard in range(shards):
        pool = np.flatnonzero(owner == shard)
        lists: list[tuple[np.ndarray, np.ndarray] | None] = []
        for _ in range(queries):
            listed = not sparse or rng.random() < 0.5
            lists.append(_query_hits(rng, pool) if listed and len(pool) else (np.zeros(0, np.int64), np.zeros(0)) if listed else None)
        runs.append(_encode(lists, documents))
    return runs


def _store(tmp_path: Path, runs: list[bytes]) -> list[StoredShard]:
    shards = []
    for number, data in enumerate(runs):
        path = tmp_path / f"task.{number}"
        path.write_bytes(data)
        shards.append(StoredShard(path, hashlib.sha256(data).hexdigest(), f"shard {number} of task"))
    return shards


def _outcome(call: Callable[[], bytes | None]) -> bytes | FailureCode | None:
    """What a call returns, or the code of the :class:`TaskFailure` it raises."""
    try:
        return call()
    except TaskFailure as failure:
        return failure.code


def _streamed(tmp_path: Path, runs: list[bytes], *, documents: int, queries: int, block: int) -> bytes | FailureCode:
    """The streamed merge's bytes (its returned digest checked against them), or its refusal's code."""
    target = tmp_path / "merged.run"
    target.unlink(missing_ok=True)
    try:
        digest = merge_shard_files(_store(tmp_path, runs), target, documents=documents, queries=queries, depth=DEPTH, block_queries=block)
    except TaskFailure as failure:
        assert not target.exists(), "a refused merge leaves no run"
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [], "nor temporary files"
        return failure.code
    data = target.read_bytes()
    assert digest == hashlib.sha256(data).hexdigest()
    return data


def _reference(runs: list[bytes], *, documents: int, queries: int) -> bytes | FailureCode:
    result = _outcome(lambda: reference_merge_compact_runs(iter(runs), documents=documents, queries=queries, depth=DEPTH))
    assert result is not None
    return result


@pytest.mark.parametrize("seed", range(40))
def test_the_streamed_merge_writes_the_whole_run_merges_bytes_whatever_the_block(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    documents, queries = int(rng.integers(1, 60)), int(rng.integers(0, 25))
    shards = int(rng.integers(1, 5 if seed % 2 else 3 * MERGE_GROUP))  # odd seeds: more shards than one selection takes
    runs = _shard_runs(rng, documents=documents, queries=queries, shards=shards, sparse=seed % 3 == 0)
    expected = _reference(runs, documents=documents, queries=queries)
    assert isinstance(expected, bytes)
    for block in sorted({1, 2, 3, 7, max(1, queries), queries + 5}):
        assert _streamed(tmp_path, runs, documents=documents, queries=queries, block=block) == expected, block


def _sorted_part(rng: np.random.Generator, pool: np.ndarray, rows: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """A part as a shard's dense block holds it: each row's hits in trec order, then empty slots (-1 at -inf)."""
    scores = np.full((rows, width), -np.inf)
    docs = np.full((rows, width), -1, dtype=np.int64)
    for row in range(rows):
        count = int(rng.integers(0, min(width, len(pool)) + 1))
        hit_docs = rng.choice(pool, size=count, replace=False)
        hit_scores = rng.choice(np.array([1.5, 0.0, -0.0, -2.0]), size=count)  # ties everywhere, 0.0 and -0.0 among them
        order = np.lexsort((-hit_docs, -hit_scores))
        scores[row, :count], docs[row, :count] = hit_scores[order], hit_docs[order]
    return scores, docs


@pytest.mark.parametrize("seed", range(30))
def test_one_selection_over_many_parts_equals_merging_them_two_at_a_time(seed: int) -> None:
    """select_top_k against the chained two-way merge it replaces in the streamed merge: equal arrays, bit for bit
    (0.0 and -0.0 kept as they were), whatever the number of parts, k against their widths, and empty slots."""
    rng = np.random.default_rng(seed)
    parts_count, rows, k = int(rng.integers(1, 12)), int(rng.integers(1, 9)), int(rng.integers(1, 12))
    owner = rng.integers(0, parts_count, size=int(rng.integers(1, 80)))
    parts = [_sorted_part(rng, np.flatnonzero(owner == part), rows, int(rng.integers(0, 8))) for part in range(parts_count)]
    scores, docs = np.full((rows, 0), -np.inf), np.full((rows, 0), -1, dtype=np.int64)
    for part_scores, part_docs in parts:
        scores, docs = merge_top_k(scores, docs, part_scores, part_docs, None, k)
    chosen_scores, chosen_docs = select_top_k(parts, k)
    assert np.array_equal(chosen_docs, docs)
    assert chosen_scores.tobytes() == scores.tobytes()  # the sign of a zero score included


def test_no_shards_merge_to_every_query_empty_and_a_task_without_queries_to_a_header(tmp_path: Path) -> None:
    for queries in (0, 4):
        expected = _reference([], documents=5, queries=queries)
        assert _streamed(tmp_path, [], documents=5, queries=queries, block=2) == expected
        assert isinstance(expected, bytes) and len(expected) == HEADER_BYTES + 8 * queries


def _mutate(data: bytes, at: int, value: bytes) -> bytes:
    return data[:at] + value + data[at + len(value) :]


def _flags(data: bytes, flags: int) -> bytes:
    return _mutate(data, 5, bytes([flags]))


def _without_scores(data: bytes) -> bytes:
    hits = _HEADER.unpack_from(data)[-1]
    return _flags(data, 0)[: len(data) - 8 * hits]


def _field(data: bytes, offset: int, value: int) -> bytes:
    return _mutate(data, offset, struct.pack("<I", value))


def _sections(data: bytes) -> tuple[int, int, int, int]:
    """Where the query indexes, counts, hits and scores of a compact run begin."""
    listed, hits = _HEADER.unpack_from(data)[5], _HEADER.unpack_from(data)[-1]
    return HEADER_BYTES, HEADER_BYTES + 4 * listed, HEADER_BYTES + 8 * listed, HEADER_BYTES + 8 * listed + 4 * hits


def _counts(data: bytes) -> np.ndarray:
    listed = _HEADER.unpack_from(data)[5]
    return np.frombuffer(data, "<u4", count=listed, offset=_sections(data)[1]).astype(np.int64)


def _first_long_query(data: bytes, at_least: int) -> int:
    return int(np.flatnonzero(_counts(data) >= at_least)[0])


def _hit_at(data: bytes, query: int, rank: int) -> int:
    """The position of a listed query's hit of ``rank`` among all hits."""
    return int(_counts(data)[:query].sum()) + rank


MUTATIONS: dict[str, Callable[[bytes], bytes]] = {
    "no scores": _without_scores,
    "unknown flags": lambda data: _flags(data, 3),
    "another magic": lambda data: b"GRUX" + data[4:],
    "truncated header": lambda data: data[:20],
    "truncated": lambda data: data[:-4],
    "oversized": lambda data: data + b"\0" * 8,
    "another corpus": lambda data: _field(data, 8, 61),
    "another depth": lambda data: _field(data, 16, DEPTH + 1),
    "more queries than staged": lambda data: _field(data, 12, 999),
    "the last query index past the staged": lambda data: _field(data, _sections(data)[1] - 4, 30),
    "two query indexes swapped": lambda data: _mutate(
        data, HEADER_BYTES, data[HEADER_BYTES + 4 : HEADER_BYTES + 8] + data[HEADER_BYTES : HEADER_BYTES + 4]
    ),
    "a count past the width": lambda data: _field(data, _sections(data)[1], WIDTH + 1),
    "counts past the hits": lambda data: _field(data, _sections(data)[1], int(_counts(data)[0]) + 1),
    "counts short of the hits": lambda data: _field(
        data, _sections(data)[1] + 4 * _first_long_query(data, 1), int(_counts(data)[_first_long_query(data, 1)]) - 1
    ),
    "the last count short of the hits": lambda data: _field(data, _sections(data)[2] - 4, int(_counts(data)[-1]) - 1),  # one hit never read
    "a document past the corpus": lambda data: _field(data, _sections(data)[2], 60),
    "a document twice for a query": lambda data: _mutate(
        data,
        _sections(data)[2] + 4 * _hit_at(data, _first_long_query(data, 2), 1),
        data[_sections(data)[2] + 4 * _hit_at(data, _first_long_query(data, 2), 0) :][:4],
    ),
    "a score not a number": lambda data: _mutate(data, _sections(data)[3], struct.pack("<d", float("nan"))),
    "scores out of trec order": lambda data: _mutate(
        data, _sections(data)[3] + 8 * _hit_at(data, _first_long_query(data, 2), 1), struct.pack("<d", 99.0)
    ),
    "a hit past the depth untied": lambda data: _mutate(
        data, _sections(data)[3] + 8 * _hit_at(data, _first_long_query(data, DEPTH + 1), DEPTH), struct.pack("<d", -99.0)
    ),
}


def _dense_runs(seed: int, *, queries: int = 12, shards: int = 3) -> list[bytes]:
    """Runs whose every query has at least ``DEPTH + 1`` hits, the last tied: every mutation has something to change."""
    rng = np.random.default_rng(seed)
    documents = 60
    owner = np.arange(documents) % shards
    runs = []
    for shard in range(shards):
        pool = np.flatnonzero(owner == shard)
        lists: list[tuple[np.ndarray, np.ndarray] | None] = []
        for _ in range(queries):
            docs = rng.choice(pool, size=DEPTH + 1, replace=False).astype(np.int64)
            lists.append((docs[np.argsort(-docs)], np.asarray([3.0] + [1.0] * DEPTH)))
        runs.append(_encode(lists, documents))
    return runs


@pytest.mark.parametrize("name", list(MUTATIONS))
@pytest.mark.parametrize("shard", [0, 2])
def test_every_refusal_of_the_whole_run_merge_is_the_streamed_merges_with_its_code(tmp_path: Path, name: str, shard: int) -> None:
    runs = _dense_runs(shard)
    runs[shard] = MUTATIONS[name](runs[shard])
    expected = _reference(runs, documents=60, queries=12)
    assert expected is FailureCode.INFRA, f"the reference accepts {name}: the mutation tests nothing"
    for block in (1, 5, 12):
        assert _streamed(tmp_path, runs, documents=60, queries=12, block=block) is FailureCode.INFRA


def test_two_shards_naming_one_document_in_different_queries_and_blocks_are_refused(tmp_path: Path) -> None:
    runs = _dense_runs(1, queries=6, shards=2)
    hits = _HEADER.unpack_from(runs[1])[-1]
    at = _sections(runs[1])[2] + 4 * (hits - 1)  # the last query's last hit of shard 1 ...
    first = int(np.frombuffer(runs[0], "<u4", count=1, offset=_sections(runs[0])[2] + 4 * DEPTH)[0])  # ... is shard 0's from query 0
    runs[1] = _field(runs[1], at, first)
    assert _reference(runs, documents=60, queries=6) is FailureCode.INFRA  # unless the edit broke trec order: still refused
    for block in (1, 6):
        assert _streamed(tmp_path, runs, documents=60, queries=6, block=block) is FailureCode.INFRA


@pytest.mark.parametrize("seed", range(30))
def test_random_byte_damage_is_refused_by_both_or_merged_to_the_same_bytes(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    runs = _shard_runs(rng, documents=40, queries=10, shards=3, sparse=seed % 2 == 0)
    victim = int(rng.integers(0, 3))
    damaged = bytearray(runs[victim])
    for _ in range(int(rng.integers(1, 4))):
        damaged[int(rng.integers(0, len(damaged)))] = int(rng.integers(0, 256))
    runs[victim] = bytes(damaged)
    expected = _reference(runs, documents=40, queries=10)
    for block in (1, 4):
        assert _streamed(tmp_path, runs, documents=40, queries=10, block=block) == expected


def test_a_shard_changed_on_disk_after_it_was_stored_is_refused_before_the_target_is_touched(tmp_path: Path) -> None:
    runs = _dense_runs(3)
    shards = _store(tmp_path, runs)
    target = tmp_path / "merged.run"
    target.write_bytes(b"the previous merge")
    changed = _mutate(runs[1], _sections(runs[1])[3], struct.pack("<d", 2.0))  # the first hit's 3.0: still a valid run, not the stored one
    assert changed != runs[1] and _reference([runs[0], changed, runs[2]], documents=60, queries=12) != _reference(runs, documents=60, queries=12)
    shards[1].path.write_bytes(changed)
    with pytest.raises(TaskFailure, match="shard 1 of task changed on disk after it was stored") as caught:
        merge_shard_files(shards, target, documents=60, queries=12, depth=DEPTH, block_queries=4)
    assert caught.value.code is FailureCode.INFRA
    assert target.read_bytes() == b"the previous merge"


def _checked(tmp_path: Path, data: bytes, *, queries: int, block: int) -> FailureCode | None:
    path = tmp_path / "put.0"
    path.write_bytes(data)
    result = _outcome(lambda: check_shard_file(path, documents=60, queries=queries, depth=DEPTH, block_queries=block))
    assert not isinstance(result, bytes)
    return result


@pytest.mark.parametrize("name", [*MUTATIONS, "fewer queries listed than the task's"])
def test_the_streamed_put_check_refuses_what_the_whole_run_check_refuses(tmp_path: Path, name: str) -> None:
    run = _dense_runs(4, shards=1)[0]
    data = MUTATIONS[name](run) if name in MUTATIONS else _encode([None, *[(np.asarray([9, 5]), np.asarray([2.0, 1.0]))] * 11], 60)
    assert _outcome(lambda: reference_check_shard_run(run, documents=60, queries=12, depth=DEPTH)) is None
    expected = _outcome(lambda: reference_check_shard_run(data, documents=60, queries=12, depth=DEPTH))
    assert expected is FailureCode.INFRA, name
    for block in (1, 5, 12, 40):
        assert _checked(tmp_path, run, queries=12, block=block) is None
        assert _checked(tmp_path, data, queries=12, block=block) is FailureCode.INFRA


@pytest.mark.parametrize("seed", range(20))
def test_the_streamed_put_check_agrees_with_the_whole_run_check_on_random_runs(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(2000 + seed)
    run = _shard_runs(rng, documents=60, queries=9, shards=2, sparse=seed % 4 == 0)[0]
    damaged = bytearray(run)
    if seed % 2:
        damaged[int(rng.integers(0, len(damaged)))] = int(rng.integers(0, 256))
    expected = _outcome(lambda: reference_check_shard_run(bytes(damaged), documents=60, queries=9, depth=DEPTH))
    for block in (1, 3, 9):
        assert _checked(tmp_path, bytes(damaged), queries=9, block=block) == expected


def _peak(call: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_streamed_merges_memory_does_not_grow_with_the_query_count(tmp_path: Path) -> None:
    """Ten times the queries: the whole-run merge's peak grows about tenfold, the streamed one's not at all (its blocks are
    the same size; only the output file grows)."""
    peaks: dict[str, list[int]] = {"whole": [], "streamed": []}
    documents, depth = 4000, 50
    for queries in (100, 1000):
        rng = np.random.default_rng(queries)
        lists = [_query_hits(rng, np.arange(documents), depth) for _ in range(queries)]
        runs = [_encode(lists, documents, depth=depth)]
        folder = tmp_path / str(queries)
        folder.mkdir()
        shards = _store(folder, runs)
        peaks["whole"].append(_peak(partial(reference_merge_compact_runs, iter(runs), documents=documents, queries=queries, depth=depth)))
        target = folder / "merged.run"
        peaks["streamed"].append(
            _peak(partial(merge_shard_files, shards, target, documents=documents, queries=queries, depth=depth, block_queries=20))
        )
        assert target.read_bytes() == reference_merge_compact_runs(iter(runs), documents=documents, queries=queries, depth=depth)
    assert peaks["whole"][1] > 5 * peaks["whole"][0]
    assert peaks["streamed"][1] < 1.5 * peaks["streamed"][0]
    assert peaks["streamed"][1] < peaks["whole"][1] / 5


def test_a_file_the_reader_cannot_open_is_an_os_error_as_before(tmp_path: Path) -> None:
    """A missing shard file is the server's own state gone: not a worker's fault, so no TaskFailure (as read_bytes raised)."""
    shard = StoredShard(tmp_path / "task.0", "0" * 64, "shard 0 of task")
    with pytest.raises(FileNotFoundError):
        merge_shard_files([shard], tmp_path / "merged.run", documents=5, queries=1, depth=DEPTH)
    assert not os.path.exists(tmp_path / "merged.run")
