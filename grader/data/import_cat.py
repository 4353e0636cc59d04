"""Import CAT's cleaned JSONL splits into BEIR-layout task folders.

CAT (Phan et al. 2023, arXiv 2308.04693) publishes, per dataset (``tlc``,
``csn``, ``funcom``, ``pcsd``), the splits ``train``, ``valid`` and ``test`` as
JSONL: one object per line with ``id``, ``raw_code``, ``raw_comment``, ``code``
and ``comment`` (``code``/``comment`` are the cleaned texts). A split is either
a folder of shards ``SRC/<dataset>/<split>/*.jsonl`` (read in name order) or one
file ``SRC/<dataset>/<split>.jsonl``; ``.jsonl.gz`` works too, and dataset folder
names are matched without regard to case.

CAT scores code search per test query against the code of the *test split
only*: the candidate pool is the whole test split, the one relevant document is
the query's own record. So each dataset becomes ``DEST/<dataset>/`` holding

* ``corpus.jsonl``: the ``code`` of every test record, id ``c-<id>``;
* ``queries.jsonl``: the ``comment`` of every test record, id ``q-<id>``;
* ``qrels/test.tsv``: ``q-<id>  c-<id>  1`` for every test record.

The train and valid splits are not imported (a corpus holding them would put
their code into the test pool). The ``c-``/``q-`` prefixes keep query and
document ids distinct, because BEIR-style retrievers drop a hit whose id equals
the query id. ``DEST/benchmark.json`` is the registered ``cat`` definition
restricted to the tasks present in DEST. Everything is staged in a hidden folder
inside DEST and renamed into place only after every selected dataset converted
without error, so a failed import leaves no task folder and no benchmark.json.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.data.ids import id_problem
from grader.data.registry import registered_definition
from grader.data.selection import ImportResult, import_tasks, select_tasks
from grader.data.task import Document, Query
from grader.data.textfiles import iter_jsonl
from grader.data.writers import TaskWriter
from grader.errors import DataError

#: the split CAT evaluates on; it is both the query set and the candidate pool
POOL_SPLIT = "test"
#: the qrels split written (``grader run`` grades it by default)
QRELS_SPLIT = "test"
DOCUMENT_PREFIX = "c-"
QUERY_PREFIX = "q-"
#: fields every record must have (``raw_code``/``raw_comment`` are not used)
QUERY_FIELD = "comment"
DOCUMENT_FIELD = "code"

_SUFFIXES = (".jsonl", ".jsonl.gz")

Progress = Callable[[str], None]


# ------------------------------------------------------------------- discovery


def registered_cat_tasks() -> tuple[str, ...]:
    """The task names of the registered ``cat`` benchmark, in its order."""
    return tuple(registered_definition("cat")["tasks"])


def _is_jsonl(path: Path) -> bool:
    return path.is_file() and not path.name.startswith(".") and path.name.endswith(_SUFFIXES)


def split_files(dataset_dir: Path, split: str) -> tuple[Path, ...]:
    """The JSONL files of ``split``: ``<split>/*.jsonl`` (sorted) or ``<split>.jsonl``.

    Raises :class:`DataError` when the split is absent or given both ways.
    """
    folder = dataset_dir / split
    shards: tuple[Path, ...] = ()
    if folder.is_dir():
        shards = tuple(sorted((p for p in folder.iterdir() if _is_jsonl(p)), key=lambda p: p.name))
        if not shards:
            raise DataError(f"no .jsonl file in the {split!r} split folder", path=folder)
    single = [dataset_dir / f"{split}{suffix}" for suffix in _SUFFIXES if (dataset_dir / f"{split}{suffix}").is_file()]
    if shards and single:
        raise DataError(f"split {split!r} is given both as the folder {split}/ and as {single[0].name}; keep one", path=dataset_dir)
    if len(single) > 1:
        raise DataError(f"split {split!r} is given both as {single[0].name} and {single[1].name}; keep one", path=dataset_dir)
    if shards:
        return shards
    if single:
        return (single[0],)
    raise DataError(f"no {split!r} split (expected {split}/*.jsonl or {split}.jsonl)", path=dataset_dir)


def find_cat_datasets(src: str | Path) -> dict[str, Path]:
    """Registered CAT dataset name -> its folder in ``src``, in benchmark order."""
    src = Path(src)
    if not src.is_dir():
        raise DataError("source folder not found", path=src)
    children: dict[str, list[Path]] = {}
    for child in src.iterdir():
        if child.is_dir():
            children.setdefault(child.name.lower(), []).append(child)
    found: dict[str, Path] = {}
    for task in registered_cat_tasks():
        matches = children.get(task.lower(), [])
        if len(matches) > 1:
            listed = ", ".join(sorted(path.name for path in matches))
            raise DataError(f"dataset {task!r} is present more than once ({listed}); keep one", path=src)
        if matches:
            found[task] = matches[0]
    return found


# ------------------------------------------------------------------ conversion


def _record_id(record: dict[str, Any], *, path: Path, line: int) -> str:
    """CAT's ``id``: a non-empty string or an integer (written as its decimal string)."""
    if "id" not in record:
        raise DataError("missing field", path=path, line=line, field="id")
    value = record["id"]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        got = "null" if value is None else type(value).__name__
        raise DataError(f"expected a string or integer id, got {got}", path=path, line=line, field="id")
    problem = id_problem(value)
    if problem:
        raise DataError(problem, path=path, line=line, field="id")
    return value


def _record_text(record: dict[str, Any], field: str, *, path: Path, line: int) -> str:
    if field not in record:
        raise DataError("missing field", path=path, line=line, field=field)
    value = record[field]
    if not isinstance(value, str):
        got = "null" if value is None else type(value).__name__
        raise DataError(f"expected a string, got {got}", path=path, line=line, field=field)
    return value


def iter_cat_records(files: Sequence[Path]) -> Iterator[tuple[Path, int, str, str, str]]:
    """Yield ``(file, line, id, comment, code)`` for every record of ``files``, in order.

    Ids must be unique across the files; a repeated id raises naming both places.
    """
    seen: dict[str, tuple[Path, int]] = {}
    for path in files:
        for line, record in iter_jsonl(path):
            record_id = _record_id(record, path=path, line=line)
            if record_id in seen:
                first_path, first_line = seen[record_id]
                raise DataError(f"duplicate id {record_id!r} (first at {first_path}:{first_line})", path=path, line=line, field="id")
            seen[record_id] = (path, line)
            comment = _record_text(record, QUERY_FIELD, path=path, line=line)
            code = _record_text(record, DOCUMENT_FIELD, path=path, line=line)
            yield path, line, record_id, comment, code


@dataclass
class CatTaskSummary:
    """What was written for one dataset."""

    task: str
    files: int = 0
    records: int = 0
    empty_comments: int = 0
    empty_code: int = 0

    def line(self) -> str:
        """The one progress line printed for the dataset."""
        text = (
            f"{self.task}: {self.records} test records from {self.files} file(s) -> "
            f"{self.records} documents (pool = the test split), {self.records} queries, {self.records} judgements"
        )
        empties = []
        if self.empty_comments:
            empties.append(f"{self.empty_comments} empty comment(s)")
        if self.empty_code:
            empties.append(f"{self.empty_code} empty code field(s)")
        if empties:
            text += f"; kept as they are: {', '.join(empties)}"
        return text


def convert_dataset(task: str, dataset_dir: Path, folder: str | Path, *, overwrite: bool = False) -> CatTaskSummary:
    """Convert the test split of one CAT dataset into the BEIR task folder ``folder`` (atomically)."""
    files = split_files(dataset_dir, POOL_SPLIT)
    summary = CatTaskSummary(task, files=len(files))
    ids: list[str] = []

    def documents() -> Iterator[Document]:
        for _, _, record_id, comment, code in iter_cat_records(files):
            ids.append(record_id)
            summary.empty_comments += not comment.strip()
            summary.empty_code += not code.strip()
            yield Document(DOCUMENT_PREFIX + record_id, "", code)

    def queries() -> Iterator[Query]:
        for _, _, record_id, comment, _ in iter_cat_records(files):
            yield Query(QUERY_PREFIX + record_id, comment)

    with TaskWriter(folder, overwrite=overwrite) as writer:
        summary.records = writer.write_corpus(documents())
        if summary.records == 0:
            raise DataError(f"the {POOL_SPLIT!r} split has no records", path=files[0] if len(files) == 1 else files[0].parent)
        count = writer.write_queries(queries())
        if count != summary.records:  # the files changed while being read
            raise DataError(f"read {summary.records} records, then {count}: the files changed during the import", path=dataset_dir)
        writer.write_qrels(QRELS_SPLIT, {QUERY_PREFIX + rid: {DOCUMENT_PREFIX + rid: 1} for rid in ids})
    return summary


# ------------------------------------------------------------- benchmark.json


def cat_benchmark_json(tasks: Sequence[str]) -> dict[str, Any]:
    """The registered ``cat`` definition restricted to ``tasks`` (kept in its order)."""
    return registered_definition("cat", tasks)


# ----------------------------------------------------------------------- entry


def _select(found: dict[str, Path], tasks: Sequence[str] | None, src: Path) -> tuple[list[str], list[str]]:
    registered = registered_cat_tasks()
    none_found = DataError(
        f"no CAT dataset found (expected folders named {', '.join(registered)})",
        path=src,
        hint="each holds test/*.jsonl (or test.jsonl) with id, code and comment per line",
    )
    return select_tasks(
        found,
        tasks,
        registered,
        src=src,
        kind="CAT dataset",
        none_found=none_found,
        absent=lambda task: f"dataset {task!r} not found (no {task}/ folder)",
    )


def import_cat(
    src: str | Path,
    dest: str | Path,
    *,
    tasks: Sequence[str] | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> ImportResult[CatTaskSummary]:
    """Convert the CAT datasets of ``src`` into the benchmark folder ``dest``.

    ``tasks`` restricts the import (default: every registered dataset found);
    an existing ``dest/<task>`` is refused unless ``overwrite``. ``progress``
    receives one line per converted dataset. Raises :class:`DataError` naming
    file, line and field for invalid data; on any error no task folder and no
    benchmark.json is written.
    """
    src, dest = Path(src), Path(dest)
    found = find_cat_datasets(src)
    selected, missing = _select(found, tasks, src)
    return import_tasks(
        dest,
        selected,
        missing=missing,
        convert=lambda task, folder: convert_dataset(task, found[task], folder),
        registered=registered_cat_tasks(),
        benchmark_json=cat_benchmark_json,
        overwrite=overwrite,
        progress=progress,
        label="cat",
    )
