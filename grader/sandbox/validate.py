"""Exhaustive validation of a run a container wrote: every problem, not just the first.

Grading stops at the first problem; ``grader check`` wants them all, each with
its line and JSON pointer, so a participant can fix a file in one pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grader.runs.line_check import is_valid_run_line
from grader import jsonio
from grader.schemas import json_pointer, validator


@dataclass
class RunValidation:
    """Problems found in a run file, and how it covers the staged queries."""

    errors: list[str] = field(default_factory=list)
    answered: set[str] = field(default_factory=set)
    lines: int = 0

    def missing(self, query_ids: Sequence[str]) -> list[str]:
        """Staged queries the run has no line for."""
        return [q for q in query_ids if q not in self.answered]


def validate_run_file(path: Path, *, query_ids: Sequence[str], doc_ids: Sequence[str], top_k: int, label: str = "/output/run.jsonl") -> RunValidation:
    """Check every line of a JSONL run: JSON, schema, known and unique ids, hit count."""
    result = RunValidation()
    known_queries = set(query_ids)
    known_docs = set(doc_ids)
    schema = validator("run")
    try:
        handle = open(path, encoding="utf-8", errors="strict")
    except FileNotFoundError:
        result.errors.append(f"{label}: was not written (OUTPUT_MISSING)")
        return result
    with handle:
        try:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                result.lines += 1
                where = f"{label}:{number}"
                try:
                    record = jsonio.loads(line)
                except jsonio.JsonError as exc:
                    result.errors.append(f"{where}: {exc.what}" + (f" (column {exc.column})" if exc.column else ""))
                    continue
                schema_errors = [] if is_valid_run_line(record) else sorted(schema.iter_errors(record), key=lambda e: [str(p) for p in e.absolute_path])
                if schema_errors:
                    result.errors.extend(f"{where}: {json_pointer(e)}: {e.message}" for e in schema_errors)
                    continue
                query_id = record["query_id"]
                if query_id not in known_queries:
                    result.errors.append(f"{where}: /query_id: {query_id!r} is not one of the staged queries")
                elif query_id in result.answered:
                    result.errors.append(f"{where}: /query_id: query {query_id!r} appears on two lines")
                result.answered.add(query_id)
                hits = record["hits"]
                if len(hits) > top_k:
                    result.errors.append(f"{where}: /hits: {len(hits)} hits, more than the {top_k} asked for")
                seen: set[str] = set()
                for position, hit in enumerate(hits):
                    doc_id = hit["id"]
                    if doc_id not in known_docs:
                        result.errors.append(f"{where}: /hits/{position}/id: document {doc_id!r} is not in the corpus")
                    if doc_id in seen:
                        result.errors.append(f"{where}: /hits/{position}/id: document {doc_id!r} appears twice")
                    seen.add(doc_id)
        except UnicodeDecodeError as exc:
            result.errors.append(f"{label}: not UTF-8 text: {exc.reason}")
    return result
