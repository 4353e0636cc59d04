"""What a long-lived `grader worker` keeps over many sharded grades: its memory by category after each grade.

    GRADER_RUNNER_IMAGE=grader-runner:dev .venv/bin/python bench/worker_growth.py \
        [--grades 20] [--documents 30000] [--queries 500] [--shard-documents 8192] [--heap DIR] [--markdown PATH]

One fresh single-machine `grader serve --workers 1` (SQLite, sharded: ``[sharding] shard_documents``, quotas raised)
grades submissions_example/onnx-lsa on the synthetic task of bench/synthetic_corpus.py (bench/out/synthetic-N-qQ-s0,
made once) ``--grades`` times, one after the other; its ONE local worker coordinates every grade and runs all its
shard jobs (a query job and one per shard, each in a forked child that lives for the job). Once before the first grade
(once the worker has started and made its first claim) and after each grade, once the worker has no child left and
``--settle-s`` seconds have passed, the worker process's memory is read from /proc/PID/smaps and /proc/PID/status:

* ``heap``: the anonymous pages of the main arena's ``[heap]`` (glibc's brk heap);
* ``anon >= 1 MiB`` / ``anon < 1 MiB``: the other anonymous mappings (no file behind them: glibc's thread arenas,
  blocks mapped apart, thread stacks, numpy and onnxruntime buffers), split by the mapping's size, with their count;
* ``file: anon``: the private copies in file-backed mappings (a shared library's relocated data and BSS);
* ``file: resident``: file pages resident (shared libraries, mapped files), and how many files are mapped;
* ``RssAnon`` and ``RssFile`` of /proc/PID/status (``heap`` + both ``anon`` + ``file: anon`` + stack = RssAnon).

With ``--heap DIR`` the worker traces its Python allocations from its first snapshot (bench/heaptrace/sitecustomize.py,
as bench/scale_corpus.py ``--heap`` does; the server is not traced) and snapshots them at each reading into DIR:
``traced`` is tracemalloc's current bytes, and tracemalloc's own memory (which RssAnon then counts) is shown apart.
bench/heap_diff.py DIR/PID-2.snap DIR/PID-K.snap names what grew. The files mapped after the first grade and not
before are named at the end, the largest first.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import re
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import machine  # noqa: E402

from grader.hosting.participant.client import HostingClient  # noqa: E402
from tests.hosting.support import Server, admin, write_competition  # noqa: E402

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
LARGE = 1 << 10  # KiB: an anonymous mapping of 1 MiB or more is "large"
_HEADER = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ")


def bench_module(name: str) -> ModuleType:
    """bench/NAME.py as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


scale_corpus = bench_module("scale_corpus")


@dataclass
class Reading:
    """One reading of the worker's memory (KiB unless said), after grade ``grade`` (0: before the first)."""

    grade: int
    wall_s: float = 0.0
    heap: int = 0
    anon_large: int = 0
    anon_large_count: int = 0
    anon_small: int = 0
    anon_small_count: int = 0
    file_anon: int = 0
    file_resident: int = 0
    stack: int = 0
    rss_anon: int = 0
    rss_file: int = 0
    files: dict[str, int] = field(default_factory=dict)  # path -> resident KiB (all its mappings)
    traced: int | None = None  # bytes
    traced_overhead: int | None = None  # bytes


def read_smaps(pid: int, grade: int) -> Reading:
    """The worker's memory by category now (see the module's docstring)."""
    reading = Reading(grade)
    name, size = "", 0
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        if _HEADER.match(line):
            parts = line.split(maxsplit=5)
            name = parts[5] if len(parts) > 5 else ""
            start, end = (int(value, 16) for value in parts[0].split("-"))
            size = (end - start) >> 10
            continue
        key, _, rest = line.partition(":")
        if key not in ("Rss", "Anonymous"):
            continue
        kib = int(rest.split()[0])
        file_backed = name.startswith("/")
        if key == "Rss" and file_backed:
            reading.files[name] = reading.files.get(name, 0) + kib
            reading.file_resident += kib
        elif key == "Anonymous":
            if file_backed:
                reading.file_anon += kib
            elif name == "[heap]":
                reading.heap += kib
            elif name == "[stack]":
                reading.stack += kib
            elif size >= LARGE:
                reading.anon_large += kib
                reading.anon_large_count += 1
            else:
                reading.anon_small += kib
                reading.anon_small_count += 1
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            reading.rss_anon = int(line.split()[1])
        elif line.startswith("RssFile:"):
            reading.rss_file = int(line.split()[1])
    return reading


def worker_pid(serve_pid: int, timeout_s: float = 300) -> int:
    """The server's one local worker (it starts once the workers' copy is exported)."""
    deadline = time.monotonic() + timeout_s
    while True:
        workers = [pid for pid, role in scale_corpus.descendants(serve_pid).items() if role == "worker"]
        if workers:
            return workers[0]
        if time.monotonic() > deadline:
            raise SystemExit("the local worker did not start")
        time.sleep(0.5)


def wait_claiming(log: Path, timeout_s: float = 300) -> None:
    """Until the server logs the worker's fingerprint bound: its first claim, so its start-up imports are done."""
    deadline = time.monotonic() + timeout_s
    while not re.search(r"worker \S+: fingerprint \w+ bound", log.read_text(errors="replace")):
        if time.monotonic() > deadline:
            raise SystemExit(f"the worker made no claim within {timeout_s:g} s; server log {log}")
        time.sleep(0.5)


def wait_childless(serve_pid: int, worker: int, timeout_s: float = 120) -> None:
    """Until the worker has no grade child left (the last shard job's fork has ended)."""
    deadline = time.monotonic() + timeout_s
    while any(role == "grade child" for role in scale_corpus.descendants(serve_pid).values()):
        if time.monotonic() > deadline:
            raise SystemExit(f"worker {worker} still has a child {timeout_s:g} s after the grade")
        time.sleep(0.2)


def heap_snapshot(pid: int, folder: Path, number: int, timeout_s: float = 120) -> tuple[int, int]:
    """Ask the traced worker for snapshot ``number`` (SIGUSR1; the first starts tracing): tracemalloc's current bytes and its own memory."""
    deadline = time.monotonic() + timeout_s
    while not (folder / f"{pid}.ready").exists():  # signalled before its handler is in place, the worker would end
        if time.monotonic() > deadline:
            raise SystemExit(f"worker {pid} did not install its heap handler (is it traced?)")
        time.sleep(0.2)
    os.kill(pid, signal.SIGUSR1)
    path = folder / f"{pid}-{number}.json"
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"worker {pid} wrote no snapshot {number}")
        time.sleep(0.2)
    facts = json.loads(path.read_text())
    return facts["current"], facts.get("tracemalloc_memory", 0)


def mib(kib: float) -> str:
    return f"{kib / 1024:.1f}"


def row(reading: Reading) -> str:
    """One Markdown row of the per-grade table."""
    traced = "-" if reading.traced is None else f"{reading.traced / (1 << 20):.1f} (+{(reading.traced_overhead or 0) / (1 << 20):.1f})"
    return (
        f"| {reading.grade} | {reading.wall_s:.1f} | {mib(reading.rss_anon)} | {mib(reading.heap)} | "
        f"{mib(reading.anon_large)} ({reading.anon_large_count}) | {mib(reading.anon_small)} ({reading.anon_small_count}) | "
        f"{mib(reading.file_anon)} | {mib(reading.stack)} | {mib(reading.rss_file)} | {mib(reading.file_resident)} ({len(reading.files)}) | {traced} |"
    )


HEADER = [
    "| after grade | wall (s) | RssAnon | heap | anon >= 1 MiB (count) | anon < 1 MiB (count) | file: anon | stack | RssFile "
    "| file: resident (files) | Python traced (+ tracemalloc's own) |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]


def deltas(readings: list[Reading]) -> list[str]:
    """Each category's change over the start (before grade 1 -> after it), grades 1 -> 5, 5 -> the last, and 1 -> the last."""
    marks = sorted({mark for mark in (0, 1, 5, len(readings) - 1) if mark < len(readings)})
    pairs = list(itertools.pairwise(marks))
    if len(marks) > 3:
        pairs.append((1, marks[-1]))  # all that grew after the first grade
    lines = [
        "| span | RssAnon | heap | anon >= 1 MiB | anon < 1 MiB | file: anon | RssFile | Python traced |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for a, b in pairs:
        old, new = readings[a], readings[b]

        def d(attr: str, new: Reading = new, old: Reading = old) -> str:
            return f"{(getattr(new, attr) - getattr(old, attr)) / 1024:+.1f}"

        traced = "-" if new.traced is None or old.traced is None else f"{(new.traced - old.traced) / (1 << 20):+.1f}"
        lines.append(
            f"| {a} -> {b} | {d('rss_anon')} | {d('heap')} | {d('anon_large')} | {d('anon_small')} | {d('file_anon')} | {d('rss_file')} | {traced} |"
        )
    return lines


def new_files(old: Reading, new: Reading, top: int = 8) -> list[str]:
    """The files mapped in ``new`` and not in ``old``, the most resident first."""
    added = sorted(((kib, path) for path, kib in new.files.items() if path not in old.files), reverse=True)
    return [f"#   {mib(kib)} MiB {path}" for kib, path in added[:top]] + ([f"#   ... and {len(added) - top} more"] if len(added) > top else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grades", type=int, default=20)
    parser.add_argument("--documents", type=int, default=30_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--shard-documents", type=int, default=8192)
    parser.add_argument("--submission", type=Path, default=EXAMPLE)
    parser.add_argument("--settle-s", type=float, default=2.0, help="seconds after the worker's last child ends before a reading")
    parser.add_argument("--heap", type=Path, default=None, help="trace the worker's Python allocations; snapshots in this folder")
    parser.add_argument("--workdir", type=Path, default=REPO / "bench" / "out")
    parser.add_argument("--markdown", type=Path, default=None, help="append the results as Markdown to this file")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    root, made = scale_corpus.benchmark_folder(args.workdir, args.documents, args.queries, 0)
    command = f"GRADER_RUNNER_IMAGE={os.environ.get('GRADER_RUNNER_IMAGE', 'grader-runner:dev')} .venv/bin/python bench/worker_growth.py " + " ".join(
        sys.argv[1:]
    )
    lines = [
        f"$ {command}",
        machine.machine_line() + (f"; generated {root.name} in {made:.0f} s" if made else ""),
        f"# {args.documents:,} documents, {args.queries} queries, {args.shard_documents} documents a shard, one local worker, {args.grades} grades;"
        " MiB of the worker process",
        *HEADER,
    ]
    print("\n".join(lines), flush=True)
    readings: list[Reading] = []
    tables = {
        "limits": scale_corpus.LIMITS,
        "quotas": {"per_day": 1000, "total": 1000, "concurrent": 2},
        "queue": {"lease_s": 60, "heartbeat_s": 10, "redispatch_s": 30, "reap_every_s": 2},
        "sharding": {"shard_documents": args.shard_documents},
    }
    loads = []
    with tempfile.TemporaryDirectory(prefix="grader-bench-worker-") as scratch:
        competition = write_competition(Path(scratch) / "c.toml", benchmark=str(root), tables=tables)
        with scale_corpus.trace_heaps(args.heap):
            server = Server(competition, Path(scratch) / "state", workers=1).start()
        try:
            assert server.process is not None
            serve = server.process.pid
            client = HostingClient(server.url, admin(server.state, "add-participant", "bench").strip())
            worker = worker_pid(serve)
            wait_claiming(server.log)
            time.sleep(args.settle_s)
            for number in range(args.grades + 1):
                wall = 0.0
                if number:
                    started = time.perf_counter()
                    view = client.wait(client.submit(args.submission)["id"], poll_s=0.2, timeout_s=3600)
                    wall = time.perf_counter() - started
                    if view["state"] != "scored":
                        raise SystemExit(f"grade {number} ended {view['state']}; server log {server.log}")
                    wait_childless(serve, worker)
                    time.sleep(args.settle_s)  # the worker trims after posting; the client may see `scored` first
                reading = read_smaps(worker, number)
                reading.wall_s = wall
                if args.heap is not None:
                    reading.traced, reading.traced_overhead = heap_snapshot(worker, args.heap, number + 1)
                readings.append(reading)
                loads.append(os.getloadavg()[0])
                lines.append(row(reading))
                print(lines[-1], flush=True)
        finally:
            server.stop()
    summary = [
        "",
        *deltas(readings),
        f"# load during the run {min(loads):.1f}-{max(loads):.1f}",
        "# files first mapped by grade 1:",
        *(new_files(readings[0], readings[1]) or ["#   none"]),
        f"# files first mapped after grade 1 (by grade {readings[-1].grade}):",
        *(new_files(readings[1], readings[-1]) or ["#   none"]),
    ]
    lines += summary
    print("\n".join(summary), flush=True)
    if args.markdown:
        with open(args.markdown, "a", encoding="utf-8") as out:
            out.write("\n```\n" + "\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
