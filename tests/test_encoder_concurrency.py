"""OnnxEncoder with several threads: whole batches run side by side (``BatchPolicy.concurrent_batches``).

Checks results, order, progress and errors, never speed (timings live in ``bench/encode.py``).
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from grader.errors import SubmissionError
from grader.retrieval.encoder import BatchPolicy, OnnxEncoder
from grader.submissions.manifest import load_manifest
from tests.onnx_models import WORDS, embedding_table, expected_embeddings, onnx_submission

TABLE = embedding_table(dim=8, seed=0)
SMALL_BATCHES = BatchPolicy(max_batch_tokens=24, max_batch_size=3, chunk_size=50)


def texts(count: int, seed: int = 5) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(59)}" for _ in range(rng.randrange(1, 20))) for _ in range(count)]


def load(folder: Path, threads: int, policy: BatchPolicy = SMALL_BATCHES) -> OnnxEncoder:
    return OnnxEncoder.load(folder, load_manifest(folder), threads=threads, batching=policy)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return onnx_submission(tmp_path_factory.mktemp("concurrent") / "sub", table=TABLE)


def test_threads_become_concurrent_batches_of_one_thread_each(folder: Path) -> None:
    assert load(folder, 1).workers == 1
    assert load(folder, 3).workers == 3
    assert load(folder, 3, BatchPolicy(concurrent_batches=False)).workers == 1


def test_concurrent_batches_give_the_same_bytes_in_input_order(folder: Path) -> None:
    inputs = texts(300)
    calls: list[int] = []
    encoder = load(folder, 3)
    vectors, stats = encoder.encode(inputs, prefix="w7 ", progress=calls.append)
    np.testing.assert_allclose(vectors, expected_embeddings(["w7 " + t for t in inputs], TABLE), atol=1e-6)
    assert stats.texts == 300 and stats.truncated == sum(1 for t in inputs if len(t.split()) + 1 > 16)
    assert sum(calls) == 300 and max(calls) <= 3
    one_thread, _ = load(folder, 1).encode(inputs, prefix="w7 ")
    one_at_a_time, _ = load(folder, 3, replace(SMALL_BATCHES, concurrent_batches=False)).encode(inputs, prefix="w7 ")
    again, _ = encoder.encode(inputs, prefix="w7 ")
    assert vectors.tobytes() == again.tobytes() == one_thread.tobytes() == one_at_a_time.tobytes()


def test_input_order_batches_run_concurrently_too(folder: Path) -> None:
    inputs = texts(120, seed=9)
    policy = BatchPolicy(max_batch_tokens=30, max_batch_size=4, chunk_size=40, sort_by_length=False)
    vectors, _ = load(folder, 2, policy).encode(inputs)
    np.testing.assert_allclose(vectors, expected_embeddings(inputs, TABLE), atol=1e-6)


def test_a_failing_batch_raises_from_the_concurrent_path(tmp_path: Path) -> None:
    table = TABLE.copy()
    table[WORDS.index("w60")] = np.nan
    broken = onnx_submission(tmp_path / "nan", table=table)
    encoder = load(broken, 2)
    with pytest.raises(SubmissionError, match="NaN"):
        encoder.encode([*texts(200), "w60 w1"])
    # The encoder stays usable after the failure.
    ok, _ = encoder.encode(["w1 w2"])
    np.testing.assert_allclose(ok, expected_embeddings(["w1 w2"], TABLE), atol=1e-6)


def test_empty_input_with_several_threads(folder: Path) -> None:
    vectors, stats = load(folder, 2).encode([])
    assert vectors.shape == (0, 8) and stats.texts == 0
