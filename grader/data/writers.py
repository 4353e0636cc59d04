"""Writing tasks in BEIR's layout: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``.

The importers (``grader data import-coir`` ...) turn other formats into this
layout. Everything is written into a temporary folder next to the target and
renamed into place only once complete, so a reader never sees a half-written
task: after a failure the target folder is absent (or still the old one).

The writers check what keeps the files well-formed (identifiers usable in TSV
and JSONL, integer scores, known split names); checks that need to name the
*source* of a problem (duplicate ids, qrels naming unknown ids) belong to the
caller, which knows where its records came from.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

from grader import jsonio
from grader.data.ids import id_problem
from grader.data.qrels import BEIR_HEADER
from grader.data.task import Document, Query
from grader.errors import DataError, UsageError

_SPLIT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]*$")


def _open_output(path: Path) -> IO[str]:
    return open(path, "w", encoding="utf-8", newline="\n")


def _finish(handle: IO[str]) -> None:
    handle.flush()
    os.fsync(handle.fileno())


def _check_id(value: str, *, path: Path, line: int, field: str) -> None:
    problem = id_problem(value)
    if problem:
        raise DataError(problem, path=path, line=line, field=field)


def write_corpus(path: str | os.PathLike[str], documents: Iterable[Document]) -> int:
    """Write ``documents`` as BEIR ``corpus.jsonl`` (``_id``, ``title``, ``text``); return the count."""
    path = Path(path)
    count = 0
    with _open_output(path) as handle:
        for count, doc in enumerate(documents, start=1):
            _check_id(doc.id, path=path, line=count, field="_id")
            record = {"_id": doc.id, "title": doc.title or "", "text": doc.text}
            handle.write(jsonio.dumps(record))
            handle.write("\n")
        _finish(handle)
    return count


def write_queries(path: str | os.PathLike[str], queries: Iterable[Query]) -> int:
    """Write ``queries`` as BEIR ``queries.jsonl`` (``_id``, ``text``); return the count."""
    path = Path(path)
    count = 0
    with _open_output(path) as handle:
        for count, query in enumerate(queries, start=1):
            _check_id(query.id, path=path, line=count, field="_id")
            handle.write(jsonio.dumps({"_id": query.id, "text": query.text}))
            handle.write("\n")
        _finish(handle)
    return count


def write_qrels(path: str | os.PathLike[str], judgements: Mapping[str, Mapping[str, int]]) -> int:
    """Write a BEIR qrels TSV (header ``query-id	corpus-id	score``), sorted by query then document id.

    Returns the number of judgements written.
    """
    path = Path(path)
    rows = sorted((qid, did, rel) for qid, docs in judgements.items() for did, rel in docs.items())
    with _open_output(path) as handle:
        handle.write("\t".join(BEIR_HEADER) + "\n")
        for line, (qid, did, rel) in enumerate(rows, start=2):
            _check_id(qid, path=path, line=line, field="query-id")
            _check_id(did, path=path, line=line, field="corpus-id")
            if isinstance(rel, bool) or not isinstance(rel, int):
                raise DataError(f"relevance must be an integer, got {rel!r}", path=path, line=line, field="score")
            handle.write(f"{qid}\t{did}\t{rel}\n")
        _finish(handle)
    return len(rows)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def replace_folder(source: Path, target: Path, *, overwrite: bool = False) -> Path:
    """Rename the finished folder ``source`` to ``target`` (same file system).

    An existing ``target`` is refused unless ``overwrite``; then it is moved aside,
    ``source`` renamed into place, and the old one deleted, so ``target`` is at
    every moment either the old or the new folder (absent only between two renames).
    """
    if target.exists() or target.is_symlink():
        if not overwrite:
            raise UsageError(f"{target} exists already; refusing to overwrite it", hint="pass --overwrite to replace it")
        old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:12]}"
        os.replace(target, old)
        try:
            os.replace(source, target)
        except BaseException:
            os.replace(old, target)
            raise
        _remove(old)
    else:
        os.replace(source, target)
    return target


class TaskWriter:
    """Write one task folder atomically.

    ::

        with TaskWriter(folder) as writer:
            writer.write_corpus(documents)
            writer.write_queries(queries)
            writer.write_qrels("test", judgements)
        # renamed into place here; on an exception nothing appears

    The files go to a hidden temporary folder beside ``folder``; leaving the
    ``with`` block normally commits (renames it to ``folder``), an exception
    discards it. An existing ``folder`` is refused unless ``overwrite``.
    """

    def __init__(self, folder: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        self.folder = Path(folder)
        self.overwrite = overwrite
        self._tmp: Path | None = None
        self._splits: set[str] = set()
        self._has_corpus = False
        self._has_queries = False
        self.committed = False

    def __enter__(self) -> TaskWriter:
        if (self.folder.exists() or self.folder.is_symlink()) and not self.overwrite:
            raise UsageError(f"{self.folder} exists already; refusing to overwrite it", hint="pass --overwrite to replace it")
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = Path(tempfile.mkdtemp(prefix=f".{self.folder.name}.", suffix=".partial", dir=self.folder.parent))
        (self._tmp / "qrels").mkdir()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is None:
            if not self.committed:
                self.commit()
        else:
            self.abort()

    @property
    def _root(self) -> Path:
        if self._tmp is None:
            raise RuntimeError("TaskWriter used outside its `with` block (or after commit/abort)")
        return self._tmp

    def write_corpus(self, documents: Iterable[Document]) -> int:
        """Stream the corpus into ``corpus.jsonl``; return the number of documents."""
        count = write_corpus(self._root / "corpus.jsonl", documents)
        self._has_corpus = True
        return count

    def write_queries(self, queries: Iterable[Query]) -> int:
        """Stream the queries into ``queries.jsonl``; return the number of queries."""
        count = write_queries(self._root / "queries.jsonl", queries)
        self._has_queries = True
        return count

    def write_qrels(self, split: str, judgements: Mapping[str, Mapping[str, int]]) -> int:
        """Write ``qrels/<split>.tsv``; return the number of judgements."""
        if not _SPLIT_NAME.match(split):
            raise DataError(f"unusable split name {split!r}", path=self.folder / "qrels")
        if split in self._splits:
            raise DataError(f"split {split!r} written twice", path=self.folder / "qrels")
        count = write_qrels(self._root / "qrels" / f"{split}.tsv", judgements)
        self._splits.add(split)
        return count

    def commit(self) -> Path:
        """Rename the finished folder into place and return it."""
        root = self._root
        if not (self._has_corpus and self._has_queries):
            self.abort()
            raise RuntimeError("TaskWriter.commit before both the corpus and the queries were written")
        try:
            replace_folder(root, self.folder, overwrite=self.overwrite)
        except BaseException:
            self.abort()
            raise
        self._tmp = None
        self.committed = True
        return self.folder

    def abort(self) -> None:
        """Delete the temporary folder (nothing is left behind)."""
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def write_task(
    folder: str | os.PathLike[str],
    corpus: Iterable[Document],
    queries: Iterable[Query],
    qrels_by_split: Mapping[str, Mapping[str, Mapping[str, int]]],
    *,
    overwrite: bool = False,
) -> Path:
    """Write a whole task folder atomically and return its path.

    ``corpus`` and ``queries`` may be generators (they are streamed);
    ``qrels_by_split`` maps split name -> query id -> document id -> relevance.
    """
    with TaskWriter(folder, overwrite=overwrite) as writer:
        writer.write_corpus(corpus)
        writer.write_queries(queries)
        for split in sorted(qrels_by_split):
            writer.write_qrels(split, qrels_by_split[split])
    return Path(folder)
