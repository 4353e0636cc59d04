"""Benchmark: a shard job's search memory against the task's query count, whole (before) and a block of queries at a time.

Run from the repository root::

    .venv/bin/python bench/shard_search_queries.py                      # 2k, 8k, 32k queries x 16,384 documents x 384 dims
    .venv/bin/python bench/shard_search_queries.py --queries 500 2000   # a smoke run

At CoIR's full shape a shard job's process peaked at 3.9 GiB (bench/results/coir_shape.md): it searched every
query of its task at once and built the whole run in memory. For each query count, two fresh child processes
(``--child``) search the same synthetic shard (random normal rows, L2-normalised float32, depth 1,000, the search
blocks of a 256 MiB ``search_memory``):

* ``whole``: what a shard job did before: :func:`~grader.retrieval.shard_run.search_blocks` over every query, then
  :func:`~grader.retrieval.shard_exchange.dense_run` to bytes, written to a file;
* ``blocked``: what it does now: :func:`~grader.retrieval.shard_output.search_to_file`, a block of queries
  (:func:`~grader.retrieval.shard_output.query_block_for`) at a time.

Each child warms up (numba's kernels loaded), generates its vectors, reads its anonymous resident memory (the
baseline) and samples it every millisecond while it searches (bench/shard_memory.py's sampler); it prints the peak
above the baseline, the seconds, and the output's sha256, which must be equal between the two (the parent checks).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import machine  # noqa: E402
from shard_memory import PeakSampler, anonymous_rss  # noqa: E402

DEPTH = 1000
SEARCH_MEMORY = 256 << 20


def child(mode: str, docs: int, dim: int, queries: int, folder: Path) -> dict[str, object]:
    """Search one synthetic shard with ``queries`` queries in ``mode``; the figures (run in a fresh process)."""
    import numpy as np

    from grader.retrieval.search import exact_top_k
    from grader.retrieval.shard_exchange import dense_run, search_width
    from grader.retrieval.shard_output import query_block_for, search_to_file
    from grader.retrieval.shard_run import block_rows_for, search_blocks

    rng = np.random.default_rng(0)
    warm = rng.standard_normal((64, dim), dtype=np.float32)
    exact_top_k(warm[:4], warm, 8)  # numba's kernels loaded before the baseline
    corpus = rng.standard_normal((docs, dim), dtype=np.float32)
    corpus /= np.linalg.norm(corpus, axis=1, keepdims=True)
    query_vectors = rng.standard_normal((queries, dim), dtype=np.float32)
    query_vectors /= np.linalg.norm(query_vectors, axis=1, keepdims=True)
    ranks = rng.permutation(docs * 4)[:docs].astype(np.int64)  # a shard's rows name documents of a larger corpus
    rows = block_rows_for(SEARCH_MEMORY, dim)

    def blocks():  # type: ignore[no-untyped-def]
        return ((first, corpus[first : first + rows]) for first in range(0, docs, rows))

    target = folder / "shard.run"
    baseline = anonymous_rss()
    started = time.perf_counter()
    with PeakSampler() as sampler:
        if mode == "whole":
            scores, found = search_blocks(query_vectors, blocks(), ranks, search_width(DEPTH))
            target.write_bytes(dense_run(scores, np.where(found >= 0, ranks[np.maximum(found, 0)], -1), documents=docs * 4, depth=DEPTH))
            del scores, found
        else:
            block = query_block_for(SEARCH_MEMORY, search_width(DEPTH))
            search_to_file(query_vectors, blocks, ranks, target, documents=docs * 4, depth=DEPTH, block_queries=block)
    seconds = time.perf_counter() - started
    return {
        "mode": mode,
        "queries": queries,
        "above_baseline": sampler.peak - baseline,
        "seconds": seconds,
        "run_bytes": target.stat().st_size,
        "sha256": hashlib.sha256(target.read_bytes()).hexdigest(),
    }


def measure(mode: str, docs: int, dim: int, queries: int) -> dict[str, object]:
    """:func:`child` in a fresh interpreter (the figures are that process's alone)."""
    with tempfile.TemporaryDirectory(prefix="grader-shard-queries-") as folder:
        command = [sys.executable, __file__, "--child", mode, "--docs", str(docs), "--dim", str(dim), "--queries", str(queries), "--folder", folder]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
        return json.loads(done.stdout.strip().splitlines()[-1])


def _mib(value: object) -> str:
    return f"{float(value) / (1 << 20):,.1f}"  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--queries", type=int, nargs="+", default=[2000, 8000, 32000])
    parser.add_argument("--docs", type=int, default=16384)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--child", choices=["whole", "blocked"], default=None)
    parser.add_argument("--folder", type=Path, default=None)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.docs, args.dim, args.queries[0], args.folder)))
        return
    print(f"$ .venv/bin/python bench/shard_search_queries.py {' '.join(sys.argv[1:])}".rstrip())
    print(machine.machine_line())
    print(f"# {args.docs:,} documents x {args.dim} dims, depth {DEPTH}, search_memory {SEARCH_MEMORY >> 20} MiB; peak RssAnon above the baseline")
    print("| queries | whole: peak (MiB) | blocked: peak (MiB) | whole (s) | blocked (s) | blocked / whole time | run (MB) | same bytes |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for queries in args.queries:
        whole = measure("whole", args.docs, args.dim, queries)
        blocked = measure("blocked", args.docs, args.dim, queries)
        same = whole["sha256"] == blocked["sha256"]
        ratio = float(blocked["seconds"]) / float(whole["seconds"])  # type: ignore[arg-type]
        print(
            f"| {queries:,} | {_mib(whole['above_baseline'])} | {_mib(blocked['above_baseline'])} | {float(whole['seconds']):.1f} | "  # type: ignore[arg-type]
            f"{float(blocked['seconds']):.1f} | {ratio:.2f} | {int(whole['run_bytes']) / 1e6:,.1f} | {'yes' if same else 'NO'} |",  # type: ignore[call-overload]
            flush=True,
        )
        if not same:
            raise SystemExit(f"{queries} queries: the blocked search wrote other bytes than the whole search")


if __name__ == "__main__":
    main()
