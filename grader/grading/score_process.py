"""Scoring a worker's compact runs in separate, memory-bounded processes (workers rank; the server scores).

The server never scores in its event loop or thread pool: a run of the largest CoIR
task is about 0.4 GB of arrays once decoded. :func:`score_in_child` hands the job to
a small pool of *spawned* processes (not forked: the server has threads and open
database connections), each of which bounds its own address space (``RLIMIT_AS``)
before it takes a job, and scores through
:func:`grader.grading.scoring.report_from_runs` (the path ``grader run`` takes). The
processes stay warm (a fresh interpreter per job would cost more than scoring a small
task) and are replaced after :data:`JOBS_PER_PROCESS` jobs. A refused run, a process
out of memory or time: :class:`TaskFailure` (``INFRA``); a pool with a dead or
overrunning process is discarded and the next job starts a new one. Each process ends with the process that
started it, a SIGKILL of the server included (it watches its parent).
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from grader.errors import GraderError, InternalError, TaskFailure
from grader.failures import FailureCode
from grader.grading.orphans import exit_with_parent

#: The scoring processes' address-space bound: numpy, pyarrow and a 0.4 GB run fit well within it.
ADDRESS_SPACE_BYTES = 8 << 30
#: Seconds a scoring may take (CoIR's largest task scores in seconds).
TIMEOUT_S = 600.0
#: Scoring processes at most at once.
PROCESSES = 2
#: Jobs a scoring process serves before it is replaced (so that what its allocator kept stays bounded).
JOBS_PER_PROCESS = 50

_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def _bound(address_space: int, parent: int | None = None) -> None:
    """In each scoring process, before its first job: the memory bound, no core dumps, and the watch of its parent."""
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if parent is not None:
        exit_with_parent(parent)  # a killed server runs no clean-up: its scoring processes must not outlive it


def _current_pool() -> ProcessPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ProcessPoolExecutor(
                max_workers=PROCESSES,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_bound,
                initargs=(ADDRESS_SPACE_BYTES, os.getpid()),
                max_tasks_per_child=JOBS_PER_PROCESS,
            )
        return _pool


def _discard(pool: ProcessPoolExecutor) -> None:
    """Stop a pool whose process died or overran: its processes are killed, the next job starts a new pool."""
    global _pool
    with _pool_lock:
        if _pool is pool:
            _pool = None
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.kill()
    pool.shutdown(wait=False, cancel_futures=True)


def score_in_child(job: dict[str, Any], *, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """The report of ``job`` (see :func:`_score`), scored in a memory-bounded scoring process; :class:`TaskFailure` (``INFRA``) when refused."""
    pool = _current_pool()
    try:
        outcome = pool.submit(_score_job, job).result(timeout=timeout_s)
    except FutureTimeout:
        _discard(pool)
        raise TaskFailure(FailureCode.INFRA, f"scoring took longer than {timeout_s:g} s") from None
    except BrokenProcessPool:
        _discard(pool)
        raise TaskFailure(FailureCode.INFRA, "the scoring process died (beyond its memory bound?)") from None
    if "error" in outcome:
        raise TaskFailure(FailureCode.INFRA, str(outcome["error"]))
    report: dict[str, Any] = outcome["report"]
    return report


def warm() -> Future[None] | None:
    """Have a scoring process start now, off the caller's path: called when a grade is claimed, whose scoring will
    need one, so that the scoring does not first wait for an interpreter to start and import the scorer (0.3 s here,
    on the grade's serial tail: only a server's first grades pay it, the processes stay). The caller need not wait
    (the future is for tests); None when the pool is shutting down with the server."""
    try:
        return _current_pool().submit(_warm_job)
    except RuntimeError:
        return None


def _warm_job() -> None:
    """In a scoring process: import what :func:`_score` imports."""
    from grader.data.registry import resolve_benchmark  # noqa: F401 - imported for its cost, now
    from grader.grading.scoring import report_from_runs  # noqa: F401


def _score_job(job: dict[str, Any]) -> dict[str, Any]:
    """In a scoring process: ``{"report": ...}``, or ``{"error": why}`` for what the worker sent (never a crash)."""
    try:
        return {"report": _score(job)}
    except (GraderError, KeyError, TypeError, ValueError) as error:
        message = error.detail if isinstance(error, TaskFailure) else f"{type(error).__name__}: {error}"
        return {"error": message[:4000]}
    except MemoryError:
        return {"error": "scoring ran out of its memory bound"}


def _score(job: dict[str, Any]) -> dict[str, Any]:
    """Score the runs ``job`` names: ``benchmark`` (a target), ``split``, ``tasks``, ``facts``, ``runs`` (task: path), ``top_k``, ``policy``;
    with ``training_sketch`` (a path), the report also carries the released contamination audit of that sketch."""
    from grader.data.registry import resolve_benchmark
    from grader.grading.interfaces import RunOptions
    from grader.grading.scoring import report_from_runs
    from grader.metrics.policy import Policy
    from grader.sandbox.blinding_key import load_blinding_key

    benchmark = resolve_benchmark(job["benchmark"])
    options = RunOptions(benchmark=benchmark, tasks=list(job["tasks"]), split=job["split"], out_dir=Path("."), policy=Policy(job["policy"]))
    runs = {name: Path(path).read_bytes() for name, path in job["runs"].items()}
    # The competition's blinding key, read here from its 0600 file: the key itself never travels in a job.
    key_file = job.get("blinding_key_file")
    key = None if key_file is None else load_blinding_key(Path(key_file))
    kept = job.get("kept_documents")
    report = report_from_runs(
        benchmark,
        split=options.split,
        tasks=options.tasks,
        facts=job["facts"],
        runs=runs,
        measures=options.effective_measures(),
        policy=options.policy,
        top_k=int(job["top_k"]),
        key=key,
        kept_documents=None if kept is None else Path(kept),
    )
    sketch_file = job.get("training_sketch")
    if sketch_file is not None:
        report["contamination"] = _contamination(benchmark, options.tasks, options.split, Path(sketch_file), str(job["training_sketch_sha256"]))
    return report


def _contamination(benchmark: Any, tasks: list[str], split: str, sketch_file: Path, sha256: str) -> dict[str, Any]:
    """The released audit of the sketch the submission carried, against every task's whole split.

    Here, on the server, because the audit reads the split's judgements (which queries are test queries, which
    documents are relevant): they never enter a worker's sandbox. Only :func:`grader.integrity.release.release`'s
    coarse figure of it leaves this process.
    """
    from grader.integrity.audit import released_block
    from grader.integrity.sketch_file import read_sketch

    sketch = read_sketch(sketch_file)  # checked at intake; read again strictly
    block = released_block([benchmark.task(name) for name in tasks], split, sketch)
    if block["sketch_sha256"] != sha256:  # not the file intake wrote: nothing of it is signed (the grade is retried, INFRA)
        raise InternalError(f"the kept training sketch {sketch_file.name} is not the one the upload carried")
    return block
