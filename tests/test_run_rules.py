"""The run-validation rules: one list (grader/runs/rules.py), and both modes agree on every rule.

First-error mode: ``jsonl_run_from_lines`` (``grader score``, and grading through
``read_run_output``). All-errors mode: ``validate_run_file`` (``grader check``).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from grader.collect.outputs import read_run_output
from grader.collect.validate import validate_run_file
from grader.errors import RunFormatError, TaskFailure
from grader.runs.readers import jsonl_run_from_lines
from grader.runs.rules import RULES

QUERIES = ("q1", "q2", "q\t3")
DOCS = ("d1", "d2", "d3", "d\t4")
TOP_K = 2


def line(query_id: str, *doc_ids: str) -> str:
    return json.dumps({"query_id": query_id, "hits": [{"id": d, "score": 1.0 / (i + 1)} for i, d in enumerate(doc_ids)]})


VALID = line("q1", "d1", "d2")

#: rule -> (run text breaking that rule alone, on its last line; the expected "field: message")
CASES = {
    "json": (VALID + "\n{not json\n", "invalid JSON: Expecting property name enclosed in double quotes (column 2)"),
    "schema": (VALID + '\n{"query_id": "q2", "hits": [{"id": "d1"}]}\n', "/hits/0: 'score' is a required property"),
    "hit-count": (VALID + "\n" + line("q2", "d1", "d2", "d3") + "\n", "/hits: 3 hits, more than the 2 asked for"),
    "query-id-valid": (VALID + "\n" + line("q\t3", "d1") + "\n", "/query_id: identifier must not contain NUL, tab or line breaks"),
    "query-known": (VALID + "\n" + line("q9", "d1") + "\n", "/query_id: 'q9' is not one of the staged queries"),
    "query-once": (VALID + "\n" + line("q1", "d3") + "\n", "/query_id: query 'q1' appears on two lines"),
    "doc-id-valid": (VALID + "\n" + line("q2", "d\t4") + "\n", "/hits/0/id: identifier must not contain NUL, tab or line breaks"),
    "doc-known": (VALID + "\n" + line("q2", "d1", "d9") + "\n", "/hits/1/id: document 'd9' is not in the corpus"),
    "doc-once": (VALID + "\n" + line("q2", "d3", "d3") + "\n", "/hits/1/id: document 'd3' appears twice"),
}


def test_every_rule_has_a_case() -> None:
    assert set(CASES) == set(RULES)


def first_mode(path: Path, text: str) -> str:
    with pytest.raises(RunFormatError) as caught:
        jsonl_run_from_lines(io.StringIO(text), path, max_hits=TOP_K, known_queries=frozenset(QUERIES), known_docs=frozenset(DOCS))
    return str(caught.value)


@pytest.mark.parametrize("rule", list(CASES))
def test_both_modes_report_the_same_problem(rule: str, tmp_path: Path) -> None:
    text, expected = CASES[rule]
    path = tmp_path / "run.jsonl"
    path.write_text(text, encoding="utf-8")
    where = f"{path}:2: "
    assert first_mode(path, text) == where + expected
    every = validate_run_file(path, query_ids=QUERIES, doc_ids=DOCS, top_k=TOP_K, label=str(path))
    assert every.errors == [where + expected]
    # Grading reads a container's run through the first mode: the same words, as the task's failure.
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "run.jsonl").write_text(text, encoding="utf-8")
    with pytest.raises(TaskFailure) as failure:
        read_run_output(tmp_path / "out", query_ids=QUERIES, doc_ids=DOCS, top_k=TOP_K, max_bytes=1 << 20)
    assert failure.value.code == "OUTPUT_INVALID" and str(failure.value).endswith(f"/output/run.jsonl:2: {expected}")


def test_all_mode_collects_every_problem_and_the_first_is_the_first_modes(tmp_path: Path) -> None:
    text = "\n".join([line("q9", "d1", "d1"), line("q1", "d1", "d2", "d3"), '{"query_id": 3, "hits": []}']) + "\n"
    path = tmp_path / "run.jsonl"
    path.write_text(text, encoding="utf-8")
    every = validate_run_file(path, query_ids=QUERIES, doc_ids=DOCS, top_k=TOP_K, label=str(path))
    assert every.errors == [
        f"{path}:1: /query_id: 'q9' is not one of the staged queries",
        f"{path}:1: /hits/1/id: document 'd1' appears twice",
        f"{path}:2: /hits: 3 hits, more than the 2 asked for",
        f"{path}:3: /query_id: 3 is not of type 'string'",
    ]
    assert first_mode(path, text) == every.errors[0]
    assert every.answered == {"q9", "q1"}


def test_without_known_ids_the_score_reader_applies_the_other_rules(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    run = jsonl_run_from_lines(io.StringIO(line("q9", "d9") + "\n"), path)
    assert run.query_ids == ("q9",)
    with pytest.raises(RunFormatError, match="appears on two lines"):
        jsonl_run_from_lines(io.StringIO(line("q9", "d9") + "\n" + line("q9", "d1") + "\n"), path)
