"""OnnxEncoder on tiny real ONNX graphs (onnxruntime) and real tokenizers.

The models are lookup tables, so the expected embedding of a text is computed
here with numpy from the table: token ids from the word list, table rows, then
pooling and normalisation done independently of the grader.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from grader.errors import SubmissionError
from grader.retrieval.encoder import BatchPolicy, OnnxEncoder
from grader.submissions.manifest import load_manifest
from tests.onnx_models import WORDS, embedding_table, expected_embeddings, expected_token_ids, onnx_submission

TABLE = embedding_table(dim=8, seed=0)


def token_ids(text: str, *, with_cls: bool = False, max_length: int = 16) -> list[int]:
    return expected_token_ids(text, with_cls=with_cls, max_length=max_length)


def expected_vector(text: str, *, table: np.ndarray = TABLE, **kwargs) -> np.ndarray:
    return expected_embeddings([text], table, **kwargs)[0]


def expected_matrix(texts: list[str], *, table: np.ndarray = TABLE, **kwargs) -> np.ndarray:
    return expected_embeddings(texts, table, **kwargs)


def load(folder: Path, **kwargs) -> OnnxEncoder:
    return OnnxEncoder.load(folder, load_manifest(folder), threads=1, **kwargs)


def words(*numbers: int) -> str:
    return " ".join(f"w{n}" for n in numbers)


# Mixed lengths (1..12 tokens), unknown words and repeated words.
TEXTS = [
    words(1, 2, 3),
    words(4),
    words(5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16),
    "w17 unknown w18",
    words(19, 19, 19, 20),
    words(21, 22),
    words(23, 24, 25, 26, 27, 28, 29),
    words(30, 31, 32, 33, 34),
]


@pytest.fixture(scope="module")
def mean_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return onnx_submission(tmp_path_factory.mktemp("mean") / "sub", table=TABLE)


def test_dimension_comes_from_the_model(mean_folder: Path) -> None:
    assert load(mean_folder).dimension == 8
    wide = onnx_submission(mean_folder.parent / "wide", table=embedding_table(dim=24, seed=3))
    assert load(wide).dimension == 24


def test_mean_pooling_averages_real_tokens_in_mixed_length_batches(mean_folder: Path) -> None:
    vectors, stats = load(mean_folder).encode(TEXTS)
    assert vectors.dtype == np.float32 and vectors.shape == (len(TEXTS), 8)
    np.testing.assert_allclose(vectors, expected_matrix(TEXTS), rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert (stats.texts, stats.truncated) == (len(TEXTS), 0)
    # Padding rows must not count: a padded short text equals the same text alone.
    alone, _ = load(mean_folder).encode([TEXTS[1]])
    np.testing.assert_allclose(alone[0], vectors[1], atol=1e-7)


def test_mean_pooling_includes_the_cls_token_when_the_tokenizer_adds_it(tmp_path: Path) -> None:
    folder = onnx_submission(tmp_path / "sub", table=TABLE, with_cls=True)
    vectors, _ = load(folder).encode(TEXTS)
    np.testing.assert_allclose(vectors, expected_matrix(TEXTS, with_cls=True), atol=1e-6)
    assert not np.allclose(vectors, expected_matrix(TEXTS), atol=1e-3)


@pytest.mark.parametrize("normalize", [True, False])
def test_cls_pooling_takes_the_first_token(tmp_path: Path, normalize: bool) -> None:
    table = TABLE.copy()
    folder = onnx_submission(tmp_path / "sub", table=table, with_cls=True, manifest={"pooling": "cls", "normalize": normalize})
    vectors, _ = load(folder).encode(TEXTS)
    cls_row = table[1].astype(np.float64)
    expected = cls_row / np.linalg.norm(cls_row) if normalize else cls_row
    np.testing.assert_allclose(vectors, np.tile(expected, (len(TEXTS), 1)), atol=1e-6)
    # Without a [CLS] the first token is the first word.
    plain = onnx_submission(tmp_path / "plain", table=table, manifest={"pooling": "cls", "normalize": normalize})
    vectors, _ = load(plain).encode(TEXTS)
    np.testing.assert_allclose(vectors, expected_matrix(TEXTS, pooling="cls", normalize=normalize), atol=1e-6)


@pytest.mark.parametrize("normalize", [True, False])
def test_none_pooling_uses_the_models_own_pooled_output(tmp_path: Path, normalize: bool) -> None:
    folder = onnx_submission(tmp_path / "sub", table=TABLE, pooled=True, manifest={"normalize": normalize})
    # The pooled graph averages every position, padding included: give it equal lengths.
    texts = [words(1, 2, 3), words(40, 41, 42), "w7 w7 w9", words(60, 0, 33)]
    vectors, _ = load(folder).encode(texts)
    np.testing.assert_allclose(vectors, expected_matrix(texts, pooling="none", normalize=normalize), atol=1e-6)


def test_normalize_off_keeps_the_raw_mean(mean_folder: Path, tmp_path: Path) -> None:
    folder = onnx_submission(tmp_path / "raw", table=TABLE, manifest={"normalize": False})
    vectors, _ = load(folder).encode(TEXTS)
    np.testing.assert_allclose(vectors, expected_matrix(TEXTS, normalize=False), atol=1e-6)
    assert not np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)


def test_prefix_is_tokenised_with_the_text(mean_folder: Path) -> None:
    encoder = load(mean_folder)
    plain, _ = encoder.encode(TEXTS)
    prefixed, _ = encoder.encode(TEXTS, prefix="w7 ")
    np.testing.assert_allclose(prefixed, expected_matrix(["w7 " + t for t in TEXTS]), atol=1e-6)
    assert np.all(np.abs(prefixed - plain).max(axis=1) > 1e-3)
    # Prefix tokens count towards max_length: a 16-word text loses its last word.
    long_text = words(*range(40, 56))
    vectors, stats = encoder.encode([long_text], prefix="w7 ")
    np.testing.assert_allclose(vectors[0], expected_vector("w7 " + long_text), atol=1e-6)
    assert token_ids("w7 " + long_text)[-1] == WORDS.index("w54")
    assert stats.truncated == 1


def test_truncation_at_max_length_is_counted(tmp_path: Path) -> None:
    folder = onnx_submission(tmp_path / "sub", table=TABLE, manifest={"max_length": 5})
    texts = [words(1, 2, 3, 4, 5), words(1, 2, 3, 4, 5, 6), words(*range(10, 30)), words(9), words(8, 7, 6, 5, 4, 3)]
    vectors, stats = load(folder).encode(texts)
    np.testing.assert_allclose(vectors, expected_matrix(texts, max_length=5), atol=1e-6)
    assert (stats.texts, stats.truncated) == (5, 3)
    assert stats.as_dict() == {"texts": 5, "truncated": 3, "truncated_share": 0.6}
    # With a [CLS], the special token takes one of the five places.
    with_cls = onnx_submission(tmp_path / "cls", table=TABLE, with_cls=True, manifest={"max_length": 5})
    vectors, stats = load(with_cls).encode(texts)
    np.testing.assert_allclose(vectors, expected_matrix(texts, max_length=5, with_cls=True), atol=1e-6)
    assert stats.truncated == 4


def test_manifest_max_length_overrides_the_tokenizer_files_truncation_and_padding(tmp_path: Path) -> None:
    folder = onnx_submission(tmp_path / "sub", table=TABLE, file_max_length=4, manifest={"max_length": 16})
    texts = [words(*range(1, 11)), words(2, 3), words(*range(20, 40))]
    vectors, stats = load(folder).encode(texts)
    # 10 words are all kept (not 4), the 2-word text is not padded with [PAD] rows,
    # and only the 20-word text is cut, at 16.
    np.testing.assert_allclose(vectors, expected_matrix(texts, max_length=16), atol=1e-6)
    assert stats.truncated == 1


def test_order_is_restored_after_length_sorting_across_chunks_and_batches(mean_folder: Path) -> None:
    rng = random.Random(7)
    texts = [words(*[rng.randrange(61) for _ in range(rng.randrange(1, 20))]) for _ in range(57)]
    policy = BatchPolicy(max_batch_tokens=24, max_batch_size=3, chunk_size=10)
    calls: list[int] = []
    encoder = load(mean_folder, batching=policy)
    vectors, stats = encoder.encode(texts, progress=calls.append)
    np.testing.assert_allclose(vectors, expected_matrix(texts), atol=1e-6)
    assert stats.texts == 57 and stats.truncated == sum(1 for t in texts if len(t.split()) > 16)
    assert sum(calls) == 57
    assert len(calls) >= 57 // 3 and max(calls) <= 3
    # Many small batches agree with one big batch (a lookup model has no batch-shape effects).
    big, _ = load(mean_folder, batching=BatchPolicy(max_batch_tokens=1 << 20, max_batch_size=1024, chunk_size=1024)).encode(texts)
    np.testing.assert_allclose(vectors, big, rtol=0, atol=1e-6)
    again, _ = load(mean_folder, batching=policy).encode(texts)
    assert again.tobytes() == vectors.tobytes()


class _RecordingSession:
    """The real onnxruntime session, with every batch's input_ids recorded."""

    def __init__(self, session) -> None:
        self.session = session
        self.batches: list[np.ndarray] = []

    def run(self, outputs, feeds):
        self.batches.append(feeds["input_ids"].copy())
        return self.session.run(outputs, feeds)


@pytest.mark.parametrize("sort_by_length", [True, False])
def test_batches_respect_the_policy(mean_folder: Path, sort_by_length: bool) -> None:
    rng = random.Random(11)
    texts = [words(*[rng.randrange(3, 61) for _ in range(rng.randrange(1, 15))]) for _ in range(40)]
    policy = BatchPolicy(max_batch_tokens=30, max_batch_size=4, chunk_size=16, sort_by_length=sort_by_length)
    encoder = load(mean_folder, batching=policy)
    recorder = _RecordingSession(encoder.session)
    encoder.session = recorder
    vectors, _ = encoder.encode(texts)
    np.testing.assert_allclose(vectors, expected_matrix(texts), atol=1e-6)
    rows_seen: list[list[int]] = []
    for ids in recorder.batches:
        rows, longest = ids.shape
        assert rows <= 4
        assert rows == 1 or rows * longest <= 30
        assert longest == max(int(np.count_nonzero(row)) for row in ids)  # padded to the longest row only
        rows_seen.extend([int(t) for t in row if t != 0] for row in ids)
    # Every text went through the model exactly once (ids 3.. are real words, 0 is padding).
    expected_rows = [token_ids(t) for t in texts]
    assert sorted(rows_seen) == sorted(expected_rows)
    if not sort_by_length:
        assert rows_seen == expected_rows  # consecutive runs in input order
    else:
        assert rows_seen != expected_rows
        for start in range(0, len(texts), 16):  # inside a chunk, lengths never decrease
            chunk_rows = rows_seen[start : start + 16]
            lengths = [len(r) for r in chunk_rows]
            assert lengths == sorted(lengths)


def test_a_single_text_longer_than_the_token_budget_still_gets_a_batch(mean_folder: Path) -> None:
    texts = [words(*range(1, 17)), words(3)]
    vectors, _ = load(mean_folder, batching=BatchPolicy(max_batch_tokens=4, max_batch_size=8, chunk_size=8)).encode(texts)
    np.testing.assert_allclose(vectors, expected_matrix(texts), atol=1e-6)


def test_encoding_is_deterministic(mean_folder: Path) -> None:
    encoder = load(mean_folder)
    first, _ = encoder.encode(TEXTS * 5)
    second, _ = encoder.encode(TEXTS * 5)
    third, _ = load(mean_folder).encode(TEXTS * 5)
    assert first.tobytes() == second.tobytes() == third.tobytes()


def test_empty_input_gives_an_empty_matrix(mean_folder: Path) -> None:
    vectors, stats = load(mean_folder).encode([])
    assert vectors.shape == (0, 8) and vectors.dtype == np.float32
    assert stats.truncated_share == 0.0


def test_nan_output_is_a_submission_error(tmp_path: Path) -> None:
    table = TABLE.copy()
    table[WORDS.index("w60")] = np.nan
    folder = onnx_submission(tmp_path / "sub", table=table)
    encoder = load(folder)  # the probe text has no w60, so loading works
    ok, _ = encoder.encode([words(1, 2)])
    np.testing.assert_allclose(ok[0], expected_vector(words(1, 2)), atol=1e-6)
    with pytest.raises(SubmissionError) as info:
        encoder.encode([words(1, 2), words(3, 60)])
    assert info.value.field == "output"
    assert "NaN" in str(info.value)


def test_infinite_output_is_a_submission_error(tmp_path: Path) -> None:
    table = TABLE.copy()
    table[WORDS.index("w59")] = np.inf
    folder = onnx_submission(tmp_path / "sub", table=table, manifest={"normalize": False})
    with pytest.raises(SubmissionError, match="infinite"):
        load(folder).encode([words(59)])
