"""Import CoIR's Hugging Face parquet export into BEIR-layout task folders.

CoIR (``CoIR-Retrieval`` on the Hugging Face hub) publishes two datasets per task:

* ``<task>-queries-corpus`` with the splits ``corpus`` and ``queries``
  (columns ``_id, title, partition, text, language, meta_information``);
* ``<task>-qrels`` with the splits ``train``, ``valid`` and ``test``
  (columns ``query_id, corpus_id, score``).

A downloaded snapshot holds the parquet shards of a split as
``<dataset>/data/<split>-00000-of-00001.parquet`` (or without ``data/``); the
dataset folder may be named ``<task>-queries-corpus`` or
``CoIR-Retrieval__<task>-queries-corpus`` (matched without regard to case).

Each task becomes ``DEST/<task>/`` with ``corpus.jsonl`` (``_id, title, text``),
``queries.jsonl`` (``_id, text``; only queries judged in some split) and
``qrels/<split>.tsv`` (``valid`` renamed to BEIR's ``dev``), plus one
``DEST/benchmark.json``: the registered ``coir`` definition restricted to the
tasks present in DEST. Parquet files are streamed batch by batch. Everything is
staged in a hidden folder inside DEST and renamed into place only after every
selected task converted without error, so a failed import leaves no task folder
(and no benchmark.json) behind.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.data.ids import id_problem
from grader.data.registry import registered_definition
from grader.data.selection import ImportResult, import_tasks, select_tasks
from grader.data.task import Document, Query
from grader.data.writers import TaskWriter
from grader.errors import DataError, GraderError

HF_ORGANISATION = "CoIR-Retrieval"
QUERIES_CORPUS_SUFFIX = "-queries-corpus"
QRELS_SUFFIX = "-qrels"
#: CoIR split names that BEIR spells differently
SPLIT_RENAMES = {"valid": "dev"}

CORPUS_COLUMNS = ("_id", "text")
CORPUS_OPTIONAL_COLUMNS = ("title",)
QUERIES_COLUMNS = ("_id", "text")
QRELS_COLUMNS = ("query_id", "corpus_id", "score")

_BATCH_ROWS = 4096
_INTEGER = re.compile(r"^[+-]?[0-9]+$")

Progress = Callable[[str], None]


# --------------------------------------------------------------------- pyarrow


def _pyarrow() -> tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)``, imported on first use."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:
        raise GraderError(f"importing CoIR's parquet files needs pyarrow, which cannot be imported ({exc})", hint="pip install pyarrow") from None
    return pyarrow, pyarrow.parquet


def _iter_parquet(paths: Sequence[Path], required: Sequence[str], optional: Sequence[str] = ()) -> Iterator[tuple[Path, int, tuple[Any, ...]]]:
    """Yield ``(file, row, values)`` for every row of the shards ``paths``, in order.

    ``row`` counts from 1 within each file; ``values`` follow ``required`` then
    ``optional`` (``None`` for an optional column the file lacks). Only the
    named columns are read, one batch at a time.
    """
    pa, pq = _pyarrow()
    errors = (pa.ArrowException, OSError)
    wanted = tuple(required) + tuple(optional)
    for path in paths:
        try:
            parquet = pq.ParquetFile(path)
        except errors as exc:
            raise DataError(f"unreadable parquet file: {exc}", path=path) from None
        try:
            names = parquet.schema_arrow.names
            for column in required:
                if column not in names:
                    raise DataError(f"missing column (the file has: {', '.join(names)})", path=path, field=column)
            present = [column for column in wanted if column in names]
            batches = parquet.iter_batches(batch_size=_BATCH_ROWS, columns=present)
            row = 0
            while True:
                try:
                    batch = next(batches, None)
                    if batch is None:
                        break
                    by_name = {column: batch.column(column).to_pylist() for column in present}
                except errors as exc:
                    raise DataError(f"unreadable parquet file: {exc}", path=path) from None
                absent = [None] * batch.num_rows
                for values in zip(*(by_name.get(column, absent) for column in wanted)):
                    row += 1
                    yield path, row, values
        finally:
            close = getattr(parquet, "close", None)
            if close is not None:
                close()


# ---------------------------------------------------------------- field checks


def _identifier(value: Any, *, path: Path, row: int, field: str) -> str:
    """A usable id from a parquet cell; integers become their decimal string."""
    if value is None:
        raise DataError("missing id (null)", path=path, line=row, field=field)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    problem = id_problem(value)
    if problem:
        raise DataError(problem, path=path, line=row, field=field)
    return value


def _text(value: Any, *, path: Path, row: int, field: str, null_as_empty: bool = False) -> str:
    if value is None and null_as_empty:
        return ""
    if not isinstance(value, str):
        got = "null" if value is None else type(value).__name__
        raise DataError(f"expected a string, got {got}", path=path, line=row, field=field)
    return value


def _score(value: Any, *, path: Path, row: int) -> int:
    """An integer relevance; integral floats (``1.0``) and integer strings are accepted."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INTEGER.match(value.strip()):
        return int(value.strip())
    got = "null" if value is None else repr(value)
    raise DataError(f"relevance must be an integer, got {got}", path=path, line=row, field="score")


# ------------------------------------------------------------------- discovery


@dataclass(frozen=True)
class CoirTaskSource:
    """The parquet shards of one CoIR task inside a snapshot folder."""

    task: str
    queries_corpus_dir: Path
    qrels_dir: Path
    corpus: tuple[Path, ...]
    queries: tuple[Path, ...]
    #: CoIR split name (``train``, ``valid``, ``test``) -> its shards
    qrels: dict[str, tuple[Path, ...]]


def registered_coir_tasks() -> tuple[str, ...]:
    """The task names of the registered ``coir`` benchmark, in its order."""
    return tuple(registered_definition("coir")["tasks"])


def _split_name(file_name: str) -> str:
    """``corpus-00000-of-00002.parquet`` -> ``corpus``; ``test.parquet`` -> ``test``."""
    stem = file_name[: -len(".parquet")]
    return stem.split("-", 1)[0]


def _parquet_shards(dataset_dir: Path) -> dict[str, tuple[Path, ...]]:
    """Split name -> sorted shards, from ``dataset_dir/data`` or else ``dataset_dir`` itself."""
    for folder in (dataset_dir / "data", dataset_dir):
        if not folder.is_dir():
            continue
        files = sorted(p for p in folder.iterdir() if p.name.endswith(".parquet") and p.is_file() and not p.name.startswith("."))
        if files:
            shards: dict[str, list[Path]] = {}
            for path in files:
                shards.setdefault(_split_name(path.name), []).append(path)
            return {split: tuple(paths) for split, paths in shards.items()}
    return {}


def _dataset_dir(children: dict[str, list[Path]], task: str, suffix: str) -> Path | None:
    names = (f"{task}{suffix}", f"{HF_ORGANISATION}__{task}{suffix}")
    matches = [path for name in names for path in children.get(name.lower(), [])]
    if len(matches) > 1:
        listed = ", ".join(path.name for path in matches)
        raise DataError(f"task {task!r} is present more than once ({listed}); keep one", path=matches[0].parent)
    return matches[0] if matches else None


def find_coir_tasks(src: str | Path) -> dict[str, CoirTaskSource]:
    """Every registered CoIR task with data in ``src``, keyed by task name, in benchmark order.

    A task counts as present when its ``-queries-corpus`` or ``-qrels`` folder
    exists; a task with only one of the two, or lacking the ``corpus``/``queries``
    splits or any qrels split, is an error.
    """
    src = Path(src)
    if not src.is_dir():
        raise DataError("source folder not found", path=src)
    children: dict[str, list[Path]] = {}
    for child in src.iterdir():
        if child.is_dir():
            children.setdefault(child.name.lower(), []).append(child)
    found: dict[str, CoirTaskSource] = {}
    for task in registered_coir_tasks():
        qc_dir = _dataset_dir(children, task, QUERIES_CORPUS_SUFFIX)
        qrels_dir = _dataset_dir(children, task, QRELS_SUFFIX)
        if qc_dir is None and qrels_dir is None:
            continue
        if qc_dir is None:
            raise DataError(f"task {task!r} has qrels but no {task}{QUERIES_CORPUS_SUFFIX} folder", path=src)
        if qrels_dir is None:
            raise DataError(f"task {task!r} has a corpus but no {task}{QRELS_SUFFIX} folder", path=src)
        qc_shards = _parquet_shards(qc_dir)
        for split in ("corpus", "queries"):
            if split not in qc_shards:
                raise DataError(f"no parquet file of split {split!r} ({split}-*.parquet)", path=qc_dir)
        qrels_shards = _parquet_shards(qrels_dir)
        if not qrels_shards:
            raise DataError("no qrels parquet files (test-*.parquet, ...)", path=qrels_dir)
        renamed: dict[str, str] = {}
        for split in qrels_shards:
            target = SPLIT_RENAMES.get(split, split)
            if target in renamed:
                raise DataError(f"splits {renamed[target]!r} and {split!r} would both become {target!r}", path=qrels_dir)
            renamed[target] = split
        found[task] = CoirTaskSource(
            task=task,
            queries_corpus_dir=qc_dir,
            qrels_dir=qrels_dir,
            corpus=qc_shards["corpus"],
            queries=qc_shards["queries"],
            qrels=dict(sorted(qrels_shards.items())),
        )
    return found


# ------------------------------------------------------------------ conversion


@dataclass
class SplitSummary:
    """Counts of one written qrels split."""

    queries: int
    judgements: int


@dataclass
class TaskSummary:
    """What was written for one task."""

    task: str
    documents: int = 0
    queries: int = 0
    #: queries of CoIR's queries file judged in no split (not written)
    dropped_queries: int = 0
    #: identical repeated qrels rows, written once
    repeated_judgements: int = 0
    splits: dict[str, SplitSummary] = field(default_factory=dict)

    def line(self) -> str:
        """The one progress line printed for the task."""
        text = f"{self.task}: {self.documents} documents, {self.queries} queries ({self.dropped_queries} unjudged dropped)"
        for split, counts in self.splits.items():
            text += f"; {split}: {counts.queries} queries, {counts.judgements} judgements"
        if self.repeated_judgements:
            text += f"; {self.repeated_judgements} repeated qrels rows merged"
        return text


Judgements = dict[str, dict[str, int]]


def _read_qrels(source: CoirTaskSource, summary: TaskSummary) -> dict[str, Judgements]:
    """Output split name -> judgements, checking ids, scores and repeated pairs."""
    by_split: dict[str, Judgements] = {}
    for split, shards in source.qrels.items():
        judgements: Judgements = {}
        for path, row, (qid_value, did_value, score_value) in _iter_parquet(shards, QRELS_COLUMNS):
            qid = _identifier(qid_value, path=path, row=row, field="query_id")
            did = _identifier(did_value, path=path, row=row, field="corpus_id")
            score = _score(score_value, path=path, row=row)
            docs = judgements.setdefault(qid, {})
            if did in docs:
                if docs[did] != score:
                    raise DataError(
                        f"document {did!r} is judged twice for query {qid!r} with different scores ({docs[did]} and {score})",
                        path=path,
                        line=row,
                        field="corpus_id",
                    )
                summary.repeated_judgements += 1
                continue
            docs[did] = score
        by_split[SPLIT_RENAMES.get(split, split)] = judgements
    return dict(sorted(by_split.items()))


def _raise_unknown(source: CoirTaskSource, field_name: str, known: set[str], what: str) -> None:
    """Find the first qrels row whose ``field_name`` is not in ``known`` and raise naming it."""
    column = QRELS_COLUMNS.index(field_name)
    for shards in source.qrels.values():
        for path, row, values in _iter_parquet(shards, QRELS_COLUMNS):
            value = _identifier(values[column], path=path, row=row, field=field_name)
            if value not in known:
                raise DataError(f"unknown {what} id {value!r} (not in the {what} files of the task)", path=path, line=row, field=field_name)
    raise AssertionError("an unknown id was detected but not found again")  # pragma: no cover


def _queries(source: CoirTaskSource, judged: set[str], seen: set[str], summary: TaskSummary) -> Iterator[Query]:
    for path, row, (id_value, text_value) in _iter_parquet(source.queries, QUERIES_COLUMNS):
        qid = _identifier(id_value, path=path, row=row, field="_id")
        if qid in seen:
            raise DataError(f"duplicate query id {qid!r}", path=path, line=row, field="_id")
        seen.add(qid)
        text = _text(text_value, path=path, row=row, field="text")
        if qid in judged:
            yield Query(qid, text)
        else:
            summary.dropped_queries += 1


def _documents(source: CoirTaskSource, seen: set[str]) -> Iterator[Document]:
    for path, row, (id_value, text_value, title_value) in _iter_parquet(source.corpus, CORPUS_COLUMNS, CORPUS_OPTIONAL_COLUMNS):
        did = _identifier(id_value, path=path, row=row, field="_id")
        if did in seen:
            raise DataError(f"duplicate document id {did!r}", path=path, line=row, field="_id")
        seen.add(did)
        title = _text(title_value, path=path, row=row, field="title", null_as_empty=True)
        yield Document(did, title, _text(text_value, path=path, row=row, field="text"))


def convert_task(source: CoirTaskSource, folder: str | Path, *, overwrite: bool = False) -> TaskSummary:
    """Convert one CoIR task into the BEIR task folder ``folder`` (written atomically)."""
    summary = TaskSummary(source.task)
    qrels = _read_qrels(source, summary)
    judged_queries = {qid for judgements in qrels.values() for qid in judgements}
    judged_documents = {did for judgements in qrels.values() for docs in judgements.values() for did in docs}
    with TaskWriter(folder, overwrite=overwrite) as writer:
        query_ids: set[str] = set()
        summary.queries = writer.write_queries(_queries(source, judged_queries, query_ids, summary))
        if not judged_queries <= query_ids:
            _raise_unknown(source, "query_id", query_ids, "query")
        del query_ids
        document_ids: set[str] = set()
        summary.documents = writer.write_corpus(_documents(source, document_ids))
        if not judged_documents <= document_ids:
            _raise_unknown(source, "corpus_id", document_ids, "corpus")
        del document_ids
        for split, judgements in qrels.items():
            count = writer.write_qrels(split, judgements)
            summary.splits[split] = SplitSummary(queries=len(judgements), judgements=count)
    return summary


# ------------------------------------------------------------- benchmark.json


def coir_benchmark_json(tasks: Sequence[str]) -> dict[str, Any]:
    """The registered ``coir`` definition restricted to ``tasks``.

    Groups keep only their members among ``tasks``; a group left empty is dropped.
    """
    return registered_definition("coir", tasks)


# ----------------------------------------------------------------------- entry


def _select(found: dict[str, CoirTaskSource], tasks: Sequence[str] | None, src: Path) -> tuple[list[str], list[str]]:
    """(tasks to import, registered tasks not found) for the selection ``tasks``."""
    none_found = DataError(
        "no CoIR task found (expected folders like cosqa-queries-corpus and cosqa-qrels)",
        path=src,
        hint=f"download the datasets {HF_ORGANISATION}/<task>-queries-corpus and {HF_ORGANISATION}/<task>-qrels into it",
    )
    return select_tasks(
        found,
        tasks,
        registered_coir_tasks(),
        src=src,
        kind="CoIR task",
        none_found=none_found,
        absent=lambda task: f"task {task!r} not found (no {task}{QUERIES_CORPUS_SUFFIX} / {task}{QRELS_SUFFIX} folders)",
    )


def import_coir(
    src: str | Path,
    dest: str | Path,
    *,
    tasks: Sequence[str] | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> ImportResult[TaskSummary]:
    """Convert the CoIR tasks of the snapshot folder ``src`` into the benchmark folder ``dest``.

    ``tasks`` restricts the import (default: every registered task found);
    an existing ``dest/<task>`` is refused unless ``overwrite``. ``progress``
    receives one line per converted task. Raises :class:`DataError` naming
    file, row and field for invalid data; on any error no task folder and no
    benchmark.json is written.
    """
    src, dest = Path(src), Path(dest)
    _pyarrow()
    found = find_coir_tasks(src)
    selected, missing = _select(found, tasks, src)
    return import_tasks(
        dest,
        selected,
        missing=missing,
        convert=lambda task, folder: convert_task(found[task], folder),
        registered=registered_coir_tasks(),
        benchmark_json=coir_benchmark_json,
        overwrite=overwrite,
        progress=progress,
        label="coir",
    )
