"""Describing benchmark data: the file and split digests (computed by grader.data.task) that ``grader data info`` prints and reports cite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grader.data.benchmark import DEFAULT_PRIMARY, Benchmark, BenchmarkSpec, looks_like_task
from grader.data.registry import resolve_benchmark
from grader.data.task import Task


def describe_task(task: Task) -> dict[str, Any]:
    """File digests and per-split digests (with counts) of one task."""
    splits = {}
    for split in task.splits():
        qrels = task.qrels(split)
        splits[split] = {"sha256": task.split_digest(split), "queries": len(qrels), "judgements": qrels.n_judgements()}
    return {"root": str(task.root), "files": dict(task.file_digests), "splits": splits}


def describe(target: str) -> dict[str, Any]:
    """Describe a task folder, a benchmark folder, or a registered benchmark name."""
    path = Path(target)
    if looks_like_task(path) and not (path / "benchmark.json").exists():
        task = Task(path)
        spec = BenchmarkSpec(name=task.name, version="unversioned", primary_measure=DEFAULT_PRIMARY, tasks=(task.name,))
        benchmark = Benchmark(spec, path.parent)
        tasks = {task.name: describe_task(task)}
    else:
        benchmark = resolve_benchmark(target)
        tasks = {name: describe_task(benchmark.task(name)) for name in benchmark.spec.tasks}
    return {"benchmark": benchmark.name, "version": benchmark.spec.version, "root": str(benchmark.root), "tasks": tasks}
