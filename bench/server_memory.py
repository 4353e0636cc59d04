"""A long-running `grader serve`: its memory idle and at its peak after each of many sharded grades in a row.

    GRADER_RUNNER_IMAGE=grader-runner:dev .venv/bin/python bench/server_memory.py \
        [--documents 100000] [--grades 6] [--workers 2] [--shard-documents 16384] [--modes default returning] [--markdown PATH]

A host runs one server for weeks: what matters is what it holds between grades and how high it goes during one,
grade after grade, not the first grade's peak (bench/scale_corpus.py's figure, which starts a fresh server per
grade). For each mode one fresh single-machine `grader serve --workers W` (local workers, SQLite, sharded:
``[sharding] shard_documents``) grades submissions_example/onnx-lsa on the synthetic task of
bench/synthetic_corpus.py (bench/out/synthetic-N-q1000-s0, made once) ``--grades`` times, one after the other:

* ``default``: the server started with ``GRADER_ALLOCATOR=default`` (glibc's own malloc settings: before the fix);
* ``returning``: without it (the server fixes glibc's mmap threshold at 1 MiB and trims after each merge:
  grader/hosting/allocator.py).

Figures of the `grader serve` process alone (not its workers, nor its spawned scoring and export processes), from
/proc/PID/status: *fresh*, its anonymous resident memory (RssAnon) once it and its workers have started and the
workers' copy is exported; per grade, the *peak* of RssAnon sampled every ``--sample-s`` during the grade, the
exact peak of its whole resident memory during the grade (VmHWM, reset before each grade through
/proc/PID/clear_refs; it counts mapped files too), and *idle*, RssAnon ``--settle-s`` seconds after the client saw
``scored``. The workers' idle RssAnon is printed too (the setting is the server's: they keep glibc's defaults).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import machine  # noqa: E402

from grader.hosting.environment import ALLOCATOR  # noqa: E402
from grader.hosting.participant.client import HostingClient  # noqa: E402
from tests.hosting.support import Server, admin, write_competition  # noqa: E402

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
MODES = {"default": "glibc's own settings (GRADER_ALLOCATOR=default): before the fix", "returning": "the server's setting: after the fix"}


def bench_module(name: str) -> ModuleType:
    """bench/NAME.py as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


scale_corpus = bench_module("scale_corpus")


def status_kib(pid: int, key: str) -> int:
    """A ``key:`` line of /proc/PID/status, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def reset_peak(pid: int) -> None:
    """Reset the process's VmHWM to its resident memory now (Linux >= 4.0; the same user may)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


@dataclass
class PeakSampler:
    """Samples one process's RssAnon in a thread; ``peak`` is the largest seen (KiB)."""

    pid: int
    interval: float
    peak: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, status_kib(self.pid, "RssAnon"))
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakSampler:
        self._thread = threading.Thread(target=self.run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass(frozen=True)
class Grade:
    """One grade's figures (KiB, seconds)."""

    number: int
    wall_s: float
    peak_anon: int
    peak_hwm: int
    idle_anon: int
    workers_idle: list[int]


def workers_idle(serve_pid: int) -> list[int]:
    """Each local worker's RssAnon now (KiB)."""
    roles = scale_corpus.descendants(serve_pid)
    return [value for pid, role in sorted(roles.items()) if role == "worker" and (value := scale_corpus.rss_anon_kib(pid)) is not None]


def run_mode(mode: str, bench_root: Path, scratch: Path, args: argparse.Namespace) -> tuple[int, list[Grade]]:
    """One fresh server in ``mode`` grading ``args.grades`` times in a row: its fresh idle RssAnon and each grade's figures."""
    tables = {
        "limits": scale_corpus.LIMITS,
        "quotas": {"per_day": 1000, "total": 1000, "concurrent": 2},
        "queue": {"lease_s": 60, "heartbeat_s": 10, "redispatch_s": 30, "reap_every_s": 2},
        "sharding": {"shard_documents": args.shard_documents},
    }
    competition = write_competition(scratch / "c.toml", benchmark=str(bench_root), tables=tables)
    saved = os.environ.pop(ALLOCATOR, None)
    if mode == "default":
        os.environ[ALLOCATOR] = "default"
    try:
        server = Server(competition, scratch / "state", workers=args.workers).start()
    finally:
        os.environ.pop(ALLOCATOR, None)
        if saved is not None:
            os.environ[ALLOCATOR] = saved
    grades: list[Grade] = []
    try:
        assert server.process is not None
        pid = server.process.pid
        client = HostingClient(server.url, admin(server.state, "add-participant", "bench").strip())
        scale_corpus.wait_workers_bound(server.log, args.workers)  # started after the workers' copy; up once bound
        time.sleep(args.settle_s)
        fresh = status_kib(pid, "RssAnon")
        print(f"# {mode}: fresh server {fresh / 1024:.1f} MiB RssAnon", flush=True)
        for number in range(1, args.grades + 1):
            reset_peak(pid)
            with PeakSampler(pid, args.sample_s) as sampler:
                started = time.perf_counter()
                submission_id = client.submit(args.submission)["id"]
                view = client.wait(submission_id, poll_s=0.2, timeout_s=3600)
                wall = time.perf_counter() - started
            if view["state"] != "scored":
                raise SystemExit(f"grade {number} ended {view['state']}; server log {server.log}")
            hwm = status_kib(pid, "VmHWM")
            time.sleep(args.settle_s)
            grade = Grade(number, wall, sampler.peak, hwm, status_kib(pid, "RssAnon"), workers_idle(pid))
            grades.append(grade)
            print(row(mode, grade), flush=True)
    finally:
        server.stop()
    return fresh, grades


def mib(kib: int) -> str:
    return f"{kib / 1024:.0f}"


def row(mode: str, grade: Grade) -> str:
    """One Markdown row of the per-grade table."""
    return (
        f"| {mode} | {grade.number} | {grade.wall_s:.1f} | {mib(grade.peak_anon)} | {mib(grade.peak_hwm)} | {mib(grade.idle_anon)} | "
        f"{', '.join(mib(value) for value in grade.workers_idle)} |"
    )


def summary(results: dict[str, tuple[int, list[Grade]]]) -> list[str]:
    """Side by side: fresh, idle after the first and the last grade, the largest idle and peak, per mode."""
    lines = [
        "| mode | fresh (MiB) | idle after grade 1 | idle after the last | largest idle | peak RssAnon, first -> largest | VmHWM, first -> largest |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, (fresh, grades) in results.items():
        idle = [grade.idle_anon for grade in grades]
        peaks = [grade.peak_anon for grade in grades]
        hwm = [grade.peak_hwm for grade in grades]
        lines.append(
            f"| {mode} | {mib(fresh)} | {mib(idle[0])} | {mib(idle[-1])} | {mib(max(idle))} | {mib(peaks[0])} -> {mib(max(peaks))} | "
            f"{mib(hwm[0])} -> {mib(max(hwm))} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--grades", type=int, default=6, help="grades in a row per server")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shard-documents", type=int, default=16384)
    parser.add_argument("--modes", nargs="+", choices=sorted(MODES), default=["default", "returning"])
    parser.add_argument("--submission", type=Path, default=EXAMPLE)
    parser.add_argument("--sample-s", type=float, default=0.1)
    parser.add_argument("--settle-s", type=float, default=5.0, help="seconds after a grade (and after the start) before idle is read")
    parser.add_argument("--workdir", type=Path, default=REPO / "bench" / "out")
    parser.add_argument("--markdown", type=Path, default=None, help="append the results as Markdown to this file")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    root, made = scale_corpus.benchmark_folder(args.workdir, args.documents, args.queries, 0)
    command = f"GRADER_RUNNER_IMAGE={os.environ.get('GRADER_RUNNER_IMAGE', 'grader-runner:dev')} .venv/bin/python bench/server_memory.py " + " ".join(
        sys.argv[1:]
    )
    lines = [
        f"$ {command}",
        machine.machine_line() + (f"; generated {root.name} in {made:.0f} s" if made else ""),
        f"# {args.documents:,} documents, {args.workers} local workers, {args.shard_documents} documents a shard, {args.grades} grades per server",
        "| mode | grade | wall (s) | serve peak RssAnon (MiB) | serve VmHWM (MiB) | serve idle RssAnon (MiB) | workers idle RssAnon (MiB) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(lines), flush=True)
    results: dict[str, tuple[int, list[Grade]]] = {}
    for mode in args.modes:
        with tempfile.TemporaryDirectory(prefix="grader-bench-memory-") as scratch:
            results[mode] = run_mode(mode, root, Path(scratch), args)
        lines += [row(mode, grade) for grade in results[mode][1]]
    table = summary(results)
    lines += ["", *table, f"# load at the end {os.getloadavg()[0]:.1f}"]
    print("\n".join(["", *table, lines[-1]]), flush=True)
    if args.markdown:
        with open(args.markdown, "a", encoding="utf-8") as out:
            out.write("\n```\n" + "\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
