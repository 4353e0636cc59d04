"""A sharded grade whose merge takes minutes: the coordinator neither fails on a slow status answer nor makes the server wait in one.

Found at CoIR's full scale (bench/coir_shape.py --scale 1): the server merged an attempt's 20 tasks inside the
coordinator's status request; the request timed out on the worker, which took the timeout for an unexpected fault,
and the whole attempt (68 shard jobs, 21 minutes) was re-run from scratch. Now the server merges in the background
(grader/hosting/services/shard_merges.py, one merge at a time) and answers "running" meanwhile, and the coordinator
asks again after an HTTP error instead of failing the attempt.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from grader.errors import TaskFailure
from grader.failures import FailureCode
from grader.hosting.protocol.messages import Job
from grader.hosting.protocol.shard_messages import ShardGradeStatus
from grader.hosting.protocol.version import HEADER, WORKER_PROTOCOL
from grader.hosting.services import shard_merges
from grader.hosting.worker.loop import worker_client
from grader.hosting.worker.shard_loop import ShardApi, coordinate
from tests.hosting.stub_http import serving

STATUS = "/api/v1/worker/jobs/s1/shards"


class _SlowFirst(BaseHTTPRequestHandler):
    """The status route of a server whose first answer comes after the client gave up; later ones at once (stale)."""

    server: _Stub

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.seen.append(self.path)
            first = len(self.server.seen) == 1
        if first:
            time.sleep(1.5)  # past the client's 0.3 s read timeout
        body = ShardGradeStatus(state="stale").model_dump_json().encode()
        self.send_response(200)
        for name, value in {HEADER: str(WORKER_PROTOCOL), "Content-Type": "application/json", "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:  # the client that gave up closed its end
            pass


class _Stub(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _SlowFirst)
        self.lock = threading.Lock()
        self.seen: list[str] = []


@pytest.fixture
def stub() -> Iterator[_Stub]:
    with serving(_Stub()) as server:
        yield server


@pytest.mark.slow  # a stub server on a socket
def test_a_status_answer_that_times_out_is_asked_again_not_the_attempts_failure(stub: _Stub) -> None:
    api = ShardApi(worker_client(f"http://127.0.0.1:{stub.server_address[1]}", "token"))
    api.http.timeout = httpx.Timeout(0.3)
    job = Job.model_construct(submission_id="s1", attempt=1)
    assert coordinate(api, job, Path("unused"), lambda: False, work=lambda *_: False) is None  # stale on the second answer, nothing raised
    assert stub.seen == [STATUS, STATUS]


def test_a_merge_answers_none_while_it_runs_then_its_result_once_and_runs_once() -> None:
    release, calls = threading.Event(), []

    daemon: list[bool] = []

    def merge() -> str:
        calls.append(1)
        daemon.append(threading.current_thread().daemon)  # a server stopped mid-merge does not wait for it at exit
        release.wait(30)
        return "merged"

    key = ("/state/a", "s1", 1)
    assert shard_merges.merged(key, merge, wait_s=0.05) is None  # started, still running: the request answers "running"
    assert shard_merges.merged(key, merge, wait_s=0.05) is None  # asked again: the same merge, not a second one
    release.set()
    assert shard_merges.merged(key, merge, wait_s=5) == "merged"
    assert calls == [1] and daemon == [True] and shard_merges.running() == 0  # read once, then forgotten


def test_merges_run_one_at_a_time_and_a_failed_one_raises_once() -> None:
    first_in, release, order = threading.Event(), threading.Event(), []

    def slow() -> str:
        first_in.set()
        release.wait(30)
        order.append("first")
        return "first"

    def refused() -> str:
        order.append("second")
        raise TaskFailure(FailureCode.INFRA, "a shard run refused by the merge")

    first, second = ("/state/a", "s2", 1), ("/state/b", "s2", 1)  # another competition's attempt of the same id
    assert shard_merges.merged(first, slow, wait_s=0.05) is None
    assert first_in.wait(5)
    assert shard_merges.merged(second, refused, wait_s=0.05) is None  # queued behind the first: one merge's memory at a time
    assert order == []
    release.set()
    assert shard_merges.merged(first, slow, wait_s=5) == "first"
    with pytest.raises(TaskFailure, match="refused by the merge"):
        shard_merges.merged(second, refused, wait_s=5)
    assert order == ["first", "second"] and shard_merges.running() == 0


def test_a_stale_attempts_merge_is_forgotten_once_it_ends() -> None:
    release = threading.Event()
    key = ("/state/a", "s3", 1)
    assert shard_merges.merged(key, lambda: release.wait(30), wait_s=0.05) is None
    shard_merges.forget(key)  # the attempt went stale: nobody will read the merge
    assert shard_merges.running() == 1
    release.set()
    deadline = time.monotonic() + 5
    while shard_merges.running() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert shard_merges.running() == 0
