"""Run file formats: TREC 6-column, JSON ``{qid: {docid: score}}`` and JSONL.

JSONL is the format containers write (``schemas/run.schema.json``, one query per
line) and is validated line by line with jsonschema. TREC files are read by
pyarrow's multi-threaded CSV parser when they are single-space separated, so a
53-million-line run never becomes Python objects; anything irregular, and any
file with an error, is re-read line by line so the error names its line.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from grader import jsonio
from grader.data.ids import id_problem
from grader.data.textfiles import open_text
from grader.data.trec_fields import C_SPACE, trec_fields
from grader.errors import RunFormatError
from grader.runs.rules import RunLineRules
from grader.runs.run import InvalidRun, Run
from grader.text import quote_id


class RunFormat(str, Enum):
    """Supported run formats; the value is the CLI spelling."""

    TREC = "trec"
    JSON = "json"
    JSONL = "jsonl"


def strict_json_loads(text: str) -> Any:
    """Strict JSON (:func:`grader.jsonio.loads`): no NaN/Infinity literals, no duplicate keys, bounded depth.

    Raises :class:`grader.jsonio.JsonError` (a ``ValueError``).
    """
    return jsonio.loads(text)


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
                    value = jsonio.loads(stripped)
                except jsonio.JsonError:
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

#: trec_eval's ``get_trec_results.c`` skips a run line whose first character after any blanks is this.
TREC_RUN_COMMENT = "#"


def is_trec_run_comment(line: str) -> bool:
    """Whether trec_eval skips ``line`` of a run as a comment: ``#`` after any blanks (``get_trec_results.c``)."""
    return line.lstrip(C_SPACE).startswith(TREC_RUN_COMMENT)


def read_trec_run(path: Path) -> Run:
    """Read ``qid Q0 docid rank score tag`` lines; rank, tag and any fields after the tag are ignored, as trec_eval does.

    trec_eval's ``get_trec_results.c``: "Any field following run_id is ignored"; blank
    lines and comment lines (first character after any blanks ``#``) are skipped. A
    line with fewer than six fields is an error naming its line, as in trec_eval. The
    fast reader takes only six-field lines; a file with more falls back to the line reader.
    """
    try:
        run = _read_trec_arrow(path)
    except _NeedsLineByLine:
        return _read_trec_lines(path)
    return run


class _NeedsLineByLine(Exception):
    """The fast reader cannot take this file, or found an error to locate."""


def _read_trec_arrow(path: Path) -> Run:
    """Read a single-space-separated TREC run with pyarrow, a piece of the file at a time.

    Only the query id, doc id and score columns are converted. Scores go straight
    into a growing float64 array and query ids into runs of lines; doc ids are
    held as strings only until a group of lines is complete, then
    dictionary-encoded in one pass together with the vocabulary so far, which
    yields int32 codes for the group and the extended vocabulary (first
    appearance over the file, as encoding the whole column at once would). Peak
    memory is the run's final arrays plus one group's doc id strings, not the
    whole file as a table.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        # Decompresses by extension (.gz, .bz2, .zst, .lz4), as pyarrow.csv.read_csv(path) does.
        stream = pa.input_stream(str(path))
        compressed = isinstance(stream, pa.CompressedInputStream)
        # A guess of the text's size, for the first allocation; a compressed run grows as needed.
        reader = _TrecPieces(path.stat().st_size * (6 if compressed else 1))
        with stream:
            while reader.read_piece(stream):
                pass
        reader.encode_pending_docs()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError, OSError):
        raise _NeedsLineByLine from None
    if reader.n_entries == 0:
        raise _NeedsLineByLine
    docs = reader.vocabulary
    query_ids, offsets, doc_codes, scores = reader.grouped_by_query()
    del reader
    # Arrow's allocator keeps freed pieces for reuse; none will come, so give them back.
    pa.default_memory_pool().release_unused()
    # Ids with a byte trec_eval splits fields at (C's isspace()) or id_problem refuses: the
    # line reader splits and reports them as trec_eval would (pyarrow splits at spaces only).
    if pc.any(pc.match_substring_regex(docs, "[\\x00\\t\\n\\v\\f\\r]")).as_py() or any(
        "\v" in query_id or "\f" in query_id for query_id in query_ids
    ):
        raise _NeedsLineByLine
    # Arrow orders strings byte-wise, which is trec_eval's strcmp order.
    doc_ranks = np.empty(len(docs), dtype=np.int64)
    doc_ranks[pc.sort_indices(docs).to_numpy()] = np.arange(len(docs), dtype=np.int64)
    doc_vocab = docs.to_pylist()
    del docs
    try:
        return Run.build(query_ids, offsets, doc_codes, doc_vocab, scores, doc_ranks=doc_ranks, doc_ids_checked=True, in_place=True)
    except InvalidRun:
        raise _NeedsLineByLine from None


# Bytes parsed at a time (by several threads, in blocks of _BLOCK_BYTES).
_PIECE_BYTES = 1 << 25
_BLOCK_BYTES = 1 << 23
# Lines whose doc ids are encoded together. Each encoding pass also re-reads the
# vocabulary so far, so larger groups waste less work on it; smaller groups hold
# fewer strings (about 13 bytes a line) at a time.
_GROUP_LINES = 1 << 23


def _fill(stream: Any, view: memoryview) -> int:
    """Read into ``view`` until it is full or the stream ends; the number of bytes read."""
    total = 0
    while total < len(view):
        count = stream.readinto(view[total:])
        if not count:
            break
        total += count
    return total


_HASH, _LF, _CR = ord("#"), ord("\n"), ord("\r")  # this reader's line ends, as pyarrow's: LF, CRLF and a lone CR
# trec_eval's blanks before a comment's '#': isspace() less the line ends.
_BLANK_BYTES = np.frombuffer(b" \t\v\f", dtype=np.uint8)


def _without_comment_lines(data: np.ndarray) -> bytes | None:
    """The bytes of ``data`` less the text of its comment lines (:func:`is_trec_run_comment`), or ``None`` if it has none.

    The comment lines' line ends stay, as blank lines, which the parser skips.

    Vectorised over the '#' bytes, which a run whose ids hold '#' has on every line:
    each walks back over blanks, and is a comment's if that reaches a line start.
    """
    hashes = np.flatnonzero(data == _HASH)
    starts = hashes.copy()  # where the blanks before each '#' begin
    walking = np.ones(len(starts), dtype=bool)
    while True:
        walking &= starts > 0
        walking[walking] = np.isin(data[starts[walking] - 1], _BLANK_BYTES)
        if not walking.any():
            break
        starts[walking] -= 1
    before = data[np.maximum(starts - 1, 0)]
    comment = (starts == 0) | (before == _LF) | (before == _CR)
    if not comment.any():
        return None
    starts, hashes = starts[comment], hashes[comment]
    # Each comment runs to the next line end, or to the end of the data (a last line without one).
    ends = np.append(np.flatnonzero((data == _LF) | (data == _CR)), len(data))
    stops = ends[np.searchsorted(ends, hashes)]
    kept_from = np.concatenate(([0], stops))
    kept_to = np.concatenate((starts, [len(data)]))
    text = data.data  # a memoryview: the slices below copy only once, into the join
    return b"".join(text[begin:end] for begin, end in zip(kept_from.tolist(), kept_to.tolist(), strict=True))


class _TrecPieces:
    """A TREC run read piece by piece into growing code and score arrays, a vocabulary and query runs."""

    def __init__(self, size_hint: int) -> None:
        self.size_hint = size_hint
        # Sized from the file and the first piece's line length, generously: pages of
        # an np.empty array that are never written never become resident.
        self.codes = np.empty(0, dtype=np.int32)
        self.scores = np.empty(0, dtype=np.float64)
        self.n_entries = 0
        self.bytes_read = 0
        self.vocabulary: Any = None  # pyarrow string array of the doc ids encoded so far
        self.pending_docs: list[Any] = []  # doc id arrays of lines n_encoded..n_entries
        self.n_encoded = 0
        # Query ids by first appearance, and where each run of lines of one query starts.
        self.query_index: dict[str, int] = {}
        self.run_starts: list[np.ndarray] = []
        self.run_queries: list[np.ndarray] = []
        self.buffer = bytearray(0)  # reused: Arrow copies what it parses out of it
        self.carry = 0  # bytes at the start of buffer: the unfinished last line of the previous piece

    def read_piece(self, stream: Any) -> bool:
        """Parse and absorb the next piece of whole lines; False once the file is consumed.

        One method, so that the parsed table and its columns are each freed as soon
        as they are used (a caller's variable would keep them alive).
        """
        import pyarrow as pa
        import pyarrow.csv as pacsv

        if not self.buffer:
            self.buffer = bytearray(min(_PIECE_BYTES, max(self.size_hint, 1 << 16)))
        buffer = self.buffer
        size = self.carry + _fill(stream, memoryview(buffer)[self.carry :])
        at_end = size < len(buffer)
        cut = size if at_end else buffer.rfind(b"\n", 0, size) + 1
        if cut == 0:
            if at_end:
                return False
            # No line end in a full buffer: a line longer than the buffer, so widen it.
            self.carry = size
            buffer.extend(bytes(len(buffer)))
            return True
        piece = pa.py_buffer(buffer)[:cut]
        if buffer.find(b"#", 0, cut) >= 0:  # a memchr: a run without any '#' pays nothing more
            uncommented = _without_comment_lines(np.frombuffer(buffer, dtype=np.uint8, count=cut))
            if uncommented is not None:
                piece = pa.py_buffer(uncommented)
        table = pacsv.read_csv(
            pa.BufferReader(piece),
            read_options=pacsv.ReadOptions(column_names=["qid", "q0", "docid", "rank", "score", "tag"], block_size=_BLOCK_BYTES),
            parse_options=pacsv.ParseOptions(
                delimiter=" ", quote_char=False, double_quote=False, escape_char=False, newlines_in_values=False, ignore_empty_lines=True
            ),
            convert_options=pacsv.ConvertOptions(
                include_columns=["qid", "docid", "score"],
                column_types={"qid": pa.string(), "docid": pa.string(), "score": pa.float64()},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
                null_values=[],
            ),
        )
        buffer[: size - cut] = buffer[cut:size]
        self.carry = size - cut
        self.bytes_read += cut
        n = table.num_rows
        if n == 0:  # a piece of blank and comment lines only
            return not at_end
        first = self.n_entries
        if first + n > len(self.codes):
            # Room for the rest of the file at 80% of the mean line length so far.
            rest = max(self.size_hint - self.bytes_read, self.bytes_read // 2) * (first + n) // max(self.bytes_read, 1)
            self._grow(first + n + rest + rest // 4 + 1024)
        self.pending_docs.extend(table.column("docid").chunks)
        self._add_queries(table.column("qid"), first)
        position = first
        for block in table.column("score").chunks:
            self.scores[position : position + len(block)] = block.to_numpy(zero_copy_only=False)
            position += len(block)
        del table
        self.n_entries += n
        if self.n_entries - self.n_encoded >= _GROUP_LINES:
            self.encode_pending_docs()
        return not at_end

    def _add_queries(self, column: Any, first: int) -> None:
        """Record the runs of lines of one query, with query codes by first appearance over the file."""
        import pyarrow.compute as pc

        queries = pc.dictionary_encode(column).combine_chunks()
        to_file_code = np.array([self.query_index.setdefault(name, len(self.query_index)) for name in queries.dictionary.to_pylist()], dtype=np.int64)
        local = queries.indices.to_numpy(zero_copy_only=False)
        starts = np.concatenate(([0], np.flatnonzero(local[1:] != local[:-1]) + 1))
        self.run_starts.append(starts + first)
        self.run_queries.append(to_file_code[local[starts]])

    def encode_pending_docs(self) -> None:
        """Encode the pending doc ids, after the vocabulary so far, into codes and a longer vocabulary."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not self.pending_docs:
            return
        known = self.vocabulary if self.vocabulary is not None else pa.array([], type=pa.string())
        # The known words come first and are distinct, so they keep their codes.
        encoded = pc.dictionary_encode(pa.chunked_array([known, *self.pending_docs], type=pa.string()))
        self.pending_docs = []
        if len(encoded.chunk(0).dictionary) > np.iinfo(np.int32).max:
            raise _NeedsLineByLine  # beyond int32 codes (billions of ids): not this reader's job
        new_codes = pa.chunked_array([chunk.indices for chunk in encoded.chunks]).slice(len(known))
        self.vocabulary = encoded.chunk(0).dictionary
        del encoded
        position = self.n_encoded
        for block in new_codes.chunks:
            self.codes[position : position + len(block)] = block.to_numpy(zero_copy_only=False)
            position += len(block)
        self.n_encoded = position

    def _grow(self, capacity: int) -> None:
        """Reallocate to ``capacity`` entries (uninitialised: ndarray.resize would zero, and so touch, them all)."""
        for name in ("codes", "scores"):
            old = getattr(self, name)
            new = np.empty(capacity, dtype=old.dtype)
            new[: self.n_entries] = old[: self.n_entries]
            setattr(self, name, new)

    def grouped_by_query(self) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """``(query_ids, offsets, codes, scores)``, entries grouped by query (stably), queries by first appearance."""
        n = self.n_entries
        codes, scores = self.codes, self.scores
        self.codes, self.scores = np.empty(0, dtype=np.int32), np.empty(0)
        # Shrinking is a realloc that gives the unused tail back, without copying.
        codes.resize(n, refcheck=False)
        scores.resize(n, refcheck=False)
        query_ids = list(self.query_index)
        starts = np.concatenate(self.run_starts)
        queries = np.concatenate(self.run_queries)
        # Join the two halves of a run split by a piece boundary.
        keep = np.ones(len(starts), dtype=bool)
        keep[1:] = queries[1:] != queries[:-1]
        starts, queries = starts[keep], queries[keep]
        lengths = np.diff(np.append(starts, n))
        offsets = np.zeros(len(query_ids) + 1, dtype=np.int64)
        np.cumsum(np.bincount(queries, weights=lengths, minlength=len(query_ids)).astype(np.int64), out=offsets[1:])
        if len(queries) != len(query_ids):
            # A query in several places: codes follow first appearance, so a stable
            # sort by query code keeps each query's lines in file order.
            order = np.argsort(np.repeat(queries, lengths), kind="stable")
            codes, scores = codes[order], scores[order]
        return query_ids, offsets, codes, scores


def _read_trec_lines(path: Path) -> Run:
    rankings: dict[str, dict[str, float]] = {}
    with open_text(path) as handle:
        try:
            for line_number, line in enumerate(handle, start=1):
                fields = trec_fields(line)
                # Split as trec_eval splits, the first field starts at its first non-blank: is_trec_run_comment(line).
                if not fields or fields[0][0] == TREC_RUN_COMMENT:
                    continue
                if len(fields) < 6:
                    raise RunFormatError(
                        f"expected 6 whitespace-separated fields (qid Q0 docid rank score tag; any after the tag are ignored), got {len(fields)}",
                        path=path,
                        line=line_number,
                    )
                # Fields after the run tag are ignored, as trec_eval's get_trec_results.c documents.
                query_id, _, doc_id, _, score_text = fields[:5]
                try:
                    score = float(score_text)
                except ValueError:
                    raise RunFormatError(f"score is not a number: {quote_id(score_text)}", path=path, line=line_number, field="score") from None
                if score != score or score in (float("inf"), float("-inf")):
                    raise RunFormatError(f"score must be finite, got {quote_id(score_text)}", path=path, line=line_number, field="score")
                docs = rankings.setdefault(query_id, {})
                if doc_id in docs:
                    raise RunFormatError(
                        f"document {quote_id(doc_id)} appears twice for query {quote_id(query_id)}", path=path, line=line_number, field="docid"
                    )
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
        field = problem.field if problem.doc_id is None else f"{problem.field} {quote_id(problem.doc_id)}"
        raise RunFormatError(f"query {quote_id(problem.query_id)}: {problem.what}", path=path, field=field) from None


# --- JSON -------------------------------------------------------------------


def read_json_run(path: Path) -> Run:
    """Read ``{"qid": {"docid": score, ...}, ...}`` (the shape BEIR's retrievers return)."""
    with open_text(path) as handle:
        try:
            # The shape checks below prove depth 2 without a walk over millions of scores.
            data = jsonio.loads(handle.read(), max_depth=None)
        except jsonio.JsonError as error:
            error.raise_as(RunFormatError, path=path)
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


def iter_jsonl_run_records(lines: Iterable[str], path: Path, rules: RunLineRules | None = None) -> Iterator[tuple[int, str, list[dict[str, Any]]]]:
    """Like :func:`iter_jsonl_run_lines` over already-open text (``path`` names it in errors).

    Every line passes the schema rule; with ``rules``, every rule of :mod:`grader.runs.rules`
    (the first problem raises :class:`RunFormatError`).
    """
    schema = rules or RunLineRules()
    # Depth is proven by the structural check (a valid line has depth 3): lines are parsed without a depth walk.
    for line_number, record in jsonio.iter_objects(lines, path=path, error=RunFormatError, max_depth=None):
        problem = next(iter(schema.schema_problems(record, every=False)), None)
        if problem is None and rules is not None:
            problem = next(rules.problems(record), None)
        if problem is not None:
            raise RunFormatError(problem.message, path=path, line=line_number, field=problem.field or None)
        yield line_number, record["query_id"], record["hits"]


def read_jsonl_run(path: Path) -> Run:
    """Read a JSONL run (``{"query_id": ..., "hits": [{"id": ..., "score": ...}]}`` per line)."""
    with open_text(path) as handle:
        return jsonl_run_from_lines(handle, path)


def jsonl_run_from_lines(
    lines: Iterable[str],
    path: Path,
    *,
    max_hits: int | None = None,
    known_queries: Collection[str] | None = None,
    known_docs: Collection[str] | None = None,
) -> Run:
    """Build a :class:`Run` from JSONL run lines, stopping at the first broken rule (:mod:`grader.runs.rules`).

    ``max_hits`` bounds each query's list; ``known_queries`` and ``known_docs``, when given, are the only ids allowed.
    """
    rules = RunLineRules(max_hits=max_hits, known_queries=known_queries, known_docs=known_docs)
    rankings: dict[str, dict[str, float]] = {}
    for _, query_id, hits in iter_jsonl_run_records(lines, path, rules):
        rankings[query_id] = {hit["id"]: float(hit["score"]) for hit in hits}
    return _build(rankings, path)
