"""Which registered tasks an importer converts: shared by the CoIR and CAT importers."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from grader.errors import DataError, UsageError


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
