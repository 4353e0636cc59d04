"""Relevance judgements (qrels): reading BEIR TSV, TREC and JSON files.

Judgements are integers, as in trec_eval; a judgement <= 0 marks a document as
judged non-relevant. Each (query, document) pair may be judged once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from grader import jsonio
from grader.data.ids import id_problem
from grader.data.textfiles import iter_tsv, open_text
from grader.data.trec_fields import trec_fields
from grader.errors import DataError

BEIR_HEADER = ("query-id", "corpus-id", "score")

Judgements = dict[str, dict[str, int]]


class Qrels(Mapping[str, Mapping[str, int]]):
    """Relevance judgements: query id -> document id -> integer relevance."""

    def __init__(self, judgements: Mapping[str, Mapping[str, int]]) -> None:
        self._judgements: Judgements = {qid: dict(docs) for qid, docs in judgements.items()}

    def __getitem__(self, query_id: str) -> Mapping[str, int]:
        return self._judgements[query_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._judgements)

    def __len__(self) -> int:
        return len(self._judgements)

    def n_judgements(self) -> int:
        """Number of judged (query, document) pairs."""
        return sum(len(docs) for docs in self._judgements.values())

    def as_dict(self) -> Judgements:
        """A deep copy as plain dicts (the shape pytrec_eval takes)."""
        return {qid: dict(docs) for qid, docs in self._judgements.items()}


def _parse_relevance(text: str, *, path: Path, line: int, field: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise DataError(f"relevance must be an integer, got {text!r}", path=path, line=line, field=field) from None


def _add(judgements: Judgements, qid: str, did: str, rel: int, *, path: Path, line: int | None, fields: tuple[str, str]) -> None:
    for value, field in ((qid, fields[0]), (did, fields[1])):
        problem = id_problem(value)
        if problem:
            raise DataError(problem, path=path, line=line, field=field)
    docs = judgements.setdefault(qid, {})
    if did in docs:
        raise DataError(f"document {did!r} is judged twice for query {qid!r}", path=path, line=line, field=fields[1])
    docs[did] = rel


def read_beir_qrels(path: Path) -> Qrels:
    """Read a BEIR ``qrels/<split>.tsv`` file (header ``query-id	corpus-id	score``)."""
    judgements: Judgements = {}
    for line, fields in iter_tsv(path, header=BEIR_HEADER):
        if len(fields) != 3:
            raise DataError(f"expected 3 tab-separated fields, got {len(fields)}", path=path, line=line)
        qid, did, rel_text = fields
        rel = _parse_relevance(rel_text, path=path, line=line, field="score")
        _add(judgements, qid, did, rel, path=path, line=line, fields=("query-id", "corpus-id"))
    return Qrels(judgements)


#: A TREC qrels line whose first character is this is a comment (trec_eval's get_qrels.c skips it).
TREC_COMMENT = "#"


def read_trec_qrels(path: Path) -> Qrels:
    """Read a TREC qrels file: ``query-id iteration doc-id relevance`` per line.

    As trec_eval's ``get_qrels.c`` does, a line whose first character is ``#`` is a
    comment and skipped (a ``#`` anywhere else is data: ``CR#93E-1860`` is a doc id);
    the iteration field is read and ignored. Unlike trec_eval 10, blank lines are skipped
    too (it calls them malformed), and so is the second of two comment lines in a row
    (it reads that one as data, and crashes on a comment as the last line): accidents of
    its parser, not rules (docs/inputs.md). Every other line must have exactly four
    fields, split where trec_eval splits (:func:`grader.data.trec_fields.trec_fields`).
    """
    judgements: Judgements = {}
    with open_text(path) as handle:
        for line, text in enumerate(handle, start=1):
            if text.startswith(TREC_COMMENT):
                continue
            fields = trec_fields(text)
            if not fields:
                continue
            if len(fields) != 4:
                raise DataError(f"expected 4 whitespace-separated fields (query iter doc rel), got {len(fields)}", path=path, line=line)
            rel = _parse_relevance(fields[3], path=path, line=line, field="relevance")
            _add(judgements, fields[0], fields[2], rel, path=path, line=line, fields=("query-id", "doc-id"))
    return Qrels(judgements)


def read_json_qrels(path: Path) -> Qrels:
    """Read a JSON qrels file ``{"query-id": {"doc-id": relevance, ...}, ...}``."""
    with open_text(path) as handle:
        try:
            data = jsonio.loads(handle.read(), max_depth=None)  # the shape checks below prove depth 2
        except jsonio.JsonError as failure:
            failure.raise_as(DataError, path=path)
        except UnicodeDecodeError as exc:
            raise DataError(f"not UTF-8 text: {exc.reason}", path=path) from None
    if not isinstance(data, dict):
        raise DataError("expected a JSON object mapping query ids to {doc id: relevance}", path=path)
    judgements: Judgements = {}
    for qid, docs in data.items():
        if not isinstance(docs, dict):
            raise DataError(f"judgements of query {qid!r} must be an object", path=path, field=qid)
        for did, rel in docs.items():
            if isinstance(rel, bool) or not isinstance(rel, int):
                raise DataError(
                    f"relevance must be an integer, got {rel!r}"
                    if isinstance(rel, (float, str))
                    else f"relevance must be an integer, got {type(rel).__name__}",
                    path=path,
                    field=f"{qid}/{did}",
                )
            _add(judgements, qid, did, rel, path=path, line=None, fields=(qid, f"{qid}/{did}"))
    return Qrels(judgements)


def read_qrels(path: str | Path) -> Qrels:
    """Read qrels in any supported format, chosen by content.

    JSON when the file starts with ``{``; BEIR TSV when the first line is BEIR's
    header; otherwise TREC's four columns.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError("qrels file not found", path=path)
    with open_text(path) as handle:
        try:
            first = handle.readline()
        except UnicodeDecodeError as exc:
            raise DataError(f"unreadable: {exc}", path=path) from None
    if first.lstrip().startswith("{"):
        return read_json_qrels(path)
    if tuple(first.rstrip("\r\n").split("\t")) == BEIR_HEADER:
        return read_beir_qrels(path)
    return read_trec_qrels(path)
