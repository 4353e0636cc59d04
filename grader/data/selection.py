"""Which registered tasks an importer converts, and what it did: shared by the CoIR and CAT importers."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from grader import jsonio
from grader.data.benchmark import BenchmarkSpec, looks_like_task
from grader.data.writers import replace_folder
from grader.errors import DataError, UsageError


class Converted(Protocol):
    """What an importer's converter returns for one task: the task and its progress line."""

    task: str

    def line(self) -> str:
        """The one progress line printed for the task."""
        ...


SummaryT = TypeVar("SummaryT", bound=Converted)


@dataclass
class ImportResult(Generic[SummaryT]):
    """Outcome of an import (:func:`grader.data.import_coir.import_coir`, :func:`grader.data.import_cat.import_cat`)."""

    dest: Path
    #: one summary per converted task, in registry order
    imported: list[SummaryT]
    #: registered tasks not present in the source (only when no selection was given)
    missing: list[str]
    #: tasks of the written benchmark.json (imported now or already in ``dest``)
    benchmark_tasks: tuple[str, ...]
    benchmark_path: Path


def select_tasks(
    found: Collection[str],
    requested: Sequence[str] | None,
    registered: Sequence[str],
    *,
    src: Path,
    kind: str,
    none_found: DataError,
    absent: Callable[[str], str],
) -> tuple[list[str], list[str]]:
    """(tasks to import in registry order, registered tasks not found) for ``requested``.

    Without a request every task found is imported (``none_found`` is raised when
    there is none). Requested names match registered ones regardless of case; an
    unregistered name is a usage error, a registered one missing from ``src`` a
    data error whose text ``absent(task)`` gives.
    """
    if not requested:
        if not found:
            raise none_found
        return list(found), [task for task in registered if task not in found]
    by_lower = {task.lower(): task for task in registered}
    chosen: list[str] = []
    for name in requested:
        task = by_lower.get(name.strip().lower())
        if task is None:
            raise UsageError(f"unknown {kind} {name.strip()!r} ({kind}s: {', '.join(registered)})")
        if task not in found:
            raise DataError(absent(task), path=src)
        if task not in chosen:
            chosen.append(task)
    return [task for task in registered if task in chosen], []


def import_tasks(
    dest: Path,
    selected: Sequence[str],
    *,
    missing: list[str],
    convert: Callable[[str, Path], SummaryT],
    registered: Sequence[str],
    benchmark_json: Callable[[list[str]], dict[str, Any]],
    overwrite: bool,
    progress: Callable[[str], None] | None,
    label: str,
) -> ImportResult[SummaryT]:
    """Convert ``selected`` tasks into ``dest`` all-or-nothing, then write ``benchmark.json``.

    Each task is converted into a hidden staging folder inside ``dest`` by
    ``convert(task, folder)`` (which returns its summary); ``missing`` (the registered
    tasks the source lacks) is passed through to the result. Only when
    every task and the benchmark definition are valid are the folders renamed into
    place. On any error nothing is published, and a ``dest`` created here is removed.
    """
    if dest.exists() and not dest.is_dir():
        raise DataError("destination is not a folder", path=dest)
    if not overwrite:
        for task in selected:
            target = dest / task
            if target.exists() or target.is_symlink():
                raise UsageError(f"{target} exists already; refusing to overwrite it", hint="pass --overwrite to replace it")
    created_dest = not dest.exists()
    dest.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".import-{label}-", suffix=".partial", dir=dest))
    try:
        summaries: list[SummaryT] = []
        for task in selected:
            summary = convert(task, staging / task)
            summaries.append(summary)
            if progress is not None:
                progress(summary.line())
        present = set(selected) | {task for task in registered if looks_like_task(dest / task)}
        spec_path = dest / "benchmark.json"
        spec_data = benchmark_json([task for task in registered if task in present])
        spec = BenchmarkSpec.from_json(spec_data, path=spec_path)
        for task in selected:
            replace_folder(staging / task, dest / task, overwrite=overwrite)
        jsonio.write_json(spec_path, spec_data, indent=2)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if created_dest:
            try:
                dest.rmdir()
            except OSError:
                pass
        raise
    shutil.rmtree(staging, ignore_errors=True)
    return ImportResult(dest=dest, imported=summaries, missing=missing, benchmark_tasks=spec.tasks, benchmark_path=spec_path)
