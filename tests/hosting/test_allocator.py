"""A long-running server gives memory back (grader/hosting/allocator.py, docs/scale.md "A long-running server").

With glibc's defaults, a process that checks and merges shard runs in threads keeps the large buffers of every
round in its heaps; with the server's setting (and its trim after a merge) what it holds after five rounds stays
within one round's bytes. Both are measured in one run, in fresh processes, as bytes held after the work (not as
time, nor as a bound that depends on the machine). ``grader serve`` applies the setting when it starts.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import platform
import subprocess
import sys
import threading
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from grader.hosting.allocator import DEFAULT, release_job_memory, return_large_buffers
from grader.hosting.environment import ALLOCATOR, GLIBC_MMAP_THRESHOLD
from grader.hosting.protocol.shard_messages import ShardJobMessage
from grader.hosting.worker.shard_loop import ShardApi
from tests.hosting.support import REPO, Server, wait_for, write_competition

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc's (elsewhere it is a no-op)")


def _held(mode: str) -> tuple[int, int, str]:
    """What a fresh process in ``mode`` (tests/hosting/merge_memory_child.py) holds after its rounds beyond what it held
    before them, one round's bytes of shard runs, and its figures (for the message), all in bytes."""
    # glibc's defaults, whatever this machine sets: its MALLOC_*_ variables and tunables would change both processes.
    env = {name: value for name, value in os.environ.items() if not name.startswith("MALLOC_") and name != "GLIBC_TUNABLES"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.hosting.merge_memory_child", mode], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout)
    return int(figures["after"][-1]) - int(figures["before"]), int(figures["round_bytes"]), done.stdout.strip()


@pytest.mark.slow
@glibc_only
def test_merging_shard_runs_round_after_round_keeps_no_more_than_a_round_with_the_setting_and_grows_without_it() -> None:
    held, bound, figures = _held("returning")
    assert held < bound, f"with the setting, {held >> 20} MiB held after the rounds (one round's runs: {bound >> 20} MiB): {figures}"
    # The same work without it keeps more than that bound: what the test would catch if the setting were lost.
    kept, _, figures = _held("default")
    assert kept > bound, f"glibc's defaults kept {kept >> 20} MiB only: the check no longer tells them apart: {figures}"


def test_an_operators_choice_is_left_alone() -> None:
    """``GRADER_ALLOCATOR=default`` and glibc's own ``MALLOC_MMAP_THRESHOLD_`` each leave the allocator as it is (no call made)."""
    assert return_large_buffers(DEFAULT, None) == "allocator: the C library's own settings (GRADER_ALLOCATOR=default)"
    assert return_large_buffers(DEFAULT, "65536").endswith("(GRADER_ALLOCATOR=default)")
    assert return_large_buffers(None, "2097152") == "allocator: MALLOC_MMAP_THRESHOLD_=2097152 from the environment"


@pytest.mark.slow
@glibc_only
def test_grader_serve_sets_the_allocator_when_it_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in (ALLOCATOR, GLIBC_MMAP_THRESHOLD):  # the machine's own choice would be kept (the test above)
        monkeypatch.delenv(variable, raising=False)
    server = Server(write_competition(tmp_path / "c.toml"), tmp_path / "state", workers=0).start()
    try:
        log = server.log.read_text(encoding="utf-8", errors="replace")
    finally:
        server.stop()
    # Logged only once glibc's mallopt accepted the threshold (it answers 1).
    assert "allocator: blocks of 1 MiB or more go back to the system when freed (glibc M_MMAP_THRESHOLD)" in log, log[-3000:]


@pytest.mark.slow
@glibc_only
def test_a_local_worker_sets_the_allocator_when_it_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker holds each job's bytes for a moment (a shard's run put, a grade's runs posted, an upload fetched): with
    glibc's defaults they stayed in its heaps job after job (docs/scale.md); `grader worker` applies the server's
    setting at its start, and trims after each job (grader/hosting/worker/loop.py ``settle_allocator``)."""
    for variable in (ALLOCATOR, GLIBC_MMAP_THRESHOLD):
        monkeypatch.delenv(variable, raising=False)
    server = Server(write_competition(tmp_path / "c.toml"), tmp_path / "state", workers=1).start()
    worker_log = server.state / "run" / "local-1.log"
    line = "allocator: blocks of 1 MiB or more go back to the system when freed (glibc M_MMAP_THRESHOLD)"
    try:
        wait_for(lambda: worker_log.exists() and line in worker_log.read_text(encoding="utf-8", errors="replace"), what="the worker's allocator line")
    finally:
        server.stop()


class _Store(BaseHTTPRequestHandler):
    """Takes a shard's output as a server does (the whole body, read in chunks and hashed) and answers its sha256."""

    def do_PUT(self) -> None:
        digest, left = hashlib.sha256(), int(self.headers["Content-Length"])
        while left:
            chunk = self.rfile.read(min(left, 1 << 16))
            digest.update(chunk)
            left -= len(chunk)
        answer = json.dumps({"sha256": digest.hexdigest()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


def _put_output(api: ShardApi, size: int) -> str:
    """Put ``size`` bytes as a shard job's output; nothing of it stays referenced here once this returns."""
    job = ShardJobMessage(
        job_id=1, tries=1, submission_id="s", attempt=1, task="t", number=0, lease_s=60, heartbeat_s=10, upload_sha256="0" * 64,
        benchmark="b", split="test", judged=[], ranking_digest="", shard_documents=8192, search_memory=1 << 30, depth=10,
        queries_sha256=None, max_query_bytes=1 << 20, limits={},
    )  # fmt: skip
    sha = api.put_output(job, os.urandom(size))
    assert sha is not None
    return sha


@pytest.mark.slow
def test_a_worker_keeps_no_output_it_put_once_the_job_is_released() -> None:
    """The bytes a worker puts stay referenced by httpx's response (a reference cycle) until a full collection, which a
    long-lived worker reached only after many jobs; :func:`release_job_memory` after each job frees them."""
    size = 8 << 20
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Store)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    gc.disable()  # no collection but the one under test: the held bytes are then exactly what the cycle keeps
    tracemalloc.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}") as http:
            before = tracemalloc.get_traced_memory()[0]
            _put_output(ShardApi(http), size)
            held = tracemalloc.get_traced_memory()[0] - before
            release_job_memory()
            kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        gc.enable()
        server.shutdown()
        server.server_close()
    # Without a collection the output is still held: what made a worker grow (and what this test would miss if httpx changed).
    assert held >= size, f"only {held} bytes held after putting {size}: the put no longer leaves a cycle to collect"
    assert kept < size // 8, f"{kept} bytes still held after the job's release (the output was {size})"
