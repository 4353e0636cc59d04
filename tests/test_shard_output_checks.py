"""What the server checks of a shard job's output when it is put, and how a shard worker judges a dimension mismatch.

Query vectors (:func:`check_vectors_file`) and a shard's run (:func:`check_shard_run`) are another worker's
word: each refusal is ``INFRA``, never the participant's code. A shard worker whose query vectors misfit its
documents encodes the queries itself (:func:`judge_mismatch`): only a mismatch it reproduces is ``MODEL_ERROR``.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from grader.errors import DimensionMismatch, SuspectQueries, TaskFailure
from grader.failures import FailureCode
from grader.retrieval.shard_exchange import MAX_DIMENSION, VECTORS_MAGIC, check_shard_run, check_vectors_file, dense_run, pack_vectors
from grader.retrieval.shard_run import search_blocks

ROWS = 5


def _put(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "t.-1"
    path.write_bytes(data)
    return path


def _vectors(rows: int = ROWS, dimension: int = 4) -> np.ndarray:
    return np.arange(rows * dimension, dtype=np.float32).reshape(rows, dimension) / 7


def test_query_vectors_that_hold_are_accepted_and_their_dimension_read(tmp_path: Path) -> None:
    assert check_vectors_file(_put(tmp_path, pack_vectors(_vectors())), rows=ROWS) == 4
    # Read in blocks: a block smaller than the data (and not a multiple of 4) sees every value.
    assert check_vectors_file(_put(tmp_path, pack_vectors(_vectors(dimension=9))), rows=ROWS, block_bytes=10) == 9


def _with_value(value: float, at: int) -> bytes:
    vectors = _vectors()
    vectors.flat[at] = value
    return pack_vectors(vectors)


GOOD = pack_vectors(_vectors())
REFUSED = {
    "empty": (b"", "truncated header"),
    "truncated header": (GOOD[:8], "truncated header"),
    "another magic": (b"GQVX" + GOOD[4:], "not 5 rows"),
    "a run instead of vectors": (b"GRUN" + GOOD[4:], "not 5 rows"),
    "wrong rows": (pack_vectors(_vectors(rows=ROWS + 1)), "not 5 rows"),
    "rows short of the header": (GOOD[:-4], "not 5 rows"),
    "bytes past the header's rows": (GOOD + b"\0\0\0\0", "not 5 rows"),
    "no dimension": (struct.pack("<4sII", VECTORS_MAGIC, ROWS, 0), "0 dimensions"),
    "past the largest dimension": (pack_vectors(np.zeros((ROWS, MAX_DIMENSION + 1), dtype=np.float32)), f"{MAX_DIMENSION + 1} dimensions"),
    "a NaN in the last block": (_with_value(float("nan"), ROWS * 4 - 1), "NaN or infinite"),
    "an infinity": (_with_value(float("-inf"), 0), "NaN or infinite"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_query_vectors_that_do_not_hold_are_refused_infra(tmp_path: Path, name: str) -> None:
    data, why = REFUSED[name]
    with pytest.raises(TaskFailure, match=why) as caught:
        check_vectors_file(_put(tmp_path, data), rows=ROWS, block_bytes=16)
    assert caught.value.code is FailureCode.INFRA and caught.value.detail.startswith("query vectors refused")


def _shard_run(queries: int = 3, *, documents: int = 20, depth: int = 2) -> bytes:
    scores = np.tile(np.asarray([[3.0, 2.0, 1.0]]), (queries, 1))
    docs = np.tile(np.asarray([[4, 7, 9]]), (queries, 1))
    return dense_run(scores, docs, documents=documents, depth=depth)


def test_a_shard_run_that_holds_is_accepted_and_one_that_does_not_is_refused_infra() -> None:
    check_shard_run(_shard_run(), documents=20, queries=3, depth=2)
    refused = {
        "not a run": (pack_vectors(_vectors()), "compact run refused"),
        "another corpus": (_shard_run(documents=21), "21 documents"),
        "fewer queries than the task's": (_shard_run(queries=2), "lists 2 queries; the task has 3"),
        "truncated": (_shard_run()[:-8], "truncated"),
    }
    for name, (data, why) in refused.items():
        with pytest.raises(TaskFailure, match=why) as caught:
            check_shard_run(data, documents=20, queries=3, depth=2)
        assert caught.value.code is FailureCode.INFRA, name


def test_a_shard_run_without_scores_is_refused_infra() -> None:
    from grader.runs.compact import HEADER_BYTES, MAGIC, VERSION

    header = struct.pack("<4sBBHIIIIQ", MAGIC, VERSION, 0, 0, 20, 1, 2, 0, 1)
    assert len(header) == HEADER_BYTES
    data = header + np.zeros(1, "<u4").tobytes() + np.ones(1, "<u4").tobytes() + np.asarray([3], "<u4").tobytes()
    with pytest.raises(TaskFailure, match="carries no scores") as caught:
        check_shard_run(data, documents=20, queries=1, depth=2)
    assert caught.value.code is FailureCode.INFRA


def test_a_search_meeting_two_dimensions_says_both() -> None:
    with pytest.raises(DimensionMismatch) as caught:
        search_blocks(np.ones((2, 3), np.float32), [(0, np.ones((4, 5), np.float32))], np.arange(4), 2)
    assert (caught.value.queries, caught.value.documents, caught.value.code) == (3, 5, FailureCode.MODEL_ERROR)


@pytest.mark.parametrize(("own", "expected"), [(5, FailureCode.INFRA), (3, FailureCode.MODEL_ERROR), (7, FailureCode.MODEL_ERROR)])
def test_a_mismatch_is_the_models_fault_only_when_this_worker_reproduces_it(monkeypatch: pytest.MonkeyPatch, own: int, expected: FailureCode) -> None:
    """Received 3-dimension vectors, documents of 5: own vectors of 5 clear the model (the received are suspect); of 3 or 7 do not."""
    from grader.grading import shard_sandbox

    monkeypatch.setattr(shard_sandbox, "query_vectors", lambda runner, task, judged: np.zeros((len(judged), own), np.float32))
    mismatch = DimensionMismatch(FailureCode.MODEL_ERROR, queries=3, documents=5)
    verdict = shard_sandbox.judge_mismatch(None, None, ["q1", "q2"], mismatch, received="ab" * 32)  # type: ignore[arg-type]
    assert verdict.code is expected
    if expected is FailureCode.INFRA:
        assert isinstance(verdict, SuspectQueries) and verdict.sha256 == "ab" * 32 and "suspect" in verdict.detail
    else:
        assert not isinstance(verdict, SuspectQueries) and "reproduced on one worker" in verdict.detail


def test_a_suspect_marker_comes_with_infra_only() -> None:
    from grader.hosting.protocol.shard_messages import ShardFailure

    assert ShardFailure(tries=1, failure_code=FailureCode.INFRA, suspect_queries="a" * 64).suspect_queries == "a" * 64
    assert ShardFailure(tries=1, failure_code=FailureCode.MODEL_ERROR).suspect_queries is None  # as before: no marker
    for code, marker in [(FailureCode.MODEL_ERROR, "a" * 64), (FailureCode.INFRA, "not-a-digest")]:
        with pytest.raises(ValidationError):
            ShardFailure(tries=1, failure_code=code, suspect_queries=marker)
