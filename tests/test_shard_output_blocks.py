"""A shard job reads the runner container's ``corpus.npy`` in bounded blocks, checked before use.

:func:`grader.collect.outputs.embedding_blocks` checks the header (dtype, order, shape, the
dimension cap, the exact size) before it reads a byte of data, reads the rows into one reused
buffer and refuses a non-finite block with the caller's code; the shard's search over those
blocks (:func:`grader.retrieval.shard_run.search_blocks`) equals one exact search of the
whole matrix, hit for hit and score for score (expected values: :func:`exact_top_k` on the
whole array, which ``tests/test_search.py`` checks against brute force).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from grader.collect.outputs import embedding_blocks
from grader.errors import TaskFailure
from grader.failures import FailureCode
from grader.retrieval.search import exact_top_k
from grader.retrieval.shard_run import search_blocks

ROWS, DIM = 37, 8


def _blocks(folder: Path, *, rows: int = ROWS, max_bytes: int = 1 << 20, max_dimension: int = 64, block: int = 5) -> list[tuple[int, np.ndarray]]:
    found = embedding_blocks(
        folder, "corpus.npy", rows=rows, max_bytes=max_bytes, max_dimension=max_dimension, block_rows=lambda _d: block, fault=FailureCode.MODEL_ERROR
    )
    return [(first, data.copy()) for first, data in found]


def _vectors(seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((ROWS, DIM)).astype(np.float32)
    vectors[20] = vectors[3]  # equal rows: tied scores, broken by rank
    return vectors


def test_blocks_are_the_rows_in_order_read_into_one_buffer(tmp_path: Path) -> None:
    vectors = _vectors()
    np.save(tmp_path / "corpus.npy", vectors)
    seen = embedding_blocks(
        tmp_path, "corpus.npy", rows=ROWS, max_bytes=1 << 20, max_dimension=64, block_rows=lambda _d: 5, fault=FailureCode.MODEL_ERROR
    )
    buffers = set()
    parts = []
    for first, block in seen:
        buffers.add(block.__array_interface__["data"][0])
        parts.append((first, block.copy()))
    assert [first for first, _ in parts] == list(range(0, ROWS, 5))
    assert np.concatenate([block for _, block in parts]).tobytes() == vectors.tobytes()
    assert len(buffers) == 1  # one reused buffer, never the whole matrix


@pytest.mark.parametrize(
    ("array", "rows", "why"),
    [
        (np.zeros((ROWS, DIM), dtype=np.float64), ROWS, "dtype"),
        (np.asfortranarray(np.zeros((ROWS, DIM), dtype=np.float32)), ROWS, "fortran"),
        (np.zeros((ROWS, DIM), dtype=np.float32), ROWS + 1, "shape"),
        (np.zeros((ROWS, 65), dtype=np.float32), ROWS, "dim <= 64"),
        (np.zeros((ROWS,), dtype=np.float32), ROWS, "shape"),
    ],
    ids=["float64", "fortran", "rows", "too-wide", "one-dimensional"],
)
def test_a_bad_header_is_refused_before_any_data_is_read(tmp_path: Path, array: np.ndarray, rows: int, why: str) -> None:
    np.save(tmp_path / "corpus.npy", array)
    with pytest.raises(TaskFailure, match=why) as caught:
        _blocks(tmp_path, rows=rows)
    assert caught.value.code is FailureCode.OUTPUT_INVALID


@pytest.mark.parametrize("change", [-4, 1], ids=["truncated", "trailing-byte"])
def test_a_file_of_another_size_than_its_header_promises_is_refused(tmp_path: Path, change: int) -> None:
    np.save(tmp_path / "corpus.npy", _vectors())
    data = (tmp_path / "corpus.npy").read_bytes()
    (tmp_path / "corpus.npy").write_bytes(data[:change] if change < 0 else data + b"\0" * change)
    with pytest.raises(TaskFailure, match="data bytes where its header promises") as caught:
        _blocks(tmp_path)
    assert caught.value.code is FailureCode.OUTPUT_INVALID


def test_a_non_finite_value_is_the_callers_fault_and_a_file_over_the_cap_is_too_large(tmp_path: Path) -> None:
    vectors = _vectors()
    vectors[33, 2] = np.nan
    np.save(tmp_path / "corpus.npy", vectors)
    with pytest.raises(TaskFailure, match="NaN or infinite") as caught:
        _blocks(tmp_path)
    assert caught.value.code is FailureCode.MODEL_ERROR
    with pytest.raises(TaskFailure) as too_large:
        _blocks(tmp_path, max_bytes=ROWS * DIM * 4)
    assert too_large.value.code is FailureCode.OUTPUT_TOO_LARGE


@pytest.mark.parametrize("block", [1, 5, ROWS])
def test_the_search_over_blocks_is_one_exact_search(tmp_path: Path, block: int) -> None:
    vectors = _vectors()
    np.save(tmp_path / "corpus.npy", vectors)
    queries = np.random.default_rng(9).standard_normal((6, DIM)).astype(np.float32)
    ranks = np.random.default_rng(4).permutation(1000)[:ROWS].astype(np.int64)  # places in a larger corpus
    k = 12
    want_scores, want_docs = exact_top_k(queries, vectors, k, doc_ranks=ranks)
    blocks = embedding_blocks(
        tmp_path, "corpus.npy", rows=ROWS, max_bytes=1 << 20, max_dimension=64, block_rows=lambda _d: block, fault=FailureCode.MODEL_ERROR
    )
    scores, docs = search_blocks(queries, blocks, ranks, k)
    assert scores.tobytes() == want_scores.tobytes()
    assert np.array_equal(docs, want_docs)
