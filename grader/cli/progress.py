"""Progress on stderr for long work: one updating line per phase on a terminal,
occasional lines otherwise (so CI logs stay short)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import click

from grader.text import MAX_ERROR_LINE, MAX_STDERR_LINE, bounded


class StderrProgress:
    """Implements :class:`grader.grading.interfaces.ProgressListener` for people."""

    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False, primary: str | None = None) -> None:
        self.stream = stream or sys.stderr
        self.quiet = quiet
        #: the measure shown for a scored task (stored entries list their measures sorted by name)
        self.primary = primary
        self.interactive = self.stream.isatty()

    def _say(self, text: str) -> None:
        # Failure messages and stderr lines come from submissions (and stored files): never raw to a terminal.
        if not self.quiet:
            click.echo(bounded(text, MAX_ERROR_LINE), file=self.stream)

    def task_started(self, task: str, *, documents: int, queries: int) -> None:
        self._say(f"{task}: encoding {documents} documents and {queries} queries")

    def stage(self, task: str, stage: str) -> None:
        """Nothing: a person sees the encoding's progress and the task's score, which follows the search at once."""
        return None

    def note(self, text: str) -> None:
        """A one-line remark (the sandbox chosen, a stored result not reused)."""
        self._say(text)

    def task_finished(self, task: str, entry: dict[str, Any], *, resumed: bool) -> None:
        origin = " (stored result, resumed)" if resumed else ""
        if entry["status"] == "scored":
            measures = entry["measures"]
            name = self.primary if self.primary in measures else next(iter(measures))
            self._say(f"{task}: scored {name} = {measures[name]:.4f}{origin}")
        else:
            failure = entry["failure"]
            stderr = f"; last stderr line: {bounded(failure['stderr'], MAX_STDERR_LINE)}" if failure.get("stderr") else ""
            self._say(f"{task}: FAILED {failure['code']}: {bounded(failure['message'])}{stderr}{origin}")

    def progress(self, label: str, total: int) -> Callable[[int], None]:
        done = 0
        started = time.monotonic()
        last = 0.0

        def advance(count: int) -> None:
            nonlocal done, last
            done += count
            now = time.monotonic()
            if self.quiet or (now - last < (0.2 if self.interactive else 10.0) and done < total):
                return
            last = now
            rate = done / max(now - started, 1e-9)
            eta = (total - done) / rate if rate > 0 else 0.0
            line = f"  {label}: {done}/{total} ({100 * done / max(total, 1):.0f}%, {rate:.0f}/s, {eta:.0f}s left)"
            if self.interactive:
                end = "\n" if done >= total else ""
                self.stream.write("\r" + line + end)
                self.stream.flush()
            else:
                click.echo(line, file=self.stream)

        return advance

    def finish(self) -> None:
        return None
