"""Registered benchmarks: names that ``--benchmark`` accepts besides a folder.

``mini`` ships with its data. ``coir`` and ``cat`` ship only their definitions;
their data lives in ``$GRADER_DATA_DIR/<name>`` (default ``~/.local/share/grader/<name>``)
after ``grader data import-coir`` / ``import-cat``.
"""

from __future__ import annotations

import os
from pathlib import Path

from grader import jsonio
from grader.data.benchmark import Benchmark, BenchmarkSpec, load_benchmark_folder
from grader.errors import UsageError

BENCHMARKS_DIR = Path(__file__).resolve().parent.parent / "benchmarks"
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
    path = BENCHMARKS_DIR / name / "benchmark.json"
    return BenchmarkSpec.from_json(jsonio.load_file(path), path=path)


def data_root(name: str) -> Path:
    """Folder holding the task data of registered benchmark ``name``."""
    if name in BUNDLED_DATA:
        return BENCHMARKS_DIR / name
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
