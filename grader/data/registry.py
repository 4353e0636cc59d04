"""Registered benchmarks: names that ``--benchmark`` accepts besides a folder.

``mini`` ships with its data. ``coir`` and ``cat`` ship only their definitions;
their data lives in ``$GRADER_DATA_DIR/<name>`` (default ``~/.local/share/grader/<name>``)
after ``grader data import-coir`` / ``import-cat``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grader import jsonio
from grader.data.benchmark import Benchmark, BenchmarkSpec, load_benchmark_folder
from grader.errors import UsageError

#: Shipped benchmark definitions (and the data of those in BUNDLED_DATA): grader/bundled/<name>/
BUNDLED_DIR = Path(__file__).resolve().parent.parent / "bundled"
REGISTERED = ("coir", "cat", "mini")
BUNDLED_DATA = frozenset({"mini"})


def data_home() -> Path:
    """Where imported benchmark data lives."""
    configured = os.environ.get("GRADER_DATA_DIR")
    if configured:
        return Path(configured)
    return Path.home() / ".local" / "share" / "grader"


def registered_spec(name: str) -> BenchmarkSpec:
    """The shipped definition of a registered benchmark."""
    if name not in REGISTERED:
        raise UsageError(f"unknown benchmark {name!r} (registered: {', '.join(REGISTERED)}; or give a folder)")
    path = BUNDLED_DIR / name / "benchmark.json"
    return BenchmarkSpec.from_json(jsonio.load_file(path), path=path)


def registered_definition(name: str, tasks: Sequence[str] | None = None) -> dict[str, Any]:
    """The shipped ``benchmark.json`` of registered benchmark ``name``, as data; with ``tasks``, restricted to them.

    Tasks keep the definition's order; groups keep only their members among ``tasks``, and a group
    left empty is dropped. This is what the importers write as ``DEST/benchmark.json``.
    """
    if name not in REGISTERED:
        raise UsageError(f"unknown benchmark {name!r} (registered: {', '.join(REGISTERED)}; or give a folder)")
    data: dict[str, Any] = jsonio.load_file(BUNDLED_DIR / name / "benchmark.json")
    if tasks is None:
        return data
    keep = set(tasks)
    data["tasks"] = [task for task in data["tasks"] if task in keep]
    groups = {group: [m for m in members if m in keep] for group, members in data.get("groups", {}).items()}
    groups = {group: members for group, members in groups.items() if members}
    if groups:
        data["groups"] = groups
    else:
        data.pop("groups", None)
    return data


def data_root(name: str) -> Path:
    """Folder holding the task data of registered benchmark ``name``."""
    if name in BUNDLED_DATA:
        return BUNDLED_DIR / name
    return data_home() / name


def resolve_benchmark(name_or_path: str) -> Benchmark:
    """A registered benchmark name, or a path to a benchmark folder."""
    if name_or_path in REGISTERED:
        spec = registered_spec(name_or_path)
        root = data_root(name_or_path)
        if not root.is_dir():
            importer = "import-coir" if name_or_path == "coir" else "import-cat"
            raise UsageError(
                f"data of benchmark {name_or_path!r} not found at {root}",
                hint=f"import it with `grader data {importer} SRC {root}`, or set GRADER_DATA_DIR",
            )
        return Benchmark(spec, root)
    path = Path(name_or_path)
    if path.exists():
        return load_benchmark_folder(path)
    raise UsageError(f"unknown benchmark {name_or_path!r}: not a registered name ({', '.join(REGISTERED)}) nor a folder")
