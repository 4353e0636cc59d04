"""What a job tells a worker about its data: the judged query ids and the ranking digest, both of the pseudonymous copy.

Workers hold the copy :mod:`grader.hosting.protocol.worker_data` exports (local workers: the state's
``worker-data/``, written here at the first job and kept while current). A job names the
judged queries of its split by their pseudonyms, and the digest of the copy's corpus,
queries and those judged ids (:meth:`grader.data.task.Task.ranking_digest`), so a worker
holding anything else (the benchmark's own data included) refuses the job.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from grader.data.benchmark import load_benchmark_folder
from grader.data.registry import resolve_benchmark
from grader.grading.orphans import exit_with_parent
from grader.hosting.config import Competition
from grader.hosting.context import ServerContext
from grader.hosting.errors import HostingError
from grader.hosting.keyring.blinding_key import load_competition_blinding_key
from grader.hosting.keyring.files import key_files
from grader.hosting.protocol.worker_data import ExportedTask, ensure_worker_data, export_worker_data, pseudonymous_judged
from grader.hosting.results.pins import grading_splits, served_splits

_lock = threading.Lock()
_ready: dict[tuple[str, str, str, tuple[str, ...], tuple[str, ...]], Path] = {}
_judged: dict[tuple[Path, str, str, str, tuple[str, ...]], tuple[dict[str, list[str]], dict[str, str]]] = {}


def worker_copy(ctx: ServerContext) -> Path:
    """The state's worker copy, exported on first use (by one thread; kept across starts while its manifest matches)."""
    key = ctx.blinding_key
    if key is None:
        raise HostingError("the competition has no blinding key: workers cannot be given a pseudonymous copy")
    splits = served_splits(ctx.split, ctx.sample_split)
    ident = (str(ctx.state.root), key.key_id, ctx.benchmark_target, tuple(ctx.tasks), splits)
    with _lock:
        if ident not in _ready:
            _ready[ident] = _in_child(
                ensure_worker_data, ctx.benchmark_target, ctx.tasks, splits, key, ctx.state.worker_data, ctx.state.blinded_documents
            )
        return _ready[ident]


def _in_child(function: Callable[..., Path], *args: object) -> Path:
    """``function(*args)`` in a fresh (spawned) process: an export holds the whole corpus and its sort (O(N)), and memory
    a long-lived server frees is not given back to the system, so the server's resident memory would keep that peak
    (measured: +526 MiB at 300k documents). Spawned, not forked: the server has threads. Its errors come back as raised."""
    context = multiprocessing.get_context("spawn")
    # The export ends with the server, a SIGKILL included (grader.grading.orphans): it may take minutes on a large corpus.
    with ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=exit_with_parent, initargs=(os.getpid(),)) as pool:
        return pool.submit(function, *args).result()


def export_copy(state_dir: Path, competition: Competition, out: Path) -> dict[str, ExportedTask]:
    """``grader admin export-worker-data``: the competition's worker copy written to ``out`` (new or empty), under the state's key."""
    benchmark, tasks, split, sample = grading_splits(competition)
    key = load_competition_blinding_key(key_files(state_dir).folder)
    return export_worker_data(benchmark, tasks, served_splits(split, sample), key, out)


def ranking_data(ctx: ServerContext, split: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Per task, the pseudonyms of ``split``'s judged queries (sorted) and the ranking digest of the copy over them."""
    folder = worker_copy(ctx)
    assert ctx.blinding_key is not None  # worker_copy refused otherwise
    ident = (folder, split, ctx.blinding_key.key_id, ctx.benchmark_target, tuple(ctx.tasks))
    with _lock:
        cached = _judged.get(ident)
    if cached is not None:
        return cached
    real = resolve_benchmark(ctx.benchmark_target)
    copy = load_benchmark_folder(folder)
    judged = {name: pseudonymous_judged(ctx.blinding_key, name, real.task(name).qrels(split)) for name in ctx.tasks}
    digests = {name: copy.task(name).ranking_digest(judged[name]) for name in ctx.tasks}
    with _lock:
        _judged[ident] = (judged, digests)
    return judged, digests
