"""The run-validation rules, one list, for both modes.

Grading and ``grader score`` stop at the first problem of a JSONL run
(:func:`grader.runs.readers.jsonl_run_from_lines`); ``grader check`` wants every
problem, each with its line and JSON pointer (:func:`grader.collect.validate.validate_run_file`).
Both walk the lines through :class:`RunLineRules`; the first mode takes the
first problem a line has, the second takes them all. A test checks that the two
modes report the same problem for every rule.

The rules, in the order they are applied to a line:

1. the line is JSON (strict: :mod:`grader.jsonio`) and satisfies ``run.schema.json``
   (checked fast by :func:`grader.runs.line_check.is_valid_run_line`, quoted from jsonschema when it fails);
2. ``/hits``: no more hits than asked for (``max_hits``, the task's top-k);
3. ``/query_id``: a valid id (:func:`grader.data.ids.id_problem`);
4. ``/query_id``: one of the queries staged (when they are known);
5. ``/query_id``: not on two lines;
6. ``/hits/N/id``: a valid id;
7. ``/hits/N/id``: a document of the corpus (when it is known);
8. ``/hits/N/id``: not twice in one ranking.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

from grader import jsonio
from grader.data.ids import id_problem
from grader.runs.line_check import is_valid_run_line
from grader.schemas import first_error, json_pointer, validator
from grader.text import quote_id

#: the rule names, in the order above (``Problem.rule``)
RULES = (
    "json",
    "schema",
    "hit-count",
    "query-id-valid",
    "query-known",
    "query-once",
    "doc-id-valid",
    "doc-known",
    "doc-once",
)


@dataclass(frozen=True)
class Problem:
    """One broken rule on one line: ``field`` is a JSON pointer ("" when the whole line is at fault)."""

    rule: str
    field: str
    message: str

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise AssertionError(f"unknown run rule {self.rule!r}")


@dataclass
class RunLineRules:
    """The rules, with what they need to know: the staged ids, the hit bound, and the queries seen so far."""

    max_hits: int | None = None
    known_queries: Collection[str] | None = None
    known_docs: Collection[str] | None = None
    seen_queries: set[str] = field(default_factory=set)

    def schema_problems(self, record: Any, *, every: bool) -> list[Problem]:
        """Rule 1 (schema): none when the line is valid; the most relevant one, or ``every`` one, otherwise."""
        if is_valid_run_line(record):
            return []
        try:
            jsonio.check_depth(record)  # the structural check proves depth on valid lines; walk the others first
        except jsonio.JsonError as failure:
            return [Problem("json", "", failure.what)]
        if every:
            errors = sorted(validator("run").iter_errors(record), key=lambda e: [str(p) for p in e.absolute_path])
        else:
            error = first_error("run", record)
            errors = [] if error is None else [error]
        return [Problem("schema", json_pointer(e), e.message) for e in errors]

    def problems(self, record: dict[str, Any]) -> Iterator[Problem]:
        """Rules 2-8 on a schema-valid line, in order; the line's query counts as seen once its query rules ran."""
        query_id: str = record["query_id"]
        hits: list[dict[str, Any]] = record["hits"]
        if self.max_hits is not None and len(hits) > self.max_hits:
            yield Problem("hit-count", "/hits", f"{len(hits)} hits, more than the {self.max_hits} asked for")
        problem = id_problem(query_id)
        if problem:
            yield Problem("query-id-valid", "/query_id", problem)
        if self.known_queries is not None and query_id not in self.known_queries:
            yield Problem("query-known", "/query_id", f"{quote_id(query_id)} is not one of the staged queries")
        elif query_id in self.seen_queries:
            yield Problem("query-once", "/query_id", f"query {quote_id(query_id)} appears on two lines")
        self.seen_queries.add(query_id)
        seen_docs: set[str] = set()
        for position, hit in enumerate(hits):
            doc_id = hit["id"]
            where = f"/hits/{position}/id"
            problem = id_problem(doc_id)
            if problem:
                yield Problem("doc-id-valid", where, problem)
            if self.known_docs is not None and doc_id not in self.known_docs:
                yield Problem("doc-known", where, f"document {quote_id(doc_id)} is not in the corpus")
            if doc_id in seen_docs:
                yield Problem("doc-once", where, f"document {quote_id(doc_id)} appears twice")
            seen_docs.add(doc_id)
