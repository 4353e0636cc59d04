"""Benchmark: resident memory of a shard's spool-and-search path is bounded by a setting, not by the corpus.

Not a test of results (``tests/test_shards.py`` checks those): this measures memory.
Run from the repository root::

    .venv/bin/python bench/shard_memory.py                          # N = 50k, 200k, 400k x 384 dims, 32 MiB search memory
    .venv/bin/python bench/shard_memory.py --docs 20000 --dim 64    # a smoke run

For each corpus size, a fresh child process (``--child``):

1. warms up: imports, one tiny exact search (numba loads or compiles its
   kernels), then reads its anonymous resident memory (``RssAnon`` of
   ``/proc/self/status``): the *baseline*;
2. "encodes": generates the corpus in chunks of ``--chunk`` rows (random
   normal, L2-normalised float32, as an encoder's chunk would come out) and
   appends each to a :class:`~grader.retrieval.spool.SpoolWriter`, so no more
   than one chunk is ever in memory;
3. searches the spool (:func:`~grader.retrieval.shard_run.search_spool`): blocks
   sized from ``--search-memory``, each verified by its SHA-256, searched
   exactly and merged; then deletes the spool.

A thread samples ``RssAnon`` every millisecond throughout (page cache of the
spool file is not anonymous memory, and is not counted). The child prints one
JSON line; the parent prints a Markdown table of peak anonymous RSS above the
baseline next to the corpus's bytes, and writes it to
``bench/results/shard_memory.md`` (``--output`` overrides).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def anonymous_rss() -> int:
    """This process's anonymous resident memory, bytes (``RssAnon``)."""
    with open("/proc/self/status", "rb") as handle:
        for line in handle:
            if line.startswith(b"RssAnon:"):
                return int(line.split()[1]) * 1024
    raise OSError("no RssAnon in /proc/self/status")


class PeakSampler:
    """Samples ``RssAnon`` in a thread every ``period_s``; ``peak`` is the largest seen."""

    def __init__(self, period_s: float = 0.001) -> None:
        self.period_s = period_s
        self.peak = anonymous_rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, anonymous_rss())
            time.sleep(self.period_s)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, anonymous_rss())


def child(docs: int, dim: int, queries: int, k: int, chunk: int, search_memory: int, folder: Path) -> dict[str, float | int]:
    """Spool ``docs`` synthetic vectors and search them; the memory figures (run in a fresh process)."""
    import numpy as np

    from grader.retrieval.search import exact_top_k
    from grader.retrieval.shard_run import block_rows_for, search_spool
    from grader.retrieval.spool import SpoolWriter

    rng = np.random.default_rng(0)
    warm = rng.standard_normal((64, dim), dtype=np.float32)
    exact_top_k(warm[:4], warm, 8)  # numba kernels loaded (or compiled) before the baseline
    query_vectors = rng.standard_normal((queries, dim), dtype=np.float32)
    query_vectors /= np.linalg.norm(query_vectors, axis=1, keepdims=True)
    doc_ids = [f"doc{n:07d}" for n in range(docs)]
    baseline = anonymous_rss()
    started = time.perf_counter()
    with PeakSampler() as sampler:
        writer = SpoolWriter(folder / "shard-0.f32", dim, block_rows_for(search_memory, dim))
        for begin in range(0, docs, chunk):
            block = rng.standard_normal((min(chunk, docs - begin), dim), dtype=np.float32)
            block /= np.linalg.norm(block, axis=1, keepdims=True)
            writer.append(block)
            del block
        spool = writer.finish()
        written = time.perf_counter()
        ranking = search_spool(query_vectors, spool, doc_ids, k)
        spool.delete()
    finished = time.perf_counter()
    assert ranking.scores.shape == (queries, min(k, docs))
    return {
        "docs": docs,
        "dim": dim,
        "corpus_bytes": docs * dim * 4,
        "search_memory": search_memory,
        "block_rows": block_rows_for(search_memory, dim),
        "baseline_anon": baseline,
        "peak_anon": sampler.peak,
        "above_baseline": sampler.peak - baseline,
        "spool_s": written - started,
        "search_s": finished - written,
    }


def measure(docs: int, dim: int, queries: int, k: int, chunk: int, search_memory: int) -> dict[str, float | int]:
    """Run :func:`child` in a fresh interpreter (the figures are that process's alone)."""
    with tempfile.TemporaryDirectory(prefix="grader-shard-memory-") as folder:
        command = [sys.executable, __file__, "--child", "--docs", str(docs), "--dim", str(dim), "--queries", str(queries)]
        command += ["--k", str(k), "--chunk", str(chunk), "--search-memory", str(search_memory), "--folder", folder]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
        return json.loads(done.stdout.strip().splitlines()[-1])


def _mib(value: float) -> str:
    return f"{value / (1 << 20):,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--docs", type=int, nargs="*", default=[50_000, 200_000, 400_000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=256)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--chunk", type=int, default=8192)
    parser.add_argument("--search-memory", type=int, default=32 << 20)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "shard_memory.md")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.docs[0], args.dim, args.queries, args.k, args.chunk, args.search_memory, args.folder)))
        return
    rows = [measure(n, args.dim, args.queries, args.k, args.chunk, args.search_memory) for n in args.docs]
    lines = [
        f"# Shard spool and blocked search: anonymous RSS vs corpus size ({platform.machine()}, {os.cpu_count()} cores)",
        "",
        f"`bench/shard_memory.py --docs {' '.join(map(str, args.docs))} --dim {args.dim} --queries {args.queries} --k {args.k} "
        f"--chunk {args.chunk} --search-memory {args.search_memory}`, {time.strftime('%Y-%m-%d', time.gmtime())}.",
        "",
        "| documents | corpus (MiB) | search memory (MiB) | block rows | baseline anon (MiB) | peak anon (MiB) | above baseline (MiB) | spool (s) | search (s) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['docs']:,} | {_mib(row['corpus_bytes'])} | {_mib(row['search_memory'])} | {row['block_rows']:,} | {_mib(row['baseline_anon'])} "
            f"| {_mib(row['peak_anon'])} | {_mib(row['above_baseline'])} | {row['spool_s']:.2f} | {row['search_s']:.2f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
