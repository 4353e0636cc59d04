"""Exhaustive validation of a run a container wrote: every problem, not just the first.

Grading stops at the first problem; ``grader check`` wants them all, each with
its line and JSON pointer, so a participant can fix a file in one pass. The
rules are those of :mod:`grader.runs.rules`, the ones grading applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grader import jsonio
from grader.collect.outputs import read_embeddings_output
from grader.errors import TaskFailure
from grader.runs.rules import RunLineRules


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
    rules = RunLineRules(max_hits=top_k, known_queries=frozenset(query_ids), known_docs=frozenset(doc_ids))
    try:
        handle = open(path, encoding="utf-8", errors="strict")  # noqa: SIM115 - closed by the `with` below; opened first to tell a missing file apart
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
                problems = rules.schema_problems(record, every=True)
                if not problems:
                    problems = list(rules.problems(record))
                    result.answered.add(record["query_id"])
                result.errors.extend(
                    f"{where}: {problem.field}: {problem.message}" if problem.field else f"{where}: {problem.message}" for problem in problems
                )
        except UnicodeDecodeError as exc:
            result.errors.append(f"{label}: not UTF-8 text: {exc.reason}")
    return result


def output_problems(folder: Path, *, mode: str, query_ids: Sequence[str], doc_ids: Sequence[str], top_k: int, max_bytes: int) -> list[str]:
    """Every problem in the outputs ``mode`` asks for in ``folder`` (a copy of a container's ``/output``)."""
    if mode == "retrieve":
        validation = validate_run_file(folder / "run.jsonl", query_ids=query_ids, doc_ids=doc_ids, top_k=top_k)
        problems = list(validation.errors)
        missing = validation.missing(query_ids) if validation.lines else []
        if missing:
            problems.append(
                f"/output/run.jsonl: answers {len(query_ids) - len(missing)} of {len(query_ids)} queries; missing ones (e.g. {missing[0]!r}) score 0 under the strict policy"
            )
        return problems
    problems = []
    for file_name, rows in (("corpus.npy", len(doc_ids)), ("queries.npy", len(query_ids))):
        try:
            read_embeddings_output(folder, file_name, rows=rows, max_bytes=max_bytes)
        except TaskFailure as failure:
            problems.append(failure.detail)
    return problems
