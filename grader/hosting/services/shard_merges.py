"""The merges of sharded attempts, run in the background one at a time, so that no request waits on one.

At CoIR's full scale (2.39 M documents, 162k queries, 20 tasks) merging an attempt's shard runs takes minutes. Run
inside the coordinator's status request, that request timed out on the worker (60 s) and the whole attempt was
re-run from scratch, its 68 shard jobs encoded again (bench/coir_shape.py --scale 1, 2026-12-04). Here a merge runs
on the server's one merge thread (one at a time: the server's memory holds one merge's blocks, whatever the number
of attempts finishing together, in every competition it serves); the status request waits up to :data:`WAIT_S` for
it, so that a small merge answers at once, and otherwise answers "running" until a later request finds it done.

Held in memory only: a server restarted mid-merge merges again on the coordinator's next request (each task's
merged run is written whole, an atomic rename, so a merge begun twice writes the same bytes).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from typing import TypeVar

T = TypeVar("T")

#: How long a status request waits for a merge before it answers "running" (the coordinator asks again).
WAIT_S = 10.0

_lock = threading.Lock()
_merges: dict[tuple[str, str, int], Future[object]] = {}
_queued: queue.SimpleQueue[tuple[Future[object], Callable[[], object]]] = queue.SimpleQueue()
_thread: threading.Thread | None = None


def _run_merges() -> None:
    """The merge thread: one merge at a time, in order. A daemon (a pool's thread would be joined at exit, so a server
    stopped mid-merge would wait minutes for a result nobody reads; its next start merges again)."""
    while True:
        future, merge = _queued.get()
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(merge())
            except BaseException as error:  # handed to the request that reads it, as an executor does
                future.set_exception(error)


def _submit(merge: Callable[[], object]) -> Future[object]:
    """Queue ``merge`` on the merge thread (started at the first merge); its future. Called holding ``_lock``."""
    global _thread
    if _thread is None or not _thread.is_alive():
        _thread = threading.Thread(target=_run_merges, name="grader-merge", daemon=True)
        _thread.start()
    future: Future[object] = Future()
    _queued.put((future, merge))
    return future


def merged(key: tuple[str, str, int], merge: Callable[[], T], wait_s: float = WAIT_S) -> T | None:
    """``merge()``'s result once it is done (its exception raised, once), started by the first call for ``key``; None while it runs.

    ``key`` names one attempt of one competition: (its state folder, submission id, attempt number).
    """
    with _lock:
        future = _merges.get(key)
        if future is None:
            future = _merges[key] = _submit(merge)
    try:
        result = future.result(timeout=wait_s)
    except FutureTimeout:
        return None
    except BaseException:
        forget(key)
        raise
    forget(key)
    return result  # type: ignore[return-value]  # the future of this key's merge returns T


def forget(key: tuple[str, str, int]) -> None:
    """Drop what is kept for ``key`` (a finished merge's result, or a merge whose attempt went stale: it finishes, unread)."""
    with _lock:
        future = _merges.get(key)
    if future is not None:  # outside the lock: a done future runs the callback at once, and _drop takes the lock
        future.add_done_callback(partial(_drop, key))


def _drop(key: tuple[str, str, int], future: Future[object]) -> None:
    with _lock:
        if _merges.get(key) is future:
            del _merges[key]


def running() -> int:
    """How many merges are kept (running, or done and not yet read): for tests and the server's metrics."""
    with _lock:
        return len(_merges)
