"""A flaky network never loses nor doubles a submission: the client's retries and an upload's identity.

Every upload carries a fresh random ``Idempotency-Key`` (128 bits) and its body's
``Content-Digest`` (:func:`upload_identity`); the server answers a repeated key with the
submission the first copy became (grader.hosting.intake.uploads). So a request may be
sent again whenever the connection failed, whether the server saw none, part or all of
it: :func:`send_with_retry` does that, with exponential backoff, for connection
failures and a proxy's 502/503/504. The backoff is bounded in total time, so that an
unreachable server still ends the command (exit 5) within seconds.

One answer is retried apart, for longer: 409 with ``in_progress`` (another copy of the
upload under its key is still arriving, typically the first try, whose connection broke
without the server seeing it). :func:`send_while_in_progress` waits what ``Retry-After``
says and sends again, for at most ``in_progress_s`` in all: by then the server has either
committed that copy (the retry is answered with its submission) or let the retry take
the stalled copy over.
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
from typing import Any, Protocol, TypeVar

import httpx

from grader.hosting.errors import ClientError

#: Answers of a proxy in front of a server that is restarting or overloaded: worth another try.
RETRY_STATUSES = frozenset({502, 503, 504})
#: Connection failures where nothing reached the server: their time counts against the budget.
_NOT_CONNECTED = (httpx.ConnectError, httpx.ConnectTimeout)


class Answered(Protocol):
    """What the retries read of an answer: an ``httpx.Response``, or the bounded fetch's ``Answer``."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> httpx.Headers: ...

    def json(self) -> Any: ...


R = TypeVar("R", bound=Answered)


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
    #: How long an upload waits in all while the server answers "in progress": several times the server's default
    #: ``upload.stall_s`` (10 s), so that a first copy that died unseen is taken over well within it.
    in_progress_s: float = 60.0


def upload_identity(archive: Path) -> dict[str, str]:
    """The headers that make an upload of ``archive`` safe to send again: a fresh key and the body's SHA-256."""
    digest = hashlib.sha256()
    with open(archive, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return {"Idempotency-Key": secrets.token_hex(16), "Content-Digest": f"sha-256=:{base64.b64encode(digest.digest()).decode('ascii')}:"}


def send_with_retry(
    send: Callable[[], R],
    policy: RetryPolicy,
    *,
    on_retry: Callable[[str, float], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> R:
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
            failure: httpx.TransportError | R = error
            what = f"{type(error).__name__}: {error}"
        else:
            if response.status_code not in RETRY_STATUSES:
                return response
            failure, what = response, f"server answered {response.status_code}"
        wait = min(delay, policy.max_delay_s) * random.uniform(0.75, 1.25)
        if attempt == policy.attempts or spent + wait > policy.budget_s:
            if isinstance(failure, httpx.TransportError):
                raise failure
            return failure
        if on_retry is not None:
            on_retry(what, wait)
        sleep(wait)
        spent += wait
        delay *= 2
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises on its last attempt


def in_progress_wait(response: Answered) -> float | None:
    """The seconds to wait before sending again when ``response`` is 409 "in progress" (its ``Retry-After``, 1 at least); None for any other answer."""
    if response.status_code != 409:
        return None
    try:
        marked = response.json().get("in_progress") is True
    except (ValueError, AttributeError):
        return None
    if not marked:
        return None
    try:
        return max(1.0, float(response.headers.get("retry-after", "1")))
    except ValueError:
        return 1.0


def send_while_in_progress(
    send: Callable[[], R],
    policy: RetryPolicy,
    *,
    on_wait: Callable[[float, float, float], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> R:
    """``send()`` again while the server answers 409 "in progress", waiting its ``Retry-After`` each time, ``policy.in_progress_s`` at most in all.

    ``on_wait`` hears the wait, the time waited so far and the bound. Past the bound:
    :class:`ClientError`, one line saying what to check before submitting again.
    """
    waited = 0.0
    while True:
        response = send()
        wait = in_progress_wait(response)
        if wait is None:
            return response
        if waited + wait > policy.in_progress_s:
            raise ClientError(
                f"the server was still receiving another copy of this upload after {waited:.0f} s of waiting;"
                " `grader submissions` shows whether it arrived (a new `grader submit` is a new upload)"
            )
        if on_wait is not None:
            on_wait(wait, waited, policy.in_progress_s)
        sleep(wait)
        waited += wait
