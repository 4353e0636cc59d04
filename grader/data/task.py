"""A task in BEIR's layout: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``.

Readers stream, so a corpus of millions of documents is never held as JSON
objects; each malformed line fails with ``file:line: field: what is wrong``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from grader.data.ids import id_problem
from grader.data.qrels import Qrels, read_beir_qrels
from grader.data.textfiles import find_data_file, iter_jsonl, require_string
from grader.errors import DataError
from grader.files import listing_digest, sha256_file_remembered


@dataclass(frozen=True)
class Document:
    """One corpus entry."""

    id: str
    title: str
    text: str


def judged_ids_digest(judged: Iterable[str]) -> str:
    """sha256 of query ids, one a line (each ending in a newline), sorted by their UTF-8 bytes."""
    ordered = sorted({query_id.encode("utf-8", "surrogatepass") for query_id in judged})
    return hashlib.sha256(b"".join(query_id + b"\n" for query_id in ordered)).hexdigest()


def document_text(title: str, text: str) -> str:
    """A document as an encoder sees it, in-process and in the runner image: ``title + " " + text``, stripped (as BEIR's dense models)."""
    return (title + " " + text).strip()


@dataclass(frozen=True)
class Query:
    """One query."""

    id: str
    text: str


def _record_id(record: dict, *, path: Path, line: int) -> str:
    identifier = require_string(record, "_id", path=path, line=line)
    problem = id_problem(identifier)
    if problem:
        raise DataError(problem, path=path, line=line, field="_id")
    return identifier


class Task:
    """A task folder. Constructing it checks that the required files exist."""

    def __init__(self, root: str | Path, name: str | None = None) -> None:
        self.root = Path(root)
        self.name = name or self.root.name
        if not self.root.is_dir():
            raise DataError("task folder not found", path=self.root)
        corpus = find_data_file(self.root, "corpus.jsonl")
        queries = find_data_file(self.root, "queries.jsonl")
        if corpus is None:
            raise DataError("missing corpus.jsonl (or corpus.jsonl.gz)", path=self.root)
        if queries is None:
            raise DataError("missing queries.jsonl (or queries.jsonl.gz)", path=self.root)
        self.corpus_path: Path = corpus
        self.queries_path: Path = queries
        self.qrels_dir = self.root / "qrels"

    def __repr__(self) -> str:
        return f"Task({self.name!r}, {str(self.root)!r})"

    def splits(self) -> list[str]:
        """Names of the splits that have a qrels file, sorted."""
        if not self.qrels_dir.is_dir():
            return []
        names = set()
        for path in self.qrels_dir.iterdir():
            if path.name.endswith(".tsv"):
                names.add(path.name[: -len(".tsv")])
            elif path.name.endswith(".tsv.gz"):
                names.add(path.name[: -len(".tsv.gz")])
        return sorted(names)

    def qrels_path(self, split: str) -> Path:
        """Path of the qrels file of ``split``; raises if the split does not exist."""
        path = find_data_file(self.qrels_dir, f"{split}.tsv")
        if path is None:
            available = ", ".join(self.splits()) or "none"
            raise DataError(f"task {self.name!r} has no split {split!r} (available: {available})", path=self.qrels_dir)
        return path

    def qrels(self, split: str) -> Qrels:
        """The judgements of ``split``."""
        return read_beir_qrels(self.qrels_path(split))

    def iter_corpus(self) -> Iterator[Document]:
        """Stream the corpus, checking ids (unique, well-formed) and fields."""
        seen: set[str] = set()
        path = self.corpus_path
        for line, record in iter_jsonl(path):
            doc_id = _record_id(record, path=path, line=line)
            if doc_id in seen:
                raise DataError(f"duplicate document id {doc_id!r}", path=path, line=line, field="_id")
            seen.add(doc_id)
            title = record.get("title", "")
            if title is None:
                title = ""
            if not isinstance(title, str):
                raise DataError("expected a string", path=path, line=line, field="title")
            text = require_string(record, "text", path=path, line=line)
            yield Document(doc_id, title, text)

    def iter_queries(self) -> Iterator[Query]:
        """Stream the queries, checking ids (unique, well-formed) and fields."""
        seen: set[str] = set()
        path = self.queries_path
        for line, record in iter_jsonl(path):
            query_id = _record_id(record, path=path, line=line)
            if query_id in seen:
                raise DataError(f"duplicate query id {query_id!r}", path=path, line=line, field="_id")
            seen.add(query_id)
            yield Query(query_id, require_string(record, "text", path=path, line=line))

    @cached_property
    def file_digests(self) -> dict[str, str]:
        """sha256 of every data file, keyed by its path relative to the task folder."""
        files = [self.corpus_path, self.queries_path] + [self.qrels_path(split) for split in self.splits()]
        # Remembered per version of each file: a server or worker names the same files in every grade it serves.
        return {path.relative_to(self.root).as_posix(): sha256_file_remembered(path) for path in files}

    def ranking_digest(self, judged: Iterable[str]) -> str:
        """One sha256 naming the data a worker ranks on: the corpus, the queries and which of them are judged (never the judgements).

        The listing of :meth:`split_digest` with the qrels line replaced by ``<sha256>  judged``,
        the sha256 of the judged query ids, one a line, in byte order (:func:`judged_ids_digest`).
        """
        names = [self.corpus_path.relative_to(self.root).as_posix(), self.queries_path.relative_to(self.root).as_posix()]
        return listing_digest([*((name, self.file_digests[name]) for name in names), ("judged", judged_ids_digest(judged))])

    def split_digest(self, split: str) -> str:
        """One sha256 naming exactly the data a grading of ``split`` depends on.

        It hashes the lines ``<sha256>  <relative path>`` of the corpus, the queries
        and the split's qrels, in that order (:func:`grader.files.listing_digest`:
        ``sha256sum corpus.jsonl queries.jsonl qrels/test.tsv | sha256sum`` in the task folder).
        """
        names = [
            self.corpus_path.relative_to(self.root).as_posix(),
            self.queries_path.relative_to(self.root).as_posix(),
            self.qrels_path(split).relative_to(self.root).as_posix(),
        ]
        return listing_digest((name, self.file_digests[name]) for name in names)
