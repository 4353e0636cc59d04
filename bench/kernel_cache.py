"""Benchmark: the first exact search of a process, with numba's disk cache cold, warm, and off.

Not a test: timings live here, never in ``tests/``. Run from the repository root::

    .venv/bin/python bench/kernel_cache.py              # 2 rounds (about 2 minutes on 2 cores)
    .venv/bin/python bench/kernel_cache.py --rounds 3

Each round starts with an empty cache folder (``NUMBA_CACHE_DIR`` in a temp
folder) and runs three fresh processes, one after the other:

* *off*: ``GRADER_NUMBA_CACHE=off``, what every process paid before the cache
  (the kernels compiled in memory, nothing written);
* *cold*: the first process with the cache on (compiles and writes the cache);
* *warm*: the next process (loads the kernels from the cache).

Each process imports the grader, then times its first :func:`exact_top_k` (200
queries x 5,000 documents x 64 dims, k = 100; the search itself takes
milliseconds, so this is compile or load time) and the whole process (spawn to
exit, wall and CPU time: on a shared machine the CPU time is the figure to compare). The three results must be bit-identical (SHA-256 of scores and rows).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child() -> None:
    """One process: import, first search, print figures as JSON."""
    started = time.perf_counter()
    import numpy as np

    from grader.retrieval import exact
    from grader.retrieval.search import exact_top_k

    imported = time.perf_counter() - started
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((200, 64)).astype(np.float32)
    corpus = rng.standard_normal((5000, 64)).astype(np.float32)
    corpus[100:110] = corpus[5]
    started = time.perf_counter()
    scores, rows = exact_top_k(queries, corpus, 100)
    first = time.perf_counter() - started
    digest = hashlib.sha256(scores.tobytes() + rows.tobytes()).hexdigest()
    print(json.dumps({"cache": exact.CACHE, "import": imported, "first_search": first, "digest": digest}))


def run(mode: str, cache_dir: Path) -> dict[str, float | str | bool]:
    env = {k: v for k, v in os.environ.items() if k not in ("GRADER_NUMBA_CACHE", "XDG_CACHE_HOME")}
    env["NUMBA_CACHE_DIR"] = str(cache_dir)
    if mode == "off":
        env["GRADER_NUMBA_CACHE"] = "off"
    started = time.perf_counter()
    child_process = subprocess.Popen([sys.executable, __file__, "--child"], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert child_process.stdout is not None
    stdout = child_process.stdout.read()
    _, status, usage = os.wait4(child_process.pid, 0)  # this child's own CPU time (user + system, all threads)
    child_process.returncode = os.waitstatus_to_exitcode(status)
    assert child_process.returncode == 0, f"{mode} process failed ({child_process.returncode})"
    figures = json.loads(stdout.strip().splitlines()[-1])
    figures["process"] = time.perf_counter() - started
    figures["cpu"] = usage.ru_utime + usage.ru_stime
    assert figures["cache"] == (mode != "off"), (mode, figures)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child()
        return
    results: dict[str, list[dict]] = {"off": [], "cold": [], "warm": []}
    for round_ in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="grader-numba-bench.") as folder:
            for mode in ("off", "cold", "warm"):
                figures = run(mode, Path(folder))
                results[mode].append(figures)
                print(
                    f"round {round_ + 1} {mode:>4}: first search {figures['first_search']:6.2f} s, process {figures['process']:6.2f} s, CPU {figures['cpu']:6.2f} s",
                    flush=True,
                )
    digests = {f["digest"] for runs in results.values() for f in runs}
    assert len(digests) == 1, f"results differ between processes: {digests}"
    median = {mode: {key: statistics.median(f[key] for f in runs) for key in ("first_search", "process", "cpu")} for mode, runs in results.items()}
    print(f"\nmedian of {args.rounds} rounds (load average {os.getloadavg()[0]:.1f}); all {3 * args.rounds} results bit-identical")
    print("| process | first exact search, wall (s) | whole process, wall (s) | whole process, CPU (s) |")
    print("|---|---:|---:|---:|")
    for mode, label in (("off", "cache off (before)"), ("cold", "cache on, first process"), ("warm", "cache on, later process")):
        print(f"| {label} | {median[mode]['first_search']:.2f} | {median[mode]['process']:.2f} | {median[mode]['cpu']:.2f} |")
    print(
        f"\nwarm / off: first search {median['warm']['first_search'] / median['off']['first_search']:.3f}x, "
        f"process {median['warm']['process'] / median['off']['process']:.3f}x, CPU {median['warm']['cpu'] / median['off']['cpu']:.3f}x; "
        f"cold / off: process {median['cold']['process'] / median['off']['process']:.3f}x, CPU {median['cold']['cpu'] / median['off']['cpu']:.3f}x"
    )


if __name__ == "__main__":
    main()
