"""The server's C allocator: large buffers go back to the system when freed, and a merge's leftovers are trimmed.

A sharded grade makes ``grader serve`` read and decode every shard's run (at the put's check and at the merge:
arrays of 10-46 MiB each). glibc's malloc serves a block that large from ``mmap`` at first, but raises its
*dynamic* mmap threshold to the size of each such block freed (up to 32 MiB), so the next ones come from the heap
of whichever thread's arena asked; a heap is only shrunk from its top, and the threads of the server's pool each
keep an arena. A long-running server therefore kept hundreds of MiB after its grades, growing grade after grade
(docs/scale.md, "A long-running server"). :func:`return_large_buffers`, called once when the server starts, fixes
the threshold at :data:`MMAP_THRESHOLD` (which also ends the dynamic adjustment): every block of 1 MiB or more is
then mapped apart and unmapped when freed. :func:`release_free_memory`, called after a merge, hands back the free
pages that the smaller blocks left inside the heaps (``malloc_trim``).

A worker (``grader worker``, local or remote) does the same at its start and trims after each job
(:func:`grader.hosting.worker.loop.settle_allocator`): it too holds each job's bytes for a moment (a shard's run
handed back by its child and put, a grade's runs posted, an upload and query vectors fetched), and kept them in its
heaps job after job. Its forked children inherit the setting; they live for one job.

After each job a worker also collects Python's reference cycles (:func:`release_job_memory`): every httpx response
is one (it and its stream refer to each other) and holds its request, whose body is the bytes the worker put (a shard's
run, 5 MiB at 8,192 documents; a grade's runs). A cycle that outlives a young collection waits for a full one, which
CPython runs only once the objects promoted since the last exceed a quarter of the old ones: a worker holds about
110,000 after its imports, so a full collection waits for some 27,000 more, and the bodies put meanwhile stayed:
they piled up job after job (bench/worker_growth.py, docs/scale.md).

glibc only (most Linux distributions, the Debian-based images); elsewhere (musl, macOS) both are no-ops and the
platform's allocator decides (musl maps large blocks apart and unmaps them when freed anyway). The server reads
its variables (:mod:`grader.hosting.environment`) and passes them here: an operator's own
``MALLOC_MMAP_THRESHOLD_`` wins (glibc applied it at start), and ``GRADER_ALLOCATOR=default`` leaves glibc's
settings alone (what ``bench/server_memory.py`` compares with).
"""

from __future__ import annotations

import ctypes
import gc
from functools import cache

#: glibc's ``mallopt`` parameter number of ``M_MMAP_THRESHOLD`` (malloc.h).
M_MMAP_THRESHOLD = -3
#: Blocks of this many bytes or more are mapped apart and unmapped when freed: a shard's arrays (10-46 MiB) are, the
#: small objects of requests are not (each map costs a system call and page faults). glibc's default starts at
#: 128 KiB and climbs to 32 MiB as large blocks are freed.
MMAP_THRESHOLD = 1 << 20
#: ``GRADER_ALLOCATOR``'s value that leaves glibc's own settings (and no trim after merges).
DEFAULT = "default"

_returning = False  # whether this process applied the setting: release_free_memory trims only then


@cache
def _glibc() -> ctypes.CDLL | None:
    """The running C library when it is glibc (it has ``mallopt`` and ``malloc_trim``); None elsewhere."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - present in glibc alone: musl and macOS have no such symbol
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (AttributeError, OSError):
        return None
    return libc


def return_large_buffers(choice: str | None = None, operator_threshold: str | None = None) -> str:
    """Make this process's allocator give blocks of :data:`MMAP_THRESHOLD` bytes or more back when freed; what was done, in words.

    Called once by ``grader serve`` before its threads start (the setting is process-wide: every arena follows it),
    with ``GRADER_ALLOCATOR`` (``choice``) and glibc's ``MALLOC_MMAP_THRESHOLD_`` (``operator_threshold``) as
    :func:`grader.hosting.environment.environment` read them.
    """
    global _returning
    if choice == DEFAULT:
        return f"allocator: the C library's own settings (GRADER_ALLOCATOR={DEFAULT})"
    if operator_threshold:  # glibc read it at start, and it disabled the dynamic threshold as the call below does
        return f"allocator: MALLOC_MMAP_THRESHOLD_={operator_threshold} from the environment"
    libc = _glibc()
    if libc is None:
        return "allocator: not glibc; the C library's own settings"
    if libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1:
        return "allocator: glibc refused mallopt(M_MMAP_THRESHOLD); its own settings"
    _returning = True
    ignored = f" (GRADER_ALLOCATOR={choice!r} is not {DEFAULT!r}: ignored)" if choice else ""
    return f"allocator: blocks of {MMAP_THRESHOLD >> 20} MiB or more go back to the system when freed (glibc M_MMAP_THRESHOLD){ignored}"


def release_free_memory() -> None:
    """Hand the free pages inside the allocator's heaps back to the system (glibc ``malloc_trim``), once
    :func:`return_large_buffers` applied; after a merge, whose many small blocks freed leave holes the heaps' tops
    do not (a few milliseconds)."""
    libc = _glibc()
    if _returning and libc is not None:
        libc.malloc_trim(0)


def release_job_memory() -> None:
    """After a worker's job: free the reference cycles it left (``gc.collect``: the httpx responses that hold the bodies
    it put, see the module), then hand the free pages back (:func:`release_free_memory`).

    A full collection of a worker's objects takes about 0.1 s, against a job of seconds or more.
    """
    gc.collect()
    release_free_memory()
