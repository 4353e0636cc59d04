"""Run file formats: TREC 6-column, JSON ``{qid: {docid: score}}`` and JSONL.

JSONL is the format containers write (``schemas/run.schema.json``, one query per
line) and is validated line by line with jsonschema. TREC files are read by
pyarrow's multi-threaded CSV parser when they are single-space separated, so a
53-million-line run never becomes Python objects; anything irregular, and any
file with an error, is re-read line by line so the error names its line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from grader.data.ids import id_problem
from grader.data.textfiles import open_text
from grader.errors import RunFormatError
from grader.runs.run import InvalidRun, Run
from grader.schemas import first_error, json_pointer


class RunFormat(str, Enum):
    """Supported run formats; the value is the CLI spelling."""

    TREC = "trec"
    JSON = "json"
    JSONL = "jsonl"


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a valid score (scores must be finite numbers)")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"key {key!r} appears twice in one object")
        result[key] = value
    return result


def strict_json_loads(text: str) -> Any:
    """``json.loads`` that rejects NaN/Infinity literals and duplicate keys."""
    return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_pairs)


def detect_format(path: Path) -> RunFormat:
    """Guess a run's format from its name, then its first non-blank line."""
    name = path.name.lower().removesuffix(".gz")
    if name.endswith(".jsonl"):
        return RunFormat.JSONL
    if name.endswith(".json"):
        return RunFormat.JSON
    with open_text(path) as handle:
        try:
            for line in handle:
                stripped = line.strip()
                if not stripped:
                    continue
                if not stripped.startswith("{"):
                    return RunFormat.TREC
                try:
                    value = json.loads(stripped)
                except json.JSONDecodeError:
                    return RunFormat.JSON  # a multi-line JSON document
                return RunFormat.JSONL if isinstance(value, dict) and "query_id" in value else RunFormat.JSON
        except UnicodeDecodeError as exc:
            raise RunFormatError(f"unreadable: {exc}", path=path) from None
    raise RunFormatError("run file is empty", path=path)


def read_run(path: str | Path, fmt: RunFormat | None = None) -> Run:
    """Read a run file in ``fmt`` (detected when ``None``) into a validated :class:`Run`."""
    path = Path(path)
    if not path.is_file():
        raise RunFormatError("run file not found", path=path)
    fmt = fmt or detect_format(path)
    if fmt is RunFormat.TREC:
        return read_trec_run(path)
    if fmt is RunFormat.JSON:
        return read_json_run(path)
    if fmt is RunFormat.JSONL:
        return read_jsonl_run(path)
    raise AssertionError(fmt)  # pragma: no cover - exhaustive over RunFormat


# --- TREC -------------------------------------------------------------------


def read_trec_run(path: Path) -> Run:
    """Read ``qid Q0 docid rank score tag`` lines; rank and tag are ignored, as trec_eval does."""
    try:
        run = _read_trec_arrow(path)
    except _NeedsLineByLine:
        return _read_trec_lines(path)
    return run


class _NeedsLineByLine(Exception):
    """The fast reader cannot take this file, or found an error to locate."""


def _read_trec_arrow(path: Path) -> Run:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    names = ["qid", "q0", "docid", "rank", "score", "tag"]
    try:
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(column_names=names, block_size=1 << 24),
            parse_options=pacsv.ParseOptions(delimiter=" ", quote_char=False, double_quote=False, escape_char=False, newlines_in_values=False, ignore_empty_lines=True),
            convert_options=pacsv.ConvertOptions(
                include_columns=["qid", "docid", "score"],
                column_types={"qid": pa.string(), "docid": pa.string(), "score": pa.float64()},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
                null_values=[],
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError, OSError):
        raise _NeedsLineByLine from None
    if table.num_rows == 0:
        raise _NeedsLineByLine
    queries = pc.dictionary_encode(table.column("qid")).combine_chunks()
    query_codes = queries.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    query_ids = queries.dictionary.to_pylist()
    docs = pc.dictionary_encode(table.column("docid")).combine_chunks()
    doc_codes = docs.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    if pc.any(pc.match_substring_regex(docs.dictionary, "[\\x00\\t\\r\\n]")).as_py():
        raise _NeedsLineByLine
    # Arrow orders strings byte-wise, which is trec_eval's strcmp order.
    doc_ranks = np.empty(len(docs.dictionary), dtype=np.int64)
    doc_ranks[pc.sort_indices(docs.dictionary).to_numpy()] = np.arange(len(docs.dictionary), dtype=np.int64)
    doc_vocab = docs.dictionary.to_pylist()
    scores = table.column("score").to_numpy()
    del table, queries, docs
    # Codes follow first appearance, so a file grouped by query is already non-decreasing.
    if len(query_codes) > 1 and np.any(query_codes[1:] < query_codes[:-1]):
        order = np.argsort(query_codes, kind="stable")
        query_codes, doc_codes, scores = query_codes[order], doc_codes[order], scores[order]
    offsets = np.zeros(len(query_ids) + 1, dtype=np.int64)
    np.cumsum(np.bincount(query_codes, minlength=len(query_ids)), out=offsets[1:])
    try:
        return Run.build(query_ids, offsets, doc_codes, doc_vocab, scores, doc_ranks=doc_ranks, doc_ids_checked=True)
    except InvalidRun:
        raise _NeedsLineByLine from None


def _read_trec_lines(path: Path) -> Run:
    rankings: dict[str, dict[str, float]] = {}
    with open_text(path) as handle:
        try:
            for line_number, line in enumerate(handle, start=1):
                fields = line.split()
                if not fields:
                    continue
                if len(fields) != 6:
                    raise RunFormatError(f"expected 6 whitespace-separated fields (qid Q0 docid rank score tag), got {len(fields)}", path=path, line=line_number)
                query_id, _, doc_id, _, score_text, _ = fields
                try:
                    score = float(score_text)
                except ValueError:
                    raise RunFormatError(f"score is not a number: {score_text!r}", path=path, line=line_number, field="score") from None
                if score != score or score in (float("inf"), float("-inf")):
                    raise RunFormatError(f"score must be finite, got {score_text!r}", path=path, line=line_number, field="score")
                docs = rankings.setdefault(query_id, {})
                if doc_id in docs:
                    raise RunFormatError(f"document {doc_id!r} appears twice for query {query_id!r}", path=path, line=line_number, field="docid")
                docs[doc_id] = score
        except UnicodeDecodeError as exc:
            raise RunFormatError(f"not UTF-8 text: {exc.reason}", path=path) from None
    if not rankings:
        raise RunFormatError("run file has no entries", path=path)
    return _build(rankings, path)


def _build(rankings: dict[str, dict[str, float]], path: Path) -> Run:
    try:
        return Run.from_mapping(rankings)
    except InvalidRun as error:
        problem = error.problem
        field = problem.field if problem.doc_id is None else f"{problem.field} {problem.doc_id!r}"
        raise RunFormatError(f"query {problem.query_id!r}: {problem.what}", path=path, field=field) from None


# --- JSON -------------------------------------------------------------------


def read_json_run(path: Path) -> Run:
    """Read ``{"qid": {"docid": score, ...}, ...}`` (the shape BEIR's retrievers return)."""
    with open_text(path) as handle:
        try:
            data = strict_json_loads(handle.read())
        except json.JSONDecodeError as exc:
            raise RunFormatError(f"invalid JSON: {exc.msg}", path=path, line=exc.lineno) from None
        except ValueError as exc:
            raise RunFormatError(str(exc), path=path) from None
        except UnicodeDecodeError as exc:
            raise RunFormatError(f"not UTF-8 text: {exc.reason}", path=path) from None
    if not isinstance(data, dict):
        raise RunFormatError("expected a JSON object mapping query ids to {doc id: score}", path=path)
    for query_id, docs in data.items():
        problem = id_problem(query_id)
        if problem:
            raise RunFormatError(problem, path=path, field=f"/{query_id}")
        if not isinstance(docs, dict):
            raise RunFormatError("expected an object {doc id: score}", path=path, field=f"/{query_id}")
        for doc_id, score in docs.items():
            if isinstance(score, bool) or not isinstance(score, (int, float)):
                raise RunFormatError(f"score must be a number, got {type(score).__name__}", path=path, field=f"/{query_id}/{doc_id}")
    return _build(data, path)


# --- JSONL ------------------------------------------------------------------


def iter_jsonl_run_lines(path: Path) -> Iterator[tuple[int, str, list[dict[str, Any]]]]:
    """Yield ``(line, query_id, hits)`` of a JSONL run, each line schema-validated."""
    with open_text(path) as handle:
        yield from iter_jsonl_run_records(handle, path)


def iter_jsonl_run_records(lines: Iterable[str], path: Path) -> Iterator[tuple[int, str, list[dict[str, Any]]]]:
    """Like :func:`iter_jsonl_run_lines` over already-open text (``path`` names it in errors)."""
    try:
        for line_number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = strict_json_loads(line)
            except json.JSONDecodeError as exc:
                raise RunFormatError(f"invalid JSON: {exc.msg} (column {exc.colno})", path=path, line=line_number) from None
            except ValueError as exc:
                raise RunFormatError(str(exc), path=path, line=line_number) from None
            error = first_error("run", record)
            if error is not None:
                raise RunFormatError(error.message, path=path, line=line_number, field=json_pointer(error))
            yield line_number, record["query_id"], record["hits"]
    except UnicodeDecodeError as exc:
        raise RunFormatError(f"not UTF-8 text: {exc.reason}", path=path) from None


def read_jsonl_run(path: Path) -> Run:
    """Read a JSONL run (``{"query_id": ..., "hits": [{"id": ..., "score": ...}]}`` per line)."""
    with open_text(path) as handle:
        return jsonl_run_from_lines(handle, path)


def jsonl_run_from_lines(lines: Iterable[str], path: Path, *, max_hits: int | None = None) -> Run:
    """Build a :class:`Run` from JSONL run lines; ``max_hits`` bounds each query's list."""
    rankings: dict[str, dict[str, float]] = {}
    for line_number, query_id, hits in iter_jsonl_run_records(lines, path):
        if max_hits is not None and len(hits) > max_hits:
            raise RunFormatError(f"{len(hits)} hits, more than the {max_hits} asked for", path=path, line=line_number, field="/hits")
        problem = id_problem(query_id)
        if problem:
            raise RunFormatError(problem, path=path, line=line_number, field="/query_id")
        if query_id in rankings:
            raise RunFormatError(f"query {query_id!r} appears on two lines", path=path, line=line_number, field="/query_id")
        docs: dict[str, float] = {}
        for position, hit in enumerate(hits):
            doc_id = hit["id"]
            problem = id_problem(doc_id)
            if problem:
                raise RunFormatError(problem, path=path, line=line_number, field=f"/hits/{position}/id")
            if doc_id in docs:
                raise RunFormatError(f"document {doc_id!r} appears twice", path=path, line=line_number, field=f"/hits/{position}/id")
            docs[doc_id] = float(hit["score"])
        rankings[query_id] = docs
    return _build(rankings, path)
