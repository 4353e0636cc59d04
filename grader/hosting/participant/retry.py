"""A flaky network never loses nor doubles a submission: the client's retries and an upload's identity.

Every upload carries a fresh random ``Idempotency-Key`` (128 bits) and its body's
``Content-Digest`` (:func:`upload_identity`); the server answers a repeated key with the
submission the first copy became (grader.hosting.intake.uploads). So a request may be
sent again whenever the connection failed, whether the server saw none, part or all of
it: :func:`send_with_retry` does that, with exponential backoff, for connection
failures and a proxy's 502/503/504. The backoff is bounded in total time, so that an
unreachable server still ends the command (exit 5) within seconds.
"""

from __future__ import annotations

import base64
import hashlib
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

#: Answers of a proxy in front of a server that is restarting or overloaded: worth another try.
RETRY_STATUSES = frozenset({502, 503, 504})
#: Connection failures where nothing reached the server: their time counts against the budget.
_NOT_CONNECTED = (httpx.ConnectError, httpx.ConnectTimeout)


@dataclass(frozen=True)
class RetryPolicy:
    """At most ``attempts`` tries; waits ``first_delay_s``, doubled each time up to ``max_delay_s``, with jitter.

    ``budget_s`` bounds the time spent waiting and in failed connects altogether (a long
    upload cut midway is retried; a server that cannot be reached is given up on).
    """

    attempts: int = 5
    first_delay_s: float = 0.25
    max_delay_s: float = 2.0
    budget_s: float = 6.0


def upload_identity(archive: Path) -> dict[str, str]:
    """The headers that make an upload of ``archive`` safe to send again: a fresh key and the body's SHA-256."""
    digest = hashlib.sha256()
    with open(archive, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return {"Idempotency-Key": secrets.token_hex(16), "Content-Digest": f"sha-256=:{base64.b64encode(digest.digest()).decode('ascii')}:"}


def send_with_retry(
    send: Callable[[], httpx.Response],
    policy: RetryPolicy,
    *,
    on_retry: Callable[[str, float], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> httpx.Response:
    """``send()`` until it gets an answer worth keeping; the last failure (raised, or the last 5xx answered) otherwise.

    ``send`` must build a fresh request each time (a streamed body is consumed by a try).
    ``on_retry`` hears what failed and how long the client waits before the next try.
    """
    spent = 0.0
    delay = policy.first_delay_s
    for attempt in range(1, policy.attempts + 1):
        started = time.monotonic()
        try:
            response = send()
        except httpx.TransportError as error:  # refused, reset, "disconnected without sending a response", timeouts
            if isinstance(error, _NOT_CONNECTED):
                spent += time.monotonic() - started
            failure: httpx.TransportError | httpx.Response = error
            what = f"{type(error).__name__}: {error}"
        else:
            if response.status_code not in RETRY_STATUSES:
                return response
            failure, what = response, f"server answered {response.status_code}"
        wait = min(delay, policy.max_delay_s) * random.uniform(0.75, 1.25)
        if attempt == policy.attempts or spent + wait > policy.budget_s:
            if isinstance(failure, httpx.Response):
                return failure
            raise failure
        if on_retry is not None:
            on_retry(what, wait)
        sleep(wait)
        spent += wait
        delay *= 2
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises on its last attempt
