"""Collect and validate: a stage of grading between the sandbox and scoring, in its own package.

The sandbox hands back a container's ``/output`` folder; :mod:`grader.collect`
reads it (first problem: a failure code) for grading and lists every problem in
it for ``grader check``, which never imports the sandbox (an import contract).
"""

from __future__ import annotations

import io
import json
import tomllib
from pathlib import Path

import numpy as np
import pytest

from grader.collect.outputs import collect_outputs
from grader.collect.validate import output_problems
from grader.errors import TaskFailure
from grader.failures import FailureCode

REPO = Path(__file__).resolve().parent.parent
QUERIES = ["q1", "q2"]
DOCS = ["d1", "d2", "d3"]


def _contracts() -> list[dict]:
    with open(REPO / "pyproject.toml", "rb") as handle:
        return list(tomllib.load(handle)["tool"]["importlinter"]["contracts"])


def test_collect_sits_between_grading_and_the_sandbox_in_the_layer_contract() -> None:
    layers = next(contract["layers"] for contract in _contracts() if contract["type"] == "layers")
    position = {name: number for number, layer in enumerate(layers) for name in layer.replace("(", "").replace(")", "").split(" | ")}
    assert position["grader.grading"] < position["grader.collect"] < position["grader.sandbox"]


def test_check_is_forbidden_to_import_the_sandbox() -> None:
    forbidden = [contract for contract in _contracts() if contract["type"] == "forbidden"]
    assert any(c["source_modules"] == ["grader.check"] and c["forbidden_modules"] == ["grader.sandbox"] for c in forbidden), forbidden


def _run_line(query: str, *docs: str) -> str:
    return json.dumps({"query_id": query, "hits": [{"id": d, "score": 1.0 - i / 10} for i, d in enumerate(docs)]}) + "\n"


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _collect(folder: Path, mode: str) -> object:
    return collect_outputs(folder, mode=mode, query_ids=QUERIES, doc_ids=DOCS, top_k=10, max_bytes=1 << 20)


def test_grading_collects_a_run_from_the_output_folder(tmp_path: Path) -> None:
    (tmp_path / "run.jsonl").write_text(_run_line("q1", "d1", "d2") + _run_line("q2", "d3"), encoding="utf-8")
    outputs = collect_outputs(tmp_path, mode="retrieve", query_ids=QUERIES, doc_ids=DOCS, top_k=10, max_bytes=1 << 20)
    assert outputs.run is not None and sorted(outputs.run.query_ids) == QUERIES
    assert outputs.query_vectors is None and outputs.encoding is None


def test_grading_collects_both_sides_of_an_encoding(tmp_path: Path) -> None:
    (tmp_path / "corpus.npy").write_bytes(_npy(np.ones((3, 4), dtype=np.float32)))
    (tmp_path / "queries.npy").write_bytes(_npy(np.zeros((2, 4), dtype=np.float32)))
    outputs = collect_outputs(tmp_path, mode="encode", query_ids=QUERIES, doc_ids=DOCS, top_k=10, max_bytes=1 << 20)
    assert outputs.run is None and outputs.encoding is None  # no encoding.json: informational only
    assert outputs.corpus_vectors is not None and outputs.corpus_vectors.shape == (3, 4)
    assert outputs.query_vectors is not None and outputs.query_vectors.shape == (2, 4)


@pytest.mark.parametrize(
    ("mode", "files", "code"),
    [
        ("retrieve", {}, FailureCode.OUTPUT_MISSING),
        ("retrieve", {"run.jsonl": b'{"query_id": "q9", "hits": []}\n'}, FailureCode.OUTPUT_INVALID),
        ("encode", {"corpus.npy": b"not numpy"}, FailureCode.OUTPUT_INVALID),
        ("translate", {}, FailureCode.IMAGE_INVALID),
    ],
    ids=["missing", "unknown query", "bad npy", "mode"],
)
def test_grading_stops_at_the_first_problem_with_its_code(tmp_path: Path, mode: str, files: dict[str, bytes], code: FailureCode) -> None:
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with pytest.raises(TaskFailure) as failure:
        collect_outputs(tmp_path, mode=mode, query_ids=QUERIES, doc_ids=DOCS, top_k=10, max_bytes=1 << 20)
    assert failure.value.code is code


def test_check_lists_every_problem_in_a_run(tmp_path: Path) -> None:
    (tmp_path / "run.jsonl").write_text('{"query_id": "q1", "hits": [{"id": "nope", "score": 1}]}\n{not json\n', encoding="utf-8")
    problems = output_problems(tmp_path, mode="retrieve", query_ids=QUERIES, doc_ids=DOCS, top_k=10, max_bytes=1 << 20)
    assert len(problems) == 3, problems
    assert problems[0].startswith("/output/run.jsonl:1: ") and "nope" in problems[0]
    assert problems[1].startswith("/output/run.jsonl:2: ")
    assert "answers 1 of 2 queries" in problems[2] and "q2" in problems[2]


def test_check_lists_a_problem_per_embedding_file(tmp_path: Path) -> None:
    (tmp_path / "corpus.npy").write_bytes(_npy(np.ones((2, 4), dtype=np.float32)))  # one row short
    problems = output_problems(tmp_path, mode="encode", query_ids=QUERIES, doc_ids=DOCS, top_k=10, max_bytes=1 << 20)
    assert len(problems) == 2
    assert "corpus.npy has shape (2, 4)" in problems[0] and "queries.npy was not written" in problems[1]
