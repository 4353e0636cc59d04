"""A worker whose claim is answered 429 waits what ``Retry-After`` says (bounded), then claims again and keeps serving
(grader/hosting/worker/claim_throttle.py): it does not take the answer for an unreachable server and come back in 0.2 s.

The server answers 429 when a worker has too many claims in progress (tests/hosting/test_attacks_long_polls.py). Here
a stub worker API on 127.0.0.1 scripts the answers and notes when each claim arrives; its last answer names another
worker protocol, which is what stops a worker, so `run_worker` returns to the test.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from grader.hosting.errors import WorkerProtocolMismatch
from grader.hosting.protocol.messages import FINGERPRINT_PATH, Job
from grader.hosting.protocol.version import HEADER, WORKER_PROTOCOL
from grader.hosting.worker.claim_throttle import DEFAULT_WAIT_S, MAX_WAIT_S, MIN_WAIT_S, retry_after_s
from grader.hosting.worker.loop import run_worker, worker_client
from grader.hosting.worker.shard_loop import ShardApi, coordinate

CLAIM = "/api/v1/worker/claim"
SHARD_CLAIM = "/api/v1/worker/shards/claim"
STOP = (204, {HEADER: "999"})  # a server of another worker protocol: the worker stops with a line


@dataclass
class _Script:
    """Per path, the answers to give in order (status, headers); after them, 204. Each request's path and arrival time."""

    answers: dict[str, list[tuple[int, dict[str, str]]]]
    seen: list[tuple[str, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, path: str) -> tuple[int, dict[str, str]]:
        with self.lock:
            self.seen.append((path, time.monotonic()))
            queued = self.answers.get(path) or []
            return queued.pop(0) if queued else (204, {})

    def times(self, path: str) -> list[float]:
        return [at for seen, at in self.seen if seen == path]


class _Handler(BaseHTTPRequestHandler):
    server: _Stub

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        # The worker asks what to sign its fingerprint over before it states it (worker protocol 2): not scripted.
        if self.path != FINGERPRINT_PATH:
            self._send(404, {})
            return
        self._send(200, {"Content-Type": "application/json"}, b'{"worker": "w", "competition": "c", "fingerprint": null}')

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == FINGERPRINT_PATH:  # its statement binds: not scripted
            self._send(200, {"Content-Type": "application/json"}, b"{}")
            return
        status, headers = self.server.script.answer(self.path)
        self._send(status, headers)

    def _send(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
        self.send_response(status)
        for name, value in {HEADER: str(WORKER_PROTOCOL), "Content-Length": str(len(body)), **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class _Stub(ThreadingHTTPServer):
    def __init__(self, script: _Script) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script = script


@pytest.fixture
def serve() -> Iterator[Any]:
    """Start a stub worker API for a script; its URL."""
    started: list[_Stub] = []

    def start(script: _Script) -> str:
        stub = _Stub(script)
        threading.Thread(target=stub.serve_forever, daemon=True).start()
        started.append(stub)
        return f"http://127.0.0.1:{stub.server_address[1]}"

    yield start
    for stub in started:
        stub.shutdown()
        stub.server_close()


def _run_until_stopped(url: str) -> None:
    """`grader worker`'s loop against ``url`` until the stub stops it (its SIGTERM handler put back afterwards)."""
    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(WorkerProtocolMismatch):
            run_worker(url, "token")
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.slow  # a stub server on a socket
def test_a_claim_answered_429_is_made_again_after_retry_after_not_at_once(serve: Any, caplog: pytest.LogCaptureFixture) -> None:
    script = _Script({CLAIM: [(429, {"Retry-After": "2"}), STOP]})
    _run_until_stopped(serve(script))
    refused, again = script.times(CLAIM)
    assert 1.9 <= again - refused < DEFAULT_WAIT_S, again - refused  # what the server said: not 0.2 s, not the default
    assert [path for path, _ in script.seen] == [SHARD_CLAIM, CLAIM, SHARD_CLAIM, CLAIM]  # then it served on
    said = [record.getMessage() for record in caplog.records if "429" in record.getMessage()]
    assert said == ["the server refused a claim for now (429, too many claims of this worker in progress): claiming again in 2 s"]


@pytest.mark.slow  # a stub server on a socket
def test_a_shard_claim_answered_429_waits_before_claiming_anything(serve: Any) -> None:
    script = _Script({SHARD_CLAIM: [(429, {"Retry-After": "1"})], CLAIM: [STOP]})
    _run_until_stopped(serve(script))
    assert [path for path, _ in script.seen] == [SHARD_CLAIM, SHARD_CLAIM, CLAIM]  # no submission claim during the pause
    refused, again = script.times(SHARD_CLAIM)
    assert 0.95 <= again - refused < DEFAULT_WAIT_S, again - refused


@pytest.mark.slow  # a stub server on a socket
def test_a_coordinator_whose_shard_claim_is_throttled_waits_and_coordinates_on(serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sharded grade's coordinator claims shard jobs too: a 429 there is a pause, never the grade's INFRA."""
    script = _Script({SHARD_CLAIM: [(429, {"Retry-After": "1"})]})
    api = ShardApi(worker_client(serve(script), "token"))
    looks: list[float] = []

    def status(submission_id: str, attempt: int) -> Any:  # the attempt's progress: running, then stale after the pause
        looks.append(time.monotonic())
        return type("Status", (), {"state": "running" if len(looks) == 1 else "stale", "progress": []})()

    monkeypatch.setattr(api, "status", status)
    job = Job.model_construct(submission_id="s1", attempt=1)
    assert coordinate(api, job, Path("unused"), lambda: False) is None  # stale: nothing to post, and nothing raised
    assert [path for path, _ in script.seen] == [SHARD_CLAIM]
    assert 0.95 <= looks[1] - looks[0] < DEFAULT_WAIT_S, looks


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("3", 3.0),
        (" 7 ", 7.0),
        ("0", MIN_WAIT_S),  # asked to come back at once, again and again: at least a second apart
        ("3600", MAX_WAIT_S),  # an hour: capped
        ("9" * 5000, MAX_WAIT_S),  # a header of digits past int()'s limit: capped, not a crash
        ("00000012", 12.0),
        (None, DEFAULT_WAIT_S),
        ("", DEFAULT_WAIT_S),
        ("soon", DEFAULT_WAIT_S),
        ("-5", DEFAULT_WAIT_S),
        ("1.5", DEFAULT_WAIT_S),
        ("Wed, 21 Oct 2015 07:28:00 GMT", DEFAULT_WAIT_S),  # the date form: the server never sends it
        ("٣", DEFAULT_WAIT_S),  # a digit, but not an ASCII one
    ],
)
def test_retry_after_is_read_within_bounds(header: str | None, seconds: float) -> None:
    assert retry_after_s(header) == seconds
