"""A worker's grade, as it goes: each task's progress written for the heartbeat to send, and a log line per step.

The grade runs in a forked child (:mod:`grader.hosting.worker.child`); :class:`GradeProgress` is its
:class:`~grader.grading.interfaces.ProgressListener`. It keeps one :class:`TaskProgress` per task of the
job, writes them whole to a small file in the grade's work folder (atomically: the heartbeat thread of
the worker reads the last whole version, :func:`read_progress`) and logs the same words
(:func:`grader.hosting.protocol.progress.task_words`) a participant sees. Only counts ``grader check``
shows already (a task's documents) and the grade's own steps are in it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from grader import jsonio
from grader.errors import DataError
from grader.files import read_bounded
from grader.grading.interfaces import SEARCHING, SilentProgress
from grader.hosting.protocol.messages import MAX_PROGRESS_TASKS, Phase, TaskProgress
from grader.hosting.protocol.progress import task_words

log = logging.getLogger("grader.worker")

#: The file in a grade's work folder its child writes each task's progress to.
PROGRESS_FILE = "progress.json"
#: The least time between two writes of the file while documents are encoded (a step of a task is written at once).
WRITE_EVERY_S = 1.0
#: The largest progress file read back: a task's entry is well under 300 bytes.
MAX_PROGRESS_BYTES = MAX_PROGRESS_TASKS * 512


class GradeProgress(SilentProgress):
    """Each task's progress of one grade, written to ``path`` (None: logged only) and logged a line per step.

    While documents are encoded, a log line at most every ``log_every_s`` and a write at most every
    :data:`WRITE_EVERY_S`; every other step (a task started, searching, ranked, failed) at once.
    """

    def __init__(self, tasks: list[str], path: Path | None, *, log_every_s: float = 60.0) -> None:
        self.path = path
        self.log_every_s = log_every_s
        self.tasks: dict[str, TaskProgress] = {task: TaskProgress(task=task, phase=Phase.WAITING) for task in tasks[:MAX_PROGRESS_TASKS]}
        self.started: dict[str, float] = {}
        self._written = 0.0
        self._write()

    def _write(self) -> None:
        self._written = time.monotonic()
        if self.path is not None:
            jsonio.write_json(self.path, {"tasks": [entry.model_dump(mode="json", exclude_none=True) for entry in self.tasks.values()]})

    def _step(self, task: str, entry: TaskProgress, suffix: str = "") -> None:
        if task not in self.tasks:
            return  # a task the job did not name is never reported
        self.tasks[task] = entry
        log.info("task %s%s", task_words(entry), suffix)
        self._write()

    def task_started(self, task: str, *, documents: int, queries: int) -> None:
        self.started[task] = time.monotonic()
        self._step(task, TaskProgress(task=task, phase=Phase.ENCODING, documents=documents))

    def stage(self, task: str, stage: str) -> None:
        if stage == SEARCHING and task in self.tasks:
            self._step(task, self.tasks[task].model_copy(update={"phase": Phase.SEARCHING}))

    def task_finished(self, task: str, entry: dict[str, Any], *, resumed: bool) -> None:
        now = time.monotonic()
        took = f" in {now - self.started.get(task, now):.0f} s"
        failure = entry.get("failure")
        phase = Phase.FAILED if failure else Phase.RANKED
        code = failure.get("code") if isinstance(failure, dict) else None
        if task in self.tasks:
            self._step(task, self.tasks[task].model_copy(update={"phase": phase}), took + (f" ({code})" if code else ""))

    def progress(self, label: str, total: int) -> Callable[[int], None]:
        """Counts of encoded documents (the corpus side, ``"<task>: corpus"``); the queries' side is not reported."""
        task, _, side = label.rpartition(": ")
        done = [0]
        logged = [time.monotonic()]

        def advance(count: int) -> None:
            done[0] = min(total, done[0] + count)
            if side != "corpus" or task not in self.tasks:
                return
            now = time.monotonic()
            self.tasks[task] = TaskProgress(task=task, phase=Phase.ENCODING, documents=total, encoded=done[0])
            if now - logged[0] >= self.log_every_s or done[0] >= total:
                logged[0] = now
                log.info("task %s", task_words(self.tasks[task]))
            if now - self._written >= WRITE_EVERY_S or done[0] >= total:
                self._write()

        return advance


def read_progress(path: Path) -> list[TaskProgress]:
    """The progress a grade's child last wrote at ``path``; empty when there is none yet or it cannot be read (never raises)."""
    try:
        raw = jsonio.loads(read_bounded(path, MAX_PROGRESS_BYTES, DataError, what="progress file"))
        tasks = raw.get("tasks") if isinstance(raw, dict) else None
        return [TaskProgress.model_validate(entry) for entry in tasks[:MAX_PROGRESS_TASKS]] if isinstance(tasks, list) else []
    except (DataError, jsonio.JsonError, ValidationError):
        return []
