"""Grading in a child process, so that a worker can stop a grade the server no longer wants.

A heartbeat answered "stale" (the lease expired and the job went back to the
queue) or "cancelled" (the host cancelled the submission) means that whatever
the grade produces will be refused. Grading on would hold the machine, its
containers and the staged hidden data for nothing, up to the time limit. The
grading core cannot be interrupted from another thread, so each grade runs in
a forked child (fork, not spawn: the grading code is already imported, so a
grade starts in milliseconds; spawned only in a process that has run numba's
parallel kernels itself, see :func:`start_method`) and the worker waits on it
while it watches the heartbeat. To stop it, the worker sends SIGTERM: inside the child that
raises :class:`~grader.errors.Interrupted` (:func:`grader.grading.signals.stop_on_signals`),
which unwinds the grading core's clean-up (container removed, ``/output``
unmounted, staged data deleted), as for ``grader run``. A child that has not
ended after :data:`STOP_GRACE_S` is SIGKILLed; its sandbox watchdogs remove its
containers and scratch folders within about a second because their owner (the
child) is dead, and the worker sweeps what they may have missed
(:mod:`grader.sandbox.sweep`, which only touches what dead owners left).

The child also ends itself when the worker dies (SIGKILL leaves no one to stop
it): it watches its parent, interrupts its own grade, and removes what the
worker would have (its work folder with the upload, the submission's image).

:func:`run_in_child` is that mechanism for any work: a whole grade
(:func:`grade_in_child`) or one shard job (:mod:`grader.hosting.worker.shard_loop`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TypeVar

from grader.failures import FailureCode
from grader.hosting.results.grading_adapter import GradeOutcome, GradeRequest, grade_upload

log = logging.getLogger("grader.worker")
T = TypeVar("T")

#: Seconds a stopped child has to clean up after SIGTERM before it is SIGKILLed.
STOP_GRACE_S = 10.0
#: How often the worker looks at the child and at the heartbeat's verdict.
_POLL_S = 0.2


def _watch_parent(parent: int) -> None:
    """In the child: interrupt the grade (SIGTERM to itself, so it cleans up) once the worker is gone."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)


def _child_main(send: Connection, work: Callable[[], object], on_orphan: Callable[[], None], parent: int) -> None:
    """The child's whole life: work, send the outcome back, exit."""
    from grader.errors import Interrupted
    from grader.grading.signals import stop_on_signals
    from grader.retrieval.threads import fit_threads_to_cpus
    from grader.sandbox.engine import docker_client

    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the worker's "finish the job first" handler, until the guard below
    # The worker's Docker client (and its pooled socket) was copied by fork; never share a connection with it.
    docker_client.cache_clear()
    # The worker may have been pinned to fewer CPUs since it loaded faiss and numba: this job's search runs on its CPUs.
    fit_threads_to_cpus()
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="parent-watch").start()
    try:
        with stop_on_signals():
            outcome = work()
    except Interrupted:
        # Stopped: the grading core's clean-up ran while unwinding; nothing to send. Orphaned: the worker's own
        # clean-up (its work folder with the upload, the loaded image) will not run, so do it here.
        if os.getppid() != parent:
            on_orphan()
        return
    send.send(outcome)
    send.close()


def _stop(child: multiprocessing.process.BaseProcess) -> None:
    """SIGTERM, a grace for the child's own clean-up, then SIGKILL; then sweep what a killed child left."""
    child.terminate()
    child.join(STOP_GRACE_S)
    if child.exitcode is None:
        log.warning("grading child %s did not stop within %.0f s: killing it", child.pid, STOP_GRACE_S)
        child.kill()
        child.join()
    try:
        from grader.sandbox.sweep import sweep_containers, sweep_folders

        sweep_containers()
        sweep_folders()
    except Exception as error:  # the engine may be unreachable: the watchdogs and the next start's sweep remain
        log.warning("sweep after stopping a grade failed: %s", type(error).__name__)


def _orphaned_grade(upload: Path, work_dir: Path) -> None:
    """What the worker would have removed after a grade: the submission's loaded image, its work folder with the upload."""
    from grader.hosting.worker.hygiene import remove_submission_image

    remove_submission_image(upload)
    shutil.rmtree(work_dir, ignore_errors=True)


def grade_in_child(upload: Path, request: GradeRequest, work_dir: Path, *, abandon: Callable[[], bool]) -> GradeOutcome | None:
    """Grade in a forked child; None when ``abandon()`` turned true first (the child is then stopped and cleaned up).

    A child that ends without an outcome (killed from outside, out of memory) is the platform's
    failure: an ``INFRA`` outcome, which sends the job back to the queue.
    """
    return run_in_child(
        partial(grade_upload, upload, request, work_dir),
        abandon=abandon,
        ended=lambda status: GradeOutcome(None, FailureCode.INFRA, f"the grading process ended without a result (exit status {status})"),
        on_orphan=partial(_orphaned_grade, upload, work_dir),
        name="grader-grade",
    )


def start_method() -> str:
    """How :func:`run_in_child` starts its child: ``fork``, unless this process has started numba's parallel threads.

    Numba's OpenMP threading layer (GNU libgomp, the one installed here) is not fork-safe: a forked child's first
    parallel kernel (the exact search's) prints "fork() called from a process already using GNU OpenMP" and sends
    itself SIGTERM. A worker never runs a kernel itself, so its children are forked (milliseconds); a process that
    has (a test, an embedding program) gets a spawned child instead: a second's imports, and a correct grade.
    """
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    return "spawn" if parallel is not None and getattr(parallel, "_is_initialized", False) else "fork"


def run_in_child(
    work: Callable[[], T], *, abandon: Callable[[], bool], ended: Callable[[int | None], T], on_orphan: Callable[[], None], name: str
) -> T | None:
    """``work()`` in a forked child, stoppable (see the module): its result; ``ended(exit status)`` when it died without one; None when abandoned.

    ``work`` must leave nothing behind when interrupted (SIGTERM raises :class:`~grader.errors.Interrupted` in it);
    ``on_orphan`` removes, in the child, what the worker would have, when the worker is gone.
    """
    context = multiprocessing.get_context("spawn") if start_method() == "spawn" else multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child_main, args=(send, work, on_orphan, os.getpid()), name=name, daemon=False)
    child.start()
    send.close()  # only the child writes; the parent then sees EOF if the child dies
    try:
        while True:
            if receive.poll(_POLL_S):
                try:
                    outcome: T = receive.recv()
                except (EOFError, OSError):
                    child.join()
                    return ended(child.exitcode)
                child.join()
                return outcome
            if abandon():
                _stop(child)
                return None
    finally:
        receive.close()
        if child.exitcode is None:  # an exception in this loop: never leave a grade running behind
            _stop(child)
