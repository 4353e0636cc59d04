"""A worker claims only while its Docker engine answers: a worker whose engine is down would fail every job it took.

Every job a worker runs needs the engine (grades and shard jobs run in containers). Claimed while the engine is
away (restarted, say), each job would fail ``INFRA`` at once, and the server would retry it after a backoff, try
after try, until the grade's retries are spent; so the worker asks the engine before each claim
(:func:`engine_up`) and claims nothing until it answers again. The jobs that were running when it went away are
the only ones lost (docs/hosting.md, "Platform failures").
"""

from __future__ import annotations

import logging
import threading
import time

from grader.sandbox.engine import engine_answers

log = logging.getLogger("grader.worker")

#: How long one answer stands: the worker's loops ask several times a second at most.
CHECK_EVERY_S = 1.0
#: How long a worker whose engine does not answer waits before it asks again.
DOWN_WAIT_S = 2.0

_lock = threading.Lock()
_last: dict[str, float | bool] = {"at": float("-inf"), "up": True}


def engine_up() -> bool:
    """Whether this machine's Docker engine answered a ping within the last :data:`CHECK_EVERY_S`; the change is logged
    once each way (down: a warning; back: a line), not at each claim."""
    with _lock:
        now = time.monotonic()
        if now - float(_last["at"]) < CHECK_EVERY_S:
            return bool(_last["up"])
        up = engine_answers()
        if up != _last["up"]:
            if up:
                log.info("the Docker engine answers again: claiming jobs")
            else:
                log.warning("the Docker engine does not answer: claiming nothing until it does (asking every %g s)", DOWN_WAIT_S)
        _last.update(at=now, up=up)
        return up
