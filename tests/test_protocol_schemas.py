"""The schemas the documents name exist, and the ``/input/task.json`` the grader stages obeys its own (docs/protocol.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader import jsonio
from grader.data.task import Document, Query
from grader.sandbox.blinding import BlindingKey
from grader.sandbox.staging import stage_task
from grader.schemas import first_error

REPO = Path(__file__).resolve().parent.parent
NAMED = re.compile(r"schemas/([a-z0-9-]+)\.schema\.json")


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_every_schema_a_document_names_exists() -> None:
    named = {(path.name, name) for path in documents() for name in NAMED.findall(path.read_text(encoding="utf-8"))}
    assert ("protocol.md", "task-input") in named
    missing = sorted((doc, name) for doc, name in named if not (REPO / "grader" / "schemas" / f"{name}.schema.json").is_file())
    assert not missing, missing


@pytest.mark.parametrize("mode", ["retrieve", "encode"])
def test_staged_task_json_obeys_the_task_input_schema(tmp_path: Path, mode: str) -> None:
    staged = stage_task(
        tmp_path / "input",
        task="text2code",
        split="test",
        mode=mode,
        top_k=1000,
        queries=[Query("q2", "second"), Query("q1", "first")],
        documents=[Document("d1", "", "x = 1")],
        query_prefix="query: ",
        key=BlindingKey(bytes(range(32))),
    )
    written = jsonio.load_file(staged.folder / "task.json")
    assert first_error("task-input", written) is None
    assert (written["queries"], written["documents"], written["mode"]) == (2, 1, mode)


def test_the_documented_example_obeys_the_schema_and_a_wrong_one_does_not() -> None:
    line = next(row for row in (REPO / "docs" / "protocol.md").read_text(encoding="utf-8").splitlines() if row.startswith("| `/input/task.json`"))
    example = jsonio.loads(re.search(r"`(\{.*?\})`", line)[1])  # type: ignore[index]
    assert first_error("task-input", example) is None
    assert first_error("task-input", {**example, "mode": "translate"}) is not None
    assert first_error("task-input", {**example, "extra": 1}) is not None
