"""What a process that checks and merges shard runs in threads, as `grader serve` does, keeps between grades: the options side by side.

    .venv/bin/python bench/merge_memory.py [--queries 900] [--shards 6] [--grades 6] [--modes none mapped child mmap trim both]

The server's share of a sharded grade, without the server: per "grade", each of ``--shards`` shard runs (a compact
run with scores, ``--queries`` queries at depth 1,000 plus the tie slack, over ``--documents``; written once to
bench/out/merge-memory/) is read and checked (``check_shard_run``) in a pool of 40 threads (the put routes), then
merged (``merge_compact_runs``) in one of them (the coordinator's status call). Each mode runs in a fresh process:

* ``none``: glibc's defaults (the server before the fix);
* ``mapped``: the runs read through ``mmap`` instead of ``read_bytes`` (option c);
* ``child``: the merge in a spawned process that stays (as the scoring pool's processes do; option b): its own
  memory is printed beside the parent's;
* ``mmap``: glibc's mmap threshold fixed at 1 MiB (``mallopt``; option a);
* ``trim``: ``malloc_trim(0)`` after each merge;
* ``both``: ``mmap`` and ``trim`` (what the server does: grader/hosting/allocator.py).

Per grade: the process's RssAnon once the grade is done (idle) and its peak during it (sampled every 2 ms).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import multiprocessing
import os
import platform
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import cast

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from grader.retrieval.shard_exchange import check_shard_run, dense_run, merge_compact_runs, search_width  # noqa: E402

DEPTH = 1000
MODES = ("none", "mapped", "child", "mmap", "trim", "both")


def anonymous_rss_mib() -> float:
    """This process's RssAnon, MiB."""
    with open("/proc/self/status", "rb") as handle:
        for line in handle:
            if line.startswith(b"RssAnon:"):
                return int(line.split()[1]) / 1024
    raise OSError("no RssAnon")


def write_runs(folder: Path, shards: int, queries: int, documents: int) -> list[Path]:
    """The shard runs, made once per (shards, queries, documents): random scores, each shard's own documents."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    per = documents // shards
    width = search_width(DEPTH)
    for shard in range(shards):
        path = folder / f"{shards}-{queries}-{documents}.{shard}"
        if not path.exists():
            rng = np.random.default_rng(shard)
            docs = np.argsort(rng.random((queries, per)), axis=1)[:, :width] + shard * per
            scores = -np.sort(-rng.random((queries, width)), axis=1)
            path.write_bytes(dense_run(scores, docs, documents=documents, depth=DEPTH))
        paths.append(path)
    return paths


def read(path: Path, mapped: bool) -> bytes:
    """A run's bytes, read whole or mapped (an mmap is read as bytes are: ``decode_run`` copies what it keeps)."""
    if not mapped:
        return path.read_bytes()
    with open(path, "rb") as handle:
        return cast(bytes, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))


def merge(paths: list[Path], queries: int, documents: int, mapped: bool) -> float:
    """Merge the runs; the merging process's RssAnon afterwards (MiB)."""
    merge_compact_runs((read(path, mapped) for path in paths), documents=documents, queries=queries, depth=DEPTH)
    return anonymous_rss_mib()


def run(mode: str, paths: list[Path], queries: int, documents: int, grades: int) -> dict[str, object]:
    """In a fresh process: ``grades`` grades in ``mode``; RssAnon at the start, idle and peak per grade (and the child's idle)."""
    libc = ctypes.CDLL(None)
    if mode in ("mmap", "both"):
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
    mapped = mode == "mapped"
    peak = [0.0]

    def sample() -> None:
        while True:
            peak[0] = max(peak[0], anonymous_rss_mib())
            time.sleep(0.002)

    threading.Thread(target=sample, daemon=True).start()
    pool = ThreadPoolExecutor(40)
    children = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) if mode == "child" else None
    figures: dict[str, object] = {"mode": mode, "start": anonymous_rss_mib(), "idle": [], "peak": [], "child_idle": []}
    merge_s = 0.0
    for _ in range(grades):
        peak[0] = 0.0
        list(pool.map(lambda path: check_shard_run(read(path, mapped), documents=documents, queries=queries, depth=DEPTH), paths))
        started = time.perf_counter()
        if children is not None:
            figures["child_idle"].append(children.submit(merge, paths, queries, documents, False).result())  # type: ignore[attr-defined]
        else:
            pool.submit(merge, paths, queries, documents, mapped).result()
        merge_s += time.perf_counter() - started
        if mode in ("trim", "both"):
            libc.malloc_trim(0)
        time.sleep(0.05)
        figures["idle"].append(anonymous_rss_mib())  # type: ignore[attr-defined]
        figures["peak"].append(peak[0])  # type: ignore[attr-defined]
    figures["merge_s"] = merge_s / grades
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=900)
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--shards", type=int, default=6)
    parser.add_argument("--grades", type=int, default=6)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--workdir", type=Path, default=REPO / "bench" / "out" / "merge-memory")
    parser.add_argument("--markdown", type=Path, default=None, help="append the results as Markdown to this file")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    paths = write_runs(args.workdir, args.shards, args.queries, args.documents)
    if args.child:
        print(json.dumps(run(args.child, paths, args.queries, args.documents, args.grades)))
        return
    lines = [
        "$ .venv/bin/python bench/merge_memory.py " + " ".join(sys.argv[1:]),
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, nproc {os.cpu_count()}, load {os.getloadavg()[0]:.1f}, "
        f"glibc {platform.libc_ver()[1]}; {args.shards} shard runs of {paths[0].stat().st_size / (1 << 20):.1f} MiB a grade",
        "| mode | start (MiB) | idle after each grade (MiB) | peak during each grade (MiB) | merge (s) |",
        "|---|---:|---|---|---:|",
    ]
    print("\n".join(lines), flush=True)
    for mode in args.modes:
        done = subprocess.run(
            [sys.executable, __file__, "--child", mode, *sys.argv[1:]], capture_output=True, text=True, check=True, env={**os.environ}
        )
        figures = json.loads(done.stdout)
        idle = ", ".join(f"{value:.0f}" for value in figures["idle"])
        if figures["child_idle"]:
            idle += " (the merging child: " + ", ".join(f"{value:.0f}" for value in figures["child_idle"]) + ")"
        peaks = ", ".join(f"{value:.0f}" for value in figures["peak"])
        lines.append(f"| {mode} | {figures['start']:.0f} | {idle} | {peaks} | {figures['merge_s']:.2f} |")
        print(lines[-1], flush=True)
    if args.markdown:
        with open(args.markdown, "a", encoding="utf-8") as out:
            out.write("\n```\n" + "\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
