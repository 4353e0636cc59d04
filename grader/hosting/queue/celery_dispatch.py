"""Dispatch through Celery (``grader serve --broker``): the same wake-up, sent to remote workers too.

Publishing happens on one background thread fed by an in-memory queue, so an
upload's request never waits on the broker; a publish that fails (the broker
is down or restarting) is logged and dropped: the job is committed ``queued``
and the reaper re-dispatches jobs that wait unclaimed (``queue.redispatch_s``).
"""

from __future__ import annotations

import logging
import queue
import threading

from grader.hosting.queue.celery_app import QUEUE, WAKE_TASK, make_celery
from grader.hosting.queue.dispatch import LocalDispatcher

log = logging.getLogger("grader.hosting")


class CeleryDispatcher:
    """Wakes local long-polls (through a :class:`LocalDispatcher` it holds) and publishes a Celery wake-up per dispatch."""

    def __init__(self, broker: str) -> None:
        self._local = LocalDispatcher()
        self.app = make_celery(broker)
        self._pending: queue.Queue[str | None] = queue.Queue()
        self.published = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._publish_loop, name="grader-celery-publisher", daemon=True)
        self._thread.start()

    def dispatch(self, submission_id: str) -> None:
        """Wake this server's long-polls now; the Celery wake-up is published by the background thread."""
        self._local.dispatch(submission_id)
        self._pending.put(submission_id)

    def generation(self) -> int:
        """The local dispatch counter (see :meth:`LocalDispatcher.generation`)."""
        return self._local.generation()

    async def wait_async(self, seen: int, timeout: float) -> None:
        """Wait as a local long-poll does, holding no thread (see :meth:`LocalDispatcher.wait_async`)."""
        await self._local.wait_async(seen, timeout)

    def broker_counts(self) -> tuple[int, int]:
        """``(published, failed)`` Celery wake-ups since the start."""
        return self.published, self.failed

    def _publish_loop(self) -> None:
        while True:
            submission_id = self._pending.get()
            if submission_id is None:
                return
            try:
                # retry=False: fail fast; the reaper is the retry policy (it re-sends after redispatch_s).
                self.app.send_task(WAKE_TASK, args=[submission_id], queue=QUEUE, retry=False)
                self.published += 1
            except Exception as error:  # kombu raises transport-specific errors
                self.failed += 1
                log.warning("dispatch of %s not published (%s: %s); the reaper will re-send it", submission_id, type(error).__name__, error)

    def close(self) -> None:
        """Stop the publisher after what is pending."""
        self._pending.put(None)
        self._thread.join(5)
