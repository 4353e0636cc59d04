"""Benchmark: ``grader.jsonio`` (strict parsing, atomic writes) against the standard library's ``json``, side by side.

Not a test: timings live here, never in ``tests/``. Run from the repository root::

    .venv/bin/python bench/jsonio.py                      # 200,000 documents (about a minute)
    .venv/bin/python bench/jsonio.py --documents 20000    # a smoke run

The files are the ones this change moved onto ``jsonio``, at sizes a user meets:

* ``job.json``: what ``grader run --sandbox none`` hands its encoder process, every
  document and query text (``--documents`` texts of about 400 characters, a tenth as
  many queries); read with ``json.loads`` before, ``jsonio.load_file`` now;
* a task-store entry (``OUT/tasks/*.json``) of a scored task with ``--queries`` per-query
  values, read back on resume;
* the report schema, read once per process.

For each, the faster of ``--repeat`` reads (parse only, the file is in the page cache)
and the ratio ``jsonio / json``; for ``job.json`` the write too (``write_text`` before,
``write_text(jsonio.dumps(...))`` now: the child's scratch file is not renamed into place).
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader import jsonio  # noqa: E402
from grader.schemas import SCHEMA_DIR  # noqa: E402


def best_of(repeat: int, work: Callable[[], Any]) -> float:
    """The fastest of ``repeat`` wall-clock timings of ``work()``, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def read_plain(path: Path) -> Any:
    """The standard library's reading, as the code before this change did it."""
    return json.loads(path.read_text(encoding="utf-8"))


def job(documents: int, seed: int) -> dict[str, Any]:
    """An in-process encoder job like ``grading/inprocess.py`` writes (texts of random words)."""
    rng = random.Random(seed)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(5000)]

    def text(n: int) -> str:
        return " ".join(rng.choices(words, k=n))

    return {
        "folder": "/tmp/submission",
        "threads": 4,
        "sides": {
            "corpus": {"prefix": "", "texts": [text(70) for _ in range(documents)]},
            "queries": {"prefix": "query: ", "texts": [text(12) for _ in range(max(1, documents // 10))]},
        },
    }


def store_entry(queries: int, seed: int) -> dict[str, Any]:
    """A stored task result with per-query values (the largest part of an entry)."""
    rng = random.Random(seed)
    values = {f"q{i:07d}": rng.random() for i in range(queries)}
    return {
        "key": {"grader": "0.2.0", "task": "alpha", "split": "test", "measures": ["NDCG@10"]},
        "entry": {"name": "alpha", "status": "scored", "measures": {"NDCG@10": 0.5}, "per_query": {"NDCG@10": values}},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rows: list[tuple[str, str, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-jsonio-") as scratch:
        folder = Path(scratch)
        cases = {
            "job.json": (folder / "job.json", job(args.documents, args.seed)),
            "task-store entry": (folder / "entry.json", store_entry(args.queries, args.seed)),
        }
        for name, (path, value) in cases.items():
            path.write_text(json.dumps(value), encoding="utf-8")
            size = f"{path.stat().st_size / 1e6:.1f} MB"
            plain = best_of(args.repeat, partial(read_plain, path))
            strict = best_of(args.repeat, partial(jsonio.load_file, path))
            assert jsonio.load_file(path) == json.loads(path.read_text(encoding="utf-8"))
            rows.append((f"read {name}", size, plain, strict))
        path, value = cases["job.json"]
        plain = best_of(args.repeat, lambda: path.write_text(json.dumps(value), encoding="utf-8"))
        strict = best_of(args.repeat, lambda: path.write_text(jsonio.dumps(value, ensure_ascii=True), encoding="ascii"))
        rows.append(("write job.json", rows[0][1], plain, strict))
        schema = SCHEMA_DIR / "report.schema.json"
        plain = best_of(args.repeat * 20, lambda: json.loads(schema.read_text(encoding="utf-8")))
        strict = best_of(args.repeat * 20, lambda: jsonio.load_file(schema))
        rows.append(("read report.schema.json", f"{schema.stat().st_size / 1e3:.0f} kB", plain, strict))

    print(f"documents={args.documents} queries={args.queries} repeat={args.repeat} (best of)")
    print(f"| {'step':<26} | {'size':>8} | {'json (s)':>9} | {'jsonio (s)':>10} | {'ratio':>6} |")
    print(f"|{'-' * 28}|{'-' * 10}|{'-' * 11}|{'-' * 12}|{'-' * 8}|")
    for step, size, plain, strict in rows:
        print(f"| {step:<26} | {size:>8} | {plain:>9.4f} | {strict:>10.4f} | {strict / plain:>6.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
