"""A logging filter that lets a repeated line through a few times a minute, then counts it.

At the file-descriptor limit an accept loop fails on every turn, and each failure
logs a traceback: `serve.log` once grew 151 MB in 40 s. The server puts this filter
on the loggers such lines come from (asyncio's, uvicorn's): per logger and kind of
message (its first line's start), at most ``burst`` records per ``window_s``; the first record let through
after a window with drops says how many were dropped.
"""

from __future__ import annotations

import logging
import threading
import time

#: How much of a message's first line tells one kind of line from another.
KEY_CHARS = 60


class RepeatThrottle(logging.Filter):
    """At most ``burst`` records of one (logger, template) per ``window_s`` seconds."""

    def __init__(self, burst: int = 5, window_s: float = 60.0) -> None:
        super().__init__()
        self.burst = burst
        self.window_s = window_s
        self._windows: dict[tuple[str, str], tuple[float, int, int]] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        # The message's first line, shortened: asyncio's "Exception in callback ..." lines differ by object addresses after it.
        key = (record.name, str(record.msg).split("\n", 1)[0][:KEY_CHARS])
        now = time.monotonic()
        with self._lock:
            began, passed, dropped = self._windows.get(key, (now, 0, 0))
            if now - began >= self.window_s:
                if dropped:
                    record.msg = f"{record.msg} [{dropped} more like this in the last {now - began:.0f} s not logged]"
                began, passed, dropped = now, 0, 0
            if passed >= self.burst:
                self._windows[key] = (began, passed, dropped + 1)
                return False
            if len(self._windows) > 1000:  # bounded under a spray of distinct messages
                self._windows.clear()
            self._windows[key] = (began, passed + 1, dropped)
            return True


#: The loggers the server limits: asyncio's accept loop and uvicorn's own errors, and the refused fingerprints
#: (a worker may repeat a refused claim as fast as it likes: grader.hosting.services.fingerprints).
THROTTLED_LOGGERS = ("asyncio", "uvicorn.error", "grader.hosting.fingerprints")


def throttle_repeats(burst: int = 5, window_s: float = 60.0) -> RepeatThrottle:
    """Put one :class:`RepeatThrottle` on each of :data:`THROTTLED_LOGGERS`; return it."""
    limit = RepeatThrottle(burst, window_s)
    for name in THROTTLED_LOGGERS:
        logging.getLogger(name).addFilter(limit)
    return limit
