"""The server's merge of a task's shard runs: whole runs in memory (before) against blocks of queries (now), side by side.

    .venv/bin/python bench/merge_slices.py [--queries 16000 162000] [--shards 4] [--depth 1000] [--documents 2390000]
        [--whole-limit-gib 8] [--markdown bench/results/merge_slices.md]

Per query count: ``--shards`` synthetic shard runs in the real format (compact runs with scores, as a shard job puts
them: every query's top ``--depth`` hits among the shard's own documents, random float64 scores in trec order) are
written to ``--workdir``; then, each in a fresh process with the server's allocator setting
(:func:`grader.hosting.allocator.return_large_buffers`):

* ``whole``: what the server did before: each run read whole and hashed (``read_bytes``), merged by
  :func:`~grader.retrieval.shard_exchange.merge_compact_runs` (dense queries x width arrays), written by
  ``atomic_write_bytes``;
* ``sliced``: :func:`~grader.retrieval.shard_stream.merge_shard_files`, what the server does now: a block of queries
  at a time from each file, the output appended, hashed and renamed.

Each prints its wall time and its peak resident memory (``VmHWM``) less what it held after its imports, and the
merged run's sha256: both must name the same bytes. The ``whole`` merge is not run where its need, extrapolated
from the smaller count's (it is linear in the queries), passes ``--whole-limit-gib`` (the machine is shared).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import machine  # noqa: E402

from grader.runs.compact import HEADER_BYTES, MAGIC, VERSION, WITH_SCORES  # noqa: E402

MIB = 1 << 20


def status_kib(field: str) -> int:
    """A ``/proc/self/status`` figure in KiB (``VmHWM``, ``VmRSS``)."""
    with open("/proc/self/status", "rb") as handle:
        for line in handle:
            if line.startswith(field.encode() + b":"):
                return int(line.split()[1])
    raise OSError(f"no {field}")


def write_shard(path: Path, shard: int, *, shards: int, queries: int, documents: int, depth: int, block: int = 2048) -> None:
    """Shard ``shard``'s run: every query's ``depth`` best among documents ``shard``, ``shard + shards``, ... (a random
    window of them), scores descending; written section by section, a block of queries at a time."""
    rng = np.random.default_rng(shard)
    per = documents // shards
    hits = queries * depth
    docs_at = HEADER_BYTES + 8 * queries
    scores_at = docs_at + 4 * hits
    with open(path, "wb") as handle:
        handle.write(struct.pack("<4sBBHIIIIQ", MAGIC, VERSION, WITH_SCORES, 0, documents, queries, depth, 0, hits))
        handle.write(np.arange(queries, dtype="<u4").tobytes())
        handle.write(np.full(queries, depth, dtype="<u4").tobytes())
        fd = handle.fileno()
        for begin in range(0, queries, block):
            rows = min(block, queries - begin)
            start = rng.integers(0, per, size=(rows, 1))
            docs = shard + shards * ((start + np.arange(depth)) % per)
            scores = -np.sort(-rng.random((rows, depth)), axis=1)
            os.pwrite(fd, docs.astype("<u4").tobytes(), docs_at + 4 * begin * depth)
            os.pwrite(fd, scores.astype("<f8").tobytes(), scores_at + 8 * begin * depth)


def child(mode: str, paths: list[Path], target: Path, *, queries: int, documents: int, depth: int) -> dict[str, object]:
    """One merge in this (fresh) process; its figures."""
    from grader.files import atomic_write_bytes
    from grader.hosting.allocator import return_large_buffers
    from grader.retrieval.shard_exchange import merge_compact_runs
    from grader.retrieval.shard_stream import StoredShard, merge_shard_files

    return_large_buffers()
    digests = [json.loads(path.with_suffix(path.suffix + ".sha256").read_text()) for path in paths]
    baseline = status_kib("VmHWM")
    started = time.perf_counter()
    if mode == "whole":

        def parts():  # type: ignore[no-untyped-def]
            for path, digest in zip(paths, digests):
                data = path.read_bytes()
                assert hashlib.sha256(data).hexdigest() == digest
                yield data

        merged = merge_compact_runs(parts(), documents=documents, queries=queries, depth=depth)
        atomic_write_bytes(target, merged)
        sha256 = hashlib.sha256(merged).hexdigest()
    else:
        shards = [StoredShard(path, digest, path.name) for path, digest in zip(paths, digests)]
        sha256 = merge_shard_files(shards, target, documents=documents, queries=queries, depth=depth)
    wall = time.perf_counter() - started
    return {"mode": mode, "wall_s": wall, "peak_mib": (status_kib("VmHWM") - baseline) / 1024, "baseline_mib": baseline / 1024, "sha256": sha256}


def measure(mode: str, paths: list[Path], target: Path, args: argparse.Namespace, queries: int) -> dict[str, object]:
    command = [sys.executable, __file__, "--child", mode, "--target", str(target), "--documents", str(args.documents), "--depth", str(args.depth)]
    command += ["--queries", str(queries), "--paths", *map(str, paths)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, nargs="+", default=[16_000, 162_000])
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--depth", type=int, default=1000)
    parser.add_argument("--documents", type=int, default=2_390_000)
    parser.add_argument("--whole-limit-gib", type=float, default=8.0)
    parser.add_argument("--workdir", type=Path, default=REPO / "bench" / "out" / "merge-slices")
    parser.add_argument("--markdown", type=Path, default=None, help="append the results as Markdown to this file")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--target", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--paths", type=Path, nargs="*", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.paths, args.target, queries=args.queries[0], documents=args.documents, depth=args.depth)))
        return
    lines = [
        machine.machine_line(),
        f"# {args.shards} shards, depth {args.depth}, {args.documents:,} documents; peak: VmHWM less the process after its imports",
        "| queries | shard runs (MiB) | whole wall (s) | whole peak (MiB) | sliced wall (s) | sliced peak (MiB) | peak whole / sliced | wall sliced / whole | same bytes |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    print("\n".join(lines), flush=True)
    per_query_mib: float | None = None
    for queries in args.queries:
        folder = args.workdir / f"{queries}"
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for shard in range(args.shards):
            path = folder / f"task.{shard}"
            write_shard(path, shard, shards=args.shards, queries=queries, documents=args.documents, depth=args.depth)
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                while chunk := handle.read(16 * MIB):
                    digest.update(chunk)
            path.with_suffix(path.suffix + ".sha256").write_text(json.dumps(digest.hexdigest()))
            paths.append(path)
        size = sum(path.stat().st_size for path in paths) / MIB
        sliced = measure("sliced", paths, folder / "sliced.run", args, queries)
        (folder / "sliced.run").unlink()
        need = None if per_query_mib is None else per_query_mib * queries / 1024
        if need is not None and need > args.whole_limit_gib:
            whole: dict[str, object] | None = None
            note = f"not run: about {need:.1f} GiB by the smaller count's"
        else:
            whole = measure("whole", paths, folder / "whole.run", args, queries)
            (folder / "whole.run").unlink()
            per_query_mib = float(whole["peak_mib"]) / queries  # type: ignore[arg-type]
            note = ""
        if whole is None:
            row = f"| {queries:,} | {size:,.0f} | {note} | (est. {need * 1024:,.0f}) | {sliced['wall_s']:.1f} | {sliced['peak_mib']:.0f} | est. {need * 1024 / float(sliced['peak_mib']):.0f} | | |"  # type: ignore[operator, arg-type]
        else:
            row = (
                f"| {queries:,} | {size:,.0f} | {whole['wall_s']:.1f} | {whole['peak_mib']:,.0f} | {sliced['wall_s']:.1f} | {sliced['peak_mib']:.0f} | "
                f"{float(whole['peak_mib']) / float(sliced['peak_mib']):.1f} | {float(sliced['wall_s']) / float(whole['wall_s']):.2f} | "  # type: ignore[arg-type]
                f"{'yes' if whole['sha256'] == sliced['sha256'] else 'NO'} |"
            )
        lines.append(row)
        print(row, flush=True)
        for path in paths:
            path.unlink()
            path.with_suffix(path.suffix + ".sha256").unlink()
    if args.markdown is not None:
        with open(args.markdown, "a", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
