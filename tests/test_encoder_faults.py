"""Model faults an in-process encoder must turn into a defined vector or a MODEL_ERROR, never a traceback.

Before: a tokenizer yielding zero tokens with ``pooling: cls`` raised
IndexError; a zero-width output crashed the run; finite but huge vectors
(``normalize: false``) overflowed the inner products.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from grader.cli.main import cli
from grader.errors import SubmissionError
from grader.retrieval.encoder import OnnxEncoder
from grader.submissions.manifest import load_manifest
from tests.conftest import write_task
from tests.onnx_models import embedding_table, expected_embeddings, onnx_submission


def _encoder(folder: Path) -> OnnxEncoder:
    return OnnxEncoder.load(folder, load_manifest(folder), threads=1)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_texts_with_no_tokens_embed_as_zero_vectors(tmp_path: Path, pooling: str) -> None:
    table = embedding_table(dim=8, seed=3)
    encoder = _encoder(onnx_submission(tmp_path / "m", table=table, manifest={"pooling": pooling}))
    only_empty, _ = encoder.encode(["", "   "])
    np.testing.assert_array_equal(only_empty, np.zeros((2, 8), dtype=np.float32))
    mixed, _ = encoder.encode(["", "w3 w4", " "])
    np.testing.assert_array_equal(mixed[[0, 2]], np.zeros((2, 8), dtype=np.float32))
    np.testing.assert_allclose(mixed[1], expected_embeddings(["w3 w4"], table, pooling=pooling)[0], atol=1e-6)


def test_a_zero_width_output_is_refused_as_a_model_error(tmp_path: Path) -> None:
    folder = onnx_submission(tmp_path / "m", table=np.zeros((64, 0), dtype=np.float32))
    with pytest.raises(SubmissionError, match="does not fit pooling"):
        _encoder(folder)


@pytest.fixture
def benchmark(tmp_path: Path) -> Path:
    root = tmp_path / "bench"
    corpus = [{"_id": f"d{i}", "title": "", "text": f"w{10 + i} w{20 + i}"} for i in range(6)]
    queries = [{"_id": f"q{i}", "text": f"w{10 + i}"} for i in range(3)]
    write_task(root / "only", corpus=corpus, queries=queries, qrels={"test": [(f"q{i}", f"d{i}", 1) for i in range(3)]})
    (root / "benchmark.json").write_text(json.dumps({"name": "b", "version": "1", "primary_measure": "NDCG@10", "tasks": ["only"]}), encoding="utf-8")
    return root


def _run(submission: Path, benchmark: Path, out: Path):
    return CliRunner().invoke(
        cli, ["run", str(submission), "--benchmark", str(benchmark), "--out", str(out), "--threads", "1", "--sandbox", "none", "--quiet"]
    )


@pytest.mark.slow
@pytest.mark.parametrize("scale", [1e20, -1e20])
def test_huge_finite_vectors_are_a_model_error_not_a_crash(tmp_path: Path, benchmark: Path, scale: float) -> None:
    table = embedding_table(dim=8, seed=4) * np.float32(scale)
    assert np.isfinite(table).all()
    folder = onnx_submission(tmp_path / "m", table=table, manifest={"normalize": False})
    result = _run(folder, benchmark, tmp_path / "out")
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    task = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))["tasks"]["only"]
    assert task["status"] == "failed"
    assert task["failure"]["code"] == "MODEL_ERROR"
    assert "L2 norm" in task["failure"]["message"]


@pytest.mark.slow
def test_the_same_vectors_normalised_are_graded_as_the_unscaled_ones(tmp_path: Path, benchmark: Path) -> None:
    """Normalising must not overflow (1e20 squared is beyond float32): the scale cannot matter."""
    table = embedding_table(dim=8, seed=4)
    measures = []
    for name, scale in (("plain", 1.0), ("huge", 1e20)):
        folder = onnx_submission(tmp_path / name, table=table * np.float32(scale), manifest={"normalize": True})
        result = _run(folder, benchmark, tmp_path / f"out-{name}")
        assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
        task = json.loads((tmp_path / f"out-{name}" / "report.json").read_text(encoding="utf-8"))["tasks"]["only"]
        assert task["status"] == "scored"
        measures.append(task["measures"])
    assert measures[0] == measures[1]
    assert measures[0]["NDCG@10"] > 0.5


@pytest.mark.slow
def test_a_zero_width_model_is_a_model_error_of_its_task_not_a_traceback(tmp_path: Path, benchmark: Path) -> None:
    """The encoder runs in a child process (``--sandbox none``): a model whose output has no width fails its task, coded."""
    folder = onnx_submission(tmp_path / "m", table=np.zeros((64, 0), dtype=np.float32))
    result = _run(folder, benchmark, tmp_path / "out")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stdout + result.stderr
    task = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))["tasks"]["only"]
    assert task["status"] == "failed" and task["failure"]["code"] == "MODEL_ERROR"
    assert "does not fit pooling" in task["failure"]["message"]
