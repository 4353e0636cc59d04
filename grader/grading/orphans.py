"""Helper processes that end with the process that started them, a SIGKILL of it included.

A killed server runs no clean-up: its spawned helpers (scoring processes, a data export) would outlive it, about
130 MB each, and so would the multiprocessing resource tracker, which ends only when the last holder of its pipe
does. :func:`exit_with_parent`, run first in the helper (a pool's ``initializer``), ends the helper within
:data:`PARENT_POLL_S` of its parent's death.
"""

from __future__ import annotations

import os
import threading
import time

#: Seconds between two looks of a helper process at its parent.
PARENT_POLL_S = 0.5


def _watch(parent: int) -> None:
    """Exit (status 1, no clean-up: the parent that would want one is gone) once this process is re-parented."""
    while True:
        time.sleep(PARENT_POLL_S)
        if os.getppid() != parent:
            os._exit(1)


def exit_with_parent(parent: int) -> None:
    """In a helper process started by process ``parent``: end it as soon as ``parent`` is gone (re-parented).

    A polling thread rather than Linux's ``PR_SET_PDEATHSIG``: that signal follows the parent *thread* that spawned the
    helper (a request thread of the server, say, which may end long before the server does), and exists on Linux only.
    """
    if os.getppid() != parent:  # the parent died while this process started
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), name="grader-parent-watch", daemon=True).start()
