"""A claim the server refused for now (429): how long to wait before claiming again, and the wait itself.

A server answers a worker's claim 429 with ``Retry-After`` when the worker already has as many claims in
progress as it allows (:mod:`grader.hosting.api.long_poll`); a proxy in front of it may answer 429 too. Either
is a server that is there and asks for a pause, not one that is unreachable: the worker waits what it was
told, within bounds (a hostile or broken answer can neither stall it for hours nor make it spin), and then
claims again, serving on. Both claim paths, the submission's and the shard job's, raise :class:`ClaimThrottled`;
the loops that claim wait it out with :func:`wait_out`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import httpx

log = logging.getLogger("grader.worker")

#: Seconds waited when a 429 names no usable ``Retry-After`` (absent, an HTTP date, garbled).
DEFAULT_WAIT_S = 5.0
#: The longest wait a 429 can ask for: a worker claims again within half a minute whatever it was told.
MAX_WAIT_S = 30.0
#: The shortest: a ``Retry-After: 0`` answered again and again would have the worker spin on the server.
MIN_WAIT_S = 1.0


class ClaimThrottled(Exception):
    """The server answered a claim 429: claim again after ``wait_s`` seconds (already bounded)."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"claim refused for now (429): claiming again in {wait_s:g} s")
        self.wait_s = wait_s


def retry_after_s(value: str | None) -> float:
    """The seconds a ``Retry-After`` value asks for, between :data:`MIN_WAIT_S` and :data:`MAX_WAIT_S`;
    :data:`DEFAULT_WAIT_S` unless it is delta-seconds (the only form the server sends)."""
    text = (value or "").strip()
    if not text.isascii() or not text.isdigit():
        return DEFAULT_WAIT_S
    digits = text.lstrip("0") or "0"
    seconds = MAX_WAIT_S if len(digits) > 6 else float(digits)  # bounded before int(): a header may hold 60 kB of digits
    return min(max(seconds, MIN_WAIT_S), MAX_WAIT_S)


def raise_if_throttled(response: httpx.Response) -> None:
    """Raise :class:`ClaimThrottled` for a claim answered 429; anything else is the caller's to read."""
    if response.status_code == 429:
        raise ClaimThrottled(retry_after_s(response.headers.get("Retry-After")))


def wait_out(throttled: ClaimThrottled, wait: Callable[[float], object] = time.sleep) -> None:
    """Log one line and wait what the 429 asked for (``wait``: :func:`time.sleep`, or an event's ``wait`` so that a
    stopping worker does not sit out the pause)."""
    log.warning("the server refused a claim for now (429, too many claims of this worker in progress): claiming again in %g s", throttled.wait_s)
    wait(throttled.wait_s)
