"""Bench only (never on a production path): trace the Python allocations of `grader serve` and its local workers.

bench/scale_corpus.py ``--heap DIR`` puts this folder first on PYTHONPATH and sets ``GRADER_BENCH_HEAP_DIR``; Python
imports this module at start-up in every process it starts, and this traces (``tracemalloc``) only the server and the
workers (their argv names ``serve`` or ``worker``; not the spawned scoring and export helpers, nor the forked grade
children, which stop tracing at the fork). Tracing starts at the first SIGUSR1 (after start-up: tracing the imports
would take minutes), so a snapshot holds what was allocated since then and is still alive. On each SIGUSR1 a process
writes ``DIR/PID-K.snap`` (the snapshot) and ``DIR/PID-K.json`` (its argv, tracemalloc's current and peak bytes since
the last signal, the traces' own memory, its RssAnon), then resets the peak; ``DIR/PID.ready`` says the handler is in place. Tracing costs time (every allocation records its stack): the
wall times of such a run mean nothing.
"""

from __future__ import annotations

import os
import sys

_FOLDER = os.environ.get("GRADER_BENCH_HEAP_DIR")


def _rss_anon_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        return next((int(line.split()[1]) for line in status if line.startswith("RssAnon:")), -1)


def _install(folder: str) -> None:
    import json
    import signal
    import tracemalloc

    os.register_at_fork(after_in_child=tracemalloc.stop)  # a grade child's allocations are its own, and tracing slows it
    dumps = [0]

    def dump(_signum: int, _frame: object) -> None:
        if not tracemalloc.is_tracing():
            tracemalloc.start(int(os.environ.get("GRADER_BENCH_HEAP_FRAMES", "12")))
        dumps[0] += 1
        base = os.path.join(folder, f"{os.getpid()}-{dumps[0]}")
        current, peak = tracemalloc.get_traced_memory()
        tracemalloc.take_snapshot().dump(base + ".snap")
        with open(base + ".json.part", "w", encoding="utf-8") as out:
            facts = {"argv": sys.argv, "current": current, "peak": peak, "rss_anon_kib": _rss_anon_kib()}
            facts["tracemalloc_memory"] = tracemalloc.get_tracemalloc_memory()  # the traces' own bytes: RssAnon counts them
            json.dump(facts, out)
        os.replace(base + ".json.part", base + ".json")  # the bench waits for this name: the snapshot is complete then
        tracemalloc.reset_peak()

    signal.signal(signal.SIGUSR1, dump)
    with open(os.path.join(folder, f"{os.getpid()}.ready"), "w", encoding="ascii"):
        pass  # the bench signals a process only once this is there: before it, SIGUSR1 would end the process


if _FOLDER and ("serve" in sys.argv or "worker" in sys.argv):
    _install(_FOLDER)
