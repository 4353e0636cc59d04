"""A container's own word on how far it got: ``/output/progress.json``, optional, untrusted, read while it runs.

A container may write ``{"encoded": N}`` (N: documents of ``/input/corpus.jsonl`` it has
encoded or indexed so far) to ``/output/progress.json``, replacing it as it goes (write a
temporary file in ``/output`` and rename it over). The host looks at it about once a second
while the container runs, and once more after it exited (:class:`ProgressWatch`), and forwards
the count to the grade's :class:`~grader.grading.interfaces.ProgressListener` (``encoding N of
M documents``). It is never a result: outputs are read by name (:mod:`grader.collect`), and
nothing of it reaches a report.

Read like any output, only more strictly, and never failing the grade: a regular file
(``O_NOFOLLOW``: a link is refused wherever it points) of at most :data:`MAX_PROGRESS_BYTES`,
strict JSON (:mod:`grader.jsonio`) that is exactly ``{"encoded": <int>}``. A count above the
task's document count ``M`` (known to the host), or below the last one accepted, is ignored; so
is anything else unreadable. A submitted image's counts are passed on only in steps of
``step`` documents (a twentieth of the corpus, :func:`image_step`): the numbers a participant
sees while a hidden split is graded then carry at most a few dozen bits a container chose.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from grader import jsonio

#: The file's name in ``/output`` (docs/protocol.md).
PROGRESS_FILE = "progress.json"
#: The largest progress file read: ``{"encoded": N}`` is well under it.
MAX_PROGRESS_BYTES = 256
#: How often the host looks at the file while the container runs.
POLL_EVERY_S = 1.0
#: A submitted image's counts are shown in this many steps of its corpus at most.
IMAGE_STEPS = 20


def image_step(documents: int) -> int:
    """The granularity of a submitted image's counts for a corpus of ``documents`` (at least 1)."""
    return max(1, -(-documents // IMAGE_STEPS))


def read_progress_count(folder: Path) -> int | None:
    """The count in ``folder/progress.json``, or None when it is absent, a link, not a regular file, too large or malformed (never raises)."""
    try:
        fd = os.open(folder / PROGRESS_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_PROGRESS_BYTES:
            return None
        data = os.read(fd, MAX_PROGRESS_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_PROGRESS_BYTES:
        return None
    try:
        value = jsonio.loads(data, max_depth=2, max_bytes=MAX_PROGRESS_BYTES)
    except jsonio.JsonError:
        return None
    if not isinstance(value, dict) or set(value) != {"encoded"}:
        return None
    count = value["encoded"]
    if type(count) is not int or count < 0:  # a bool is an int to isinstance
        return None
    return count


class ProgressWatch:
    """Forwards a running container's ``progress.json`` to ``advance`` as increments of accepted counts.

    ``total`` is the task's document count; ``advance`` is what
    :meth:`~grader.grading.interfaces.ProgressListener.progress` returned (it adds the count it is
    given). A count is accepted when it is at most ``total`` and, rounded down to a multiple of
    ``step`` (``total`` itself stays), above the last accepted one.
    """

    def __init__(self, folder: Path, *, total: int, advance: Callable[[int], None], step: int = 1) -> None:
        self.folder = folder
        self.total = total
        self.advance = advance
        self.step = max(1, step)
        #: the last count passed on
        self.shown = 0

    def poll(self) -> None:
        """Look at the file once; pass on what it adds (never raises for what the container wrote)."""
        count = read_progress_count(self.folder)
        if count is None or count > self.total:
            return
        if count < self.total:
            count -= count % self.step
        if count > self.shown:
            added, self.shown = count - self.shown, count
            self.advance(added)
