"""``grader status --watch``: one line that follows a submission, redrawn on a terminal, a plain line per change in a log."""

from __future__ import annotations

import shutil
import sys
from typing import TextIO


class WatchLine:
    """Shows each new text: on a terminal it replaces the line before (cut to the terminal's width); elsewhere it is a
    line of its own, written only when it changed (a log gets one line per change, not one per poll)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.last: str | None = None

    def show(self, text: str) -> None:
        """Show ``text`` (already escaped for a terminal) if it differs from the last one shown."""
        if text == self.last:
            return
        self.last = text
        if self.tty:
            width = max(20, shutil.get_terminal_size().columns - 1)
            self.stream.write("\r\x1b[K" + text[:width])
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the redrawn line (a terminal's next output starts on a line of its own)."""
        if self.tty and self.last is not None:
            self.stream.write("\n")
            self.stream.flush()
