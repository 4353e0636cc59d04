"""Reading the two ``grader run --keep-embeddings`` folders EffectMRR compares, with checks.

A run folder holds ``report.json`` and, per task, ``embeddings/<task>/`` with
``queries.npy``, ``corpus.npy`` and ``ids.json`` (the ids in row order). Before any
vector is used, the folder's report must have scored the task on the same split of
the same data (its data digest equals the current data's), and the ids must be
exactly the task's judged queries and its corpus.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from grader import jsonio
from grader.data.benchmark import Benchmark
from grader.data.task import Task
from grader.errors import DataError, InputError, ReportError, UsageError
from grader.reports.model import Report

REPORT_FILE = "report.json"
EMBEDDING_FILES = ("queries.npy", "corpus.npy", "ids.json")
_RERUN_HINT = "rerun `grader run SUBMISSION --benchmark B --keep-embeddings --out DIR` for it"


@dataclass(frozen=True)
class RunFolder:
    """One ``grader run`` output folder and its report; ``role`` is ``base`` or ``augmented``."""

    role: str
    folder: Path
    report_path: Path
    report: Report

    @classmethod
    def load(cls, path: str | Path, role: str) -> RunFolder:
        """Open the folder (or its ``report.json``) and read the report."""
        path = Path(path)
        folder = path.parent if path.is_file() and path.name == REPORT_FILE else path
        if not folder.is_dir():
            raise UsageError(f"--{role}: {path} is not a folder")
        report_path = folder / REPORT_FILE
        if not report_path.is_file():
            raise UsageError(f"--{role}: {folder} has no {REPORT_FILE} (not a `grader run` output folder)", hint=_RERUN_HINT)
        report = jsonio.load_file_as(report_path, InputError)  # the schema check below names a report that is no object
        try:
            typed = Report.from_json(report)
        except ReportError as error:
            raise InputError(str(error), path=report_path) from None
        return cls(role, folder, report_path, typed)

    @property
    def subject(self) -> dict[str, Any]:
        return dict(self.report.data["subject"])

    @property
    def labels(self) -> dict[str, Any]:
        return dict(self.report.labels)

    def graded_tasks(self) -> list[str]:
        return list(self.report.tasks)

    def check_benchmark(self, benchmark: Benchmark) -> None:
        """The report must come from a grading of ``benchmark``."""
        name = self.report.benchmark["name"]
        if name != benchmark.name:
            raise UsageError(f"--{self.role}: {self.report_path} grades benchmark {name!r}, not {benchmark.name!r}")

    def check_task(self, task: Task, split: str, data_digest: str) -> None:
        """The report scored ``task`` on ``split`` of exactly the current data."""
        entry = self.report.tasks.get(task.name)
        where = f"--{self.role}: {self.report_path}"
        if entry is None:
            raise UsageError(f"{where} did not grade task {task.name!r}", hint=_RERUN_HINT)
        if not entry.scored:
            raise UsageError(f"{where}: task {task.name!r} was not scored (status {entry.status!r})", hint=_RERUN_HINT)
        if entry.split != split:
            raise UsageError(f"{where}: task {task.name!r} was graded on split {entry.split!r}, not {split!r}")
        recorded = entry.data_digest
        if recorded != data_digest:
            raise DataError(
                f"task {task.name!r} ({split}) was graded on other data (digest {str(recorded)[:12]}..., current data {data_digest[:12]}...); refusing stale embeddings",
                path=self.report_path,
                field=f"tasks/{task.name}/data_digest",
                hint=_RERUN_HINT,
            )

    def embeddings(self, task: str) -> TaskEmbeddings:
        """Read and check the kept embeddings of ``task``."""
        folder = self.folder / "embeddings" / task
        for name in EMBEDDING_FILES:
            if not (folder / name).is_file():
                raise UsageError(f"--{self.role}: {self.folder} kept no embeddings for task {task!r} (missing {folder / name})", hint=_RERUN_HINT)
        query_ids, doc_ids = _read_ids(folder / "ids.json")
        queries = _read_matrix(folder / "queries.npy", len(query_ids), "queries")
        corpus = _read_matrix(folder / "corpus.npy", len(doc_ids), "corpus")
        if queries.shape[1] != corpus.shape[1]:
            raise DataError(f"queries have dimension {queries.shape[1]} but the corpus {corpus.shape[1]}", path=folder)
        return TaskEmbeddings(self.role, folder, query_ids, doc_ids, queries, corpus)


@dataclass(frozen=True)
class TaskEmbeddings:
    """One task's kept vectors, with their ids in row order."""

    role: str
    folder: Path
    query_ids: list[str]
    doc_ids: list[str]
    queries: np.ndarray
    corpus: np.ndarray

    def check_ids(self, query_ids: set[str], doc_ids: set[str]) -> None:
        """The rows must be exactly the task's judged queries and its whole corpus."""
        for kind, have, want in (("query", self.query_ids, query_ids), ("document", self.doc_ids, doc_ids)):
            have_set = set(have)
            if have_set != want:
                missing = sorted(want - have_set)
                extra = sorted(have_set - want)
                detail = f"{len(missing)} missing (e.g. {missing[0]!r})" if missing else f"{len(extra)} not in the data (e.g. {extra[0]!r})"
                raise DataError(f"--{self.role} embeddings: {kind} ids differ from the task data: {detail}", path=self.folder / "ids.json")

    def aligned_to(self, query_ids: Sequence[str], doc_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Query and corpus rows reordered to the given id order (the ids must be the same sets)."""
        query_rows = {identifier: row for row, identifier in enumerate(self.query_ids)}
        doc_rows = {identifier: row for row, identifier in enumerate(self.doc_ids)}
        queries = self.queries if list(query_ids) == self.query_ids else self.queries[[query_rows[q] for q in query_ids]]
        corpus = self.corpus if list(doc_ids) == self.doc_ids else self.corpus[[doc_rows[d] for d in doc_ids]]
        return queries, corpus


def _read_ids(path: Path) -> tuple[list[str], list[str]]:
    data = jsonio.load_object(path, DataError, expected='expected {"queries": [...], "corpus": [...]}')
    lists = []
    for field in ("queries", "corpus"):
        ids = data.get(field)
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise DataError("expected a list of id strings", path=path, field=field)
        if len(set(ids)) != len(ids):
            seen: set[str] = set()
            duplicate = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
            raise DataError(f"id {duplicate!r} appears twice", path=path, field=field)
        lists.append(ids)
    return lists[0], lists[1]


def _read_matrix(path: Path, rows: int, what: str) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise DataError(f"not a readable .npy array: {error}", path=path) from None
    if array.ndim != 2 or not np.issubdtype(array.dtype, np.floating):
        raise DataError(f"expected a 2-D float array, got {array.ndim}-D {array.dtype}", path=path)
    if array.shape[0] != rows:
        raise DataError(f"{array.shape[0]} rows but ids.json lists {rows} {what} ids", path=path)
    if array.shape[1] == 0:
        raise DataError("vectors have dimension 0", path=path)
    if not np.isfinite(array).all():
        raise DataError("contains NaN or infinite values", path=path)
    return array
