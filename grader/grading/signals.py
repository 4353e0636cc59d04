"""SIGTERM and SIGHUP stop the grader as cleanly as SIGINT.

Python turns SIGINT into ``KeyboardInterrupt``, which unwinds the stack through
every ``finally`` (container removed, ``/output`` unmounted, staged data
deleted). SIGTERM (what ``timeout``, CI runners and systemd send) and SIGHUP (a
closed terminal) would otherwise end the process at once and skip all of that.
Inside :func:`stop_on_signals` all three raise :class:`~grader.errors.Interrupted`
in the main thread instead; a second signal during the cleanup is ignored, so
the cleanup itself is not cut short (SIGKILL still ends it; then the watchdog
and the next start's sweep clean up).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from grader.errors import Interrupted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGINT/SIGTERM/SIGHUP raise :class:`Interrupted` (once); handlers restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set in the main thread
        return
    stopping = False

    def handler(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        raise Interrupted(signum, signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
