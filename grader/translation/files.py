"""The files ``grader score-translation`` reads.

* **predictions**: JSONL, one ``{"query_id": str, "prediction": str}`` per line
  (``grader/schemas/predictions.schema.json``; the ``translate`` mode's
  ``/output/predictions.jsonl``). Each line is schema-validated; NaN literals,
  repeated keys and repeated query ids are errors (:class:`RunFormatError`).
* **references**: JSONL, one ``{"query_id": str, "reference": str}`` per line;
  other keys are ignored. Query ids are unique and every reference has at
  least one token (:class:`DataError`).
* **training targets** (CrystalBLEU's n-gram statistics): a text file with one
  target per line (blank lines skipped), or, for a name ending in ``.jsonl``
  (``.jsonl.gz``), JSONL with a ``reference`` string per line.

Every error names ``file:line: field``. ``.gz`` files are read transparently.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jsonschema

from grader import jsonio
from grader.data.ids import id_problem
from grader.data.textfiles import iter_jsonl, open_text, require_string
from grader.errors import DataError, RunFormatError
from grader.schemas import first_error, json_pointer


def _error_field(error: jsonschema.ValidationError) -> str:
    """The JSON pointer an error is about; for a missing property, that property's."""
    pointer = json_pointer(error)
    if error.validator == "required" and isinstance(error.message, str) and error.message.startswith("'"):
        missing = error.message.split("'")[1]
        pointer = pointer.rstrip("/") + "/" + missing
    return pointer


def read_predictions(path: str | Path) -> dict[str, tuple[int, str]]:
    """Query id -> ``(line, prediction text)`` of a predictions JSONL file."""
    path = Path(path)
    if not path.is_file():
        raise RunFormatError("predictions file not found", path=path)
    predictions: dict[str, tuple[int, str]] = {}
    with open_text(path) as handle:
        try:
            for line_number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = jsonio.loads(line)
                except jsonio.JsonError as failure:
                    failure.raise_as(RunFormatError, path=path, line=line_number)
                error = first_error("predictions", record)
                if error is not None:
                    raise RunFormatError(error.message, path=path, line=line_number, field=_error_field(error))
                query_id = record["query_id"]
                problem = id_problem(query_id)
                if problem:
                    raise RunFormatError(problem, path=path, line=line_number, field="/query_id")
                if query_id in predictions:
                    first = predictions[query_id][0]
                    raise RunFormatError(
                        f"query {query_id!r} is predicted twice (first on line {first})", path=path, line=line_number, field="/query_id"
                    )
                predictions[query_id] = (line_number, record["prediction"])
        except UnicodeDecodeError as exc:
            raise RunFormatError(f"not UTF-8 text: {exc.reason}", path=path) from None
    return predictions


def read_references(path: str | Path) -> dict[str, str]:
    """Query id -> reference text of a references JSONL file, in file order."""
    path = Path(path)
    if not path.is_file():
        raise DataError("references file not found", path=path)
    references: dict[str, str] = {}
    lines: dict[str, int] = {}
    for line, record in iter_jsonl(path):
        query_id = require_string(record, "query_id", path=path, line=line)
        problem = id_problem(query_id)
        if problem:
            raise DataError(problem, path=path, line=line, field="query_id")
        if query_id in references:
            raise DataError(f"query {query_id!r} has two references (first on line {lines[query_id]})", path=path, line=line, field="query_id")
        reference = require_string(record, "reference", path=path, line=line)
        if not reference.split():
            raise DataError("reference has no tokens", path=path, line=line, field="reference")
        references[query_id] = reference
        lines[query_id] = line
    if not references:
        raise DataError("no references in the file", path=path)
    return references


def iter_train_targets(path: str | Path) -> Iterator[str]:
    """The training targets of ``path``: text lines, or ``reference`` values of a ``.jsonl`` file."""
    path = Path(path)
    if not path.is_file():
        raise DataError("training targets file not found", path=path)
    if path.name.lower().removesuffix(".gz").endswith(".jsonl"):
        for line, record in iter_jsonl(path):
            yield require_string(record, "reference", path=path, line=line)
        return
    with open_text(path) as handle:
        try:
            for text in handle:
                if text.strip():
                    yield text
        except UnicodeDecodeError as exc:
            raise DataError(f"not UTF-8 text: {exc.reason}", path=path) from None
