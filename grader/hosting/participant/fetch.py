"""The one bounded fetch of every client command: a byte cap, a deadline per fetch and per command, a minimum rate.

The servers a participant's commands talk to (a competition server, its transparency log, a
mirror) are untrusted. Without bounds, one answering 600 MB of JSON costs the client more than a
gigabyte, and one that trickles a byte every ten seconds (well inside any socket read timeout)
keeps a command waiting for months. Every client fetch therefore goes through :meth:`Fetcher.fetch`:

* the body is streamed and never read past ``max_bytes`` (a ``Content-Length`` above it is
  refused before a byte of the body is read); compressed answers are not asked for, and refused,
  so the cap is on the bytes that arrive;
* once ``grace_s`` has passed since the answer's headers, its body must have averaged ``min_rate``
  bytes a second: a trickle ends within seconds of its grace;
* the whole fetch (connect, headers, body) ends by ``fetch_s``, and every fetch of one command
  ends by the command's deadline (``command_s`` from the :class:`Fetcher`'s creation). The fetch
  runs on a daemon thread the caller waits for, so a deadline holds even against a server that
  trickles its *headers* (which the HTTP library reads without giving control back); an
  abandoned fetch stops at its next chunk, holds at most ``max_bytes`` until then, and never
  keeps the process from exiting.

Each bound's failure is one line, raised through the caller's error type (a hosting command's
:class:`~grader.hosting.errors.ClientError`, exit 5; a log check's
:class:`~grader.transparency.errors.LogVerificationError`, exit 1). Transport failures
(refused, reset) propagate as ``httpx`` errors, so that :mod:`~grader.hosting.participant.retry`
can try again; a bound that was hit is never retried.

The bounds come from the environment (:mod:`grader.hosting.environment`), so a participant on a
slow link can widen them and tests can make them small.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from grader import jsonio
from grader.errors import GraderError, UsageError
from grader.hosting.environment import COMMAND_DEADLINE, FETCH_DEADLINE, FETCH_MIN_RATE, environment

#: Largest JSON answer of the participant API (a view, a list of one's submissions, logs, the quota).
MAX_JSON_ANSWER = 16 << 20
#: Largest signed report (a DSSE envelope) a client downloads; ``grader verify`` reads as much.
MAX_REPORT_ANSWER = 64 << 20

ErrorType = Callable[[str], GraderError]


@dataclass(frozen=True)
class FetchLimits:
    """The time bounds of a command's fetches (the byte cap is per fetch: each caller knows its answer's size)."""

    #: seconds one fetch may take in all: connect, headers, body
    fetch_s: float = 300.0
    #: bytes a second an answer's body must average once ``grace_s`` has passed since its headers
    min_rate: float = 2048.0
    grace_s: float = 10.0
    #: seconds all of one command's fetches may take; None for a command that follows a grade for hours (``--wait``)
    command_s: float | None = 3600.0

    @classmethod
    def from_environment(cls, *, follow: bool = False) -> FetchLimits:
        """The bounds as ``GRADER_FETCH_DEADLINE_S``, ``GRADER_FETCH_MIN_RATE`` and ``GRADER_COMMAND_DEADLINE_S`` set them
        (the defaults otherwise); ``follow``: no command deadline (each fetch keeps its own)."""
        env = environment()
        limits = cls(
            fetch_s=_seconds(env.fetch_deadline_s, FETCH_DEADLINE, cls.fetch_s),
            min_rate=_seconds(env.fetch_min_rate, FETCH_MIN_RATE, cls.min_rate, zero=True),
            command_s=_seconds(env.command_deadline_s, COMMAND_DEADLINE, 3600.0),
        )
        return limits if not follow else cls(limits.fetch_s, limits.min_rate, limits.grace_s, None)


def _seconds(text: str | None, name: str, default: float, *, zero: bool = False) -> float:
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise UsageError(f"{name}={text!r} is not a {'non-negative' if zero else 'positive'} number")
    return value


@dataclass(frozen=True)
class Answer:
    """A server's answer, read whole under the bounds: status, headers and body (what ``httpx.Response`` offers of them)."""

    url: str
    status_code: int
    headers: httpx.Headers
    content: bytes

    @property
    def text(self) -> str:
        """The body decoded as UTF-8, undecodable bytes replaced (for an error line: escape it before showing it)."""
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON (:class:`ValueError` if it is not: the callers turn it into their one error line)."""
        return jsonio.loads(self.content)


@dataclass
class _Outcome:
    """What the fetch thread hands back; ``cancelled`` tells an abandoned thread to stop at its next chunk."""

    answer: Answer | None = None
    failure: BaseException | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)


class Fetcher:
    """The fetches of one command, each under :class:`FetchLimits`, all of them by the command's deadline.

    ``http`` is the client the requests go through (its base URL, headers and socket timeouts); a fresh
    one that follows no redirect by default. ``error`` makes the one-line error of a bound that was hit.
    """

    def __init__(self, error: ErrorType, *, limits: FetchLimits | None = None, http: httpx.Client | None = None) -> None:
        self.error = error
        self.limits = limits if limits is not None else FetchLimits.from_environment()
        self.http = http if http is not None else httpx.Client(timeout=httpx.Timeout(30.0, connect=10.0), follow_redirects=False)
        command_s = self.limits.command_s
        self.ends_at = None if command_s is None else time.monotonic() + command_s

    def fetch(self, method: str, url: str, *, max_bytes: int, timed: bool = True, **request: Any) -> Answer:
        """``method url`` read under every bound; ``request`` goes to ``httpx.Client.stream`` (params, content, headers...).

        ``timed=False`` is for an upload, whose body may take hours to send: the fetch runs here,
        bounded by the socket timeouts; its answer's body still by the cap and the minimum rate.
        """
        if not timed:
            return self._read(method, url, max_bytes, request, _Outcome())
        wait = self.limits.fetch_s
        whose = f"the fetch deadline ({wait:g} s, {FETCH_DEADLINE})"
        if self.ends_at is not None:
            left = self.ends_at - time.monotonic()
            if left < wait:
                wait, whose = max(0.0, left), f"the command's deadline ({self.limits.command_s:g} s, {COMMAND_DEADLINE})"
        if wait <= 0:
            raise self.error(f"{url}: not fetched: {whose} has passed")
        outcome = _Outcome()
        worker = threading.Thread(target=self._run, args=(outcome, method, url, max_bytes, request), name="grader-fetch", daemon=True)
        worker.start()
        worker.join(wait)
        if worker.is_alive():
            outcome.cancelled.set()  # it stops at its next chunk; it holds at most max_bytes until then
            raise self.error(f"{url}: no whole answer within {whose}")
        if outcome.failure is not None:
            raise outcome.failure
        assert outcome.answer is not None
        return outcome.answer

    def _run(self, outcome: _Outcome, method: str, url: str, max_bytes: int, request: dict[str, Any]) -> None:
        try:
            outcome.answer = self._read(method, url, max_bytes, request, outcome)
        except BaseException as failure:  # handed to the waiting thread, which raises it
            outcome.failure = failure

    def _read(self, method: str, url: str, max_bytes: int, request: dict[str, Any], outcome: _Outcome) -> Answer:
        # identity: a compressed body would make the cap one on compressed bytes (a 64 KB chunk can inflate to gigabytes)
        headers = {**dict(request.pop("headers", None) or {}), "Accept-Encoding": "identity"}
        with self.http.stream(method, url, headers=headers, **request) as response:
            shown = str(response.url)
            if response.headers.get("content-encoding", "identity").strip().lower() not in ("identity", ""):
                raise self.error(f"{shown}: a compressed answer, though none was asked for")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise self.error(f"{shown}: an answer of {int(declared)} bytes, more than the {max_bytes} this command reads")
            body = bytearray()
            started = time.monotonic()
            for chunk in response.iter_raw():
                if outcome.cancelled.is_set():
                    break  # the caller gave up on this fetch and has raised its deadline
                body += chunk
                if len(body) > max_bytes:
                    raise self.error(f"{shown}: an answer larger than the {max_bytes} bytes this command reads")
                elapsed = time.monotonic() - started
                if elapsed > self.limits.grace_s and len(body) < self.limits.min_rate * elapsed:
                    raise self.error(
                        f"{shown}: the answer arrives slower than {self.limits.min_rate:g} bytes/s ({len(body)} bytes in {elapsed:.0f} s; {FETCH_MIN_RATE})"
                    )
            return Answer(shown, response.status_code, response.headers, bytes(body))


def json_answer(answer: Answer, error: ErrorType) -> Any:
    """``answer``'s body as JSON, or ``error``'s one line saying it is not JSON (never a traceback)."""
    try:
        return jsonio.loads(answer.content)
    except jsonio.JsonError as failure:
        raise error(f"{answer.url}: the answer is not JSON: {failure.what}") from None
