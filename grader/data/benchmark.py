"""Benchmarks: a named set of tasks, their grouping and primary measure.

A benchmark is a folder of task folders, optionally with a ``benchmark.json``
(schema ``schemas/benchmark.schema.json``). Without one, every sub-folder that
looks like a task is a task, the primary measure is NDCG@10 and nothing is grouped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader import jsonio
from grader.data.task import Task
from grader.data.textfiles import find_data_file
from grader.errors import DataError, UsageError
from grader.schemas import first_error, json_pointer

DEFAULT_PRIMARY = "NDCG@10"


@dataclass(frozen=True)
class BenchmarkSpec:
    """What a benchmark is, independent of where its data lives."""

    name: str
    version: str
    primary_measure: str
    tasks: tuple[str, ...]
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    default_split: str = "test"
    measures: tuple[str, ...] = ()
    description: str = ""
    sample_split: str = "dev"
    task_info: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, path: Path) -> BenchmarkSpec:
        """Validate ``data`` against the benchmark schema and build the spec."""
        error = first_error("benchmark", data)
        if error is not None:
            raise DataError(f"{error.message}", path=path, field=json_pointer(error))
        tasks = tuple(data["tasks"])
        groups = {name: tuple(members) for name, members in data.get("groups", {}).items()}
        seen: dict[str, str] = {}
        for group, members in groups.items():
            for member in members:
                if member not in tasks:
                    raise DataError(f"group {group!r} names unknown task {member!r}", path=path, field=f"/groups/{group}")
                if member in seen:
                    raise DataError(f"task {member!r} is in groups {seen[member]!r} and {group!r}", path=path, field=f"/groups/{group}")
                seen[member] = group
            if group in tasks:
                raise DataError(f"group {group!r} has the name of a task", path=path, field=f"/groups/{group}")
        return cls(
            name=data["name"],
            version=data["version"],
            primary_measure=data["primary_measure"],
            tasks=tasks,
            groups=groups,
            default_split=data.get("default_split", "test"),
            measures=tuple(data.get("measures", ())),
            description=data.get("description", ""),
            sample_split=data.get("sample_split", "dev"),
            task_info={name: dict(info) for name, info in data.get("task_info", {}).items()},
        )

    def full_size(self, task: str) -> tuple[int, int] | None:
        """(corpus documents, hidden-split queries) of ``task`` as the definition states them, if it does."""
        info = self.task_info.get(task, {})
        sizes = info.get("sizes")
        if isinstance(sizes, Mapping):
            corpus, queries = sizes.get("corpus"), sizes.get("queries")
        else:  # the bundled mini records corpus_size and queries per split
            corpus = info.get("corpus_size")
            per_split = info.get("queries")
            queries = per_split.get(self.default_split) if isinstance(per_split, Mapping) else None
        return (corpus, queries) if isinstance(corpus, int) and isinstance(queries, int) else None

    def units(self) -> list[tuple[str, tuple[str, ...]]]:
        """The units the benchmark mean is taken over, in task order.

        Each unit is ``(name, member tasks)``: a group, or an ungrouped task alone.
        """
        member_of = {task: group for group, members in self.groups.items() for task in members}
        units: list[tuple[str, tuple[str, ...]]] = []
        emitted: set[str] = set()
        for task in self.tasks:
            group = member_of.get(task)
            if group is None:
                units.append((task, (task,)))
            elif group not in emitted:
                emitted.add(group)
                units.append((group, self.groups[group]))
        return units

    def aggregate(self, task_scores: Mapping[str, float | None], tasks: Sequence[str] | None = None) -> dict[str, Any]:
        """Combine per-task primary scores into the benchmark score.

        Groups are averaged over their members first; the benchmark score is the
        unweighted mean over groups and ungrouped tasks. Only the ``tasks`` graded
        (default: all) take part; a unit whose graded members include a failed task
        (score ``None``) is ``None``, and so is the benchmark score. ``complete`` says
        whether every task of the benchmark was graded and scored.
        """
        graded = set(self.tasks if tasks is None else tasks)
        unit_scores: dict[str, float | None] = {}
        for unit, members in self.units():
            present = [task for task in members if task in graded]
            if not present:
                continue
            values = [task_scores.get(task) for task in present]
            unit_scores[unit] = None if any(v is None for v in values) else math.fsum(values) / len(values)  # type: ignore[arg-type]
        scores = list(unit_scores.values())
        overall = None if not scores or any(s is None for s in scores) else math.fsum(scores) / len(scores)  # type: ignore[arg-type]
        complete = graded >= set(self.tasks) and all(task_scores.get(t) is not None for t in self.tasks)
        groups = {unit: score for unit, score in unit_scores.items() if unit in self.groups}
        result: dict[str, Any] = {"measure": self.primary_measure, "score": overall, "complete": complete, "groups": groups}
        if groups:  # which graded tasks each group averages, so a report alone can re-apply the aggregation
            result["group_members"] = {group: [task for task in self.groups[group] if task in graded] for group in groups}
        return result


class Benchmark:
    """A benchmark spec bound to the folder that holds its task data."""

    def __init__(self, spec: BenchmarkSpec, root: Path) -> None:
        self.spec = spec
        self.root = root

    @property
    def name(self) -> str:
        return self.spec.name

    def task(self, name: str) -> Task:
        """The task ``name``; raises if the benchmark has no such task or its data is missing."""
        if name not in self.spec.tasks:
            raise UsageError(f"benchmark {self.name!r} has no task {name!r} (tasks: {', '.join(self.spec.tasks)})")
        return Task(self.root / name, name=name)

    def select(self, names: Sequence[str] | None) -> list[str]:
        """Validate a task selection (``None`` = all tasks) and return it in benchmark order."""
        if not names:
            return list(self.spec.tasks)
        unknown = [name for name in names if name not in self.spec.tasks]
        if unknown:
            raise UsageError(f"benchmark {self.name!r} has no task {unknown[0]!r} (tasks: {', '.join(self.spec.tasks)})")
        return [name for name in self.spec.tasks if name in set(names)]


def looks_like_task(folder: Path) -> bool:
    """Whether ``folder`` holds a task (a corpus file)."""
    return folder.is_dir() and find_data_file(folder, "corpus.jsonl") is not None


def load_benchmark_folder(root: str | Path) -> Benchmark:
    """Load a benchmark from a folder (with or without ``benchmark.json``)."""
    root = Path(root)
    if not root.is_dir():
        raise DataError("benchmark folder not found", path=root)
    spec_path = root / "benchmark.json"
    if spec_path.is_file():
        data = jsonio.load_file_as(spec_path, DataError)
        spec = BenchmarkSpec.from_json(data, path=spec_path)
    else:
        tasks = tuple(sorted(p.name for p in root.iterdir() if looks_like_task(p)))
        if not tasks:
            raise DataError("no benchmark.json and no task folders (with corpus.jsonl) inside", path=root)
        spec = BenchmarkSpec(name=root.name, version="unversioned", primary_measure=DEFAULT_PRIMARY, tasks=tasks)
    return Benchmark(spec, root)
