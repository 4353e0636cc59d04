"""A shard job's output goes from its child to the server by file, streamed: the worker never holds it.

At CoIR's full scale a shard's run is hundreds of MB (31k queries at depth 1,000). Handed back through the child's
pipe, the worker held it twice (the pickle and its bytes) before the put, and a worker peaked at 1,032 MiB in
bench/coir_shape.py --scale 1 (target: under 1 GiB). Now the child writes it to the job's scratch folder and the
worker streams that file in 1 MiB pieces with its length stated (no chunked body: the server's cap reads the length).
A stub server on 127.0.0.1 receives the put; tracemalloc measures what this process allocated meanwhile.
"""

from __future__ import annotations

import hashlib
import json
import os
import tracemalloc
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from grader.hosting.protocol.shard_messages import ShardJobMessage
from grader.hosting.worker.loop import worker_client
from grader.hosting.worker.shard_loop import ShardApi
from tests.hosting.stub_http import answer, serving

OUTPUT_BYTES = 64 << 20


class _Receiver(BaseHTTPRequestHandler):
    """Reads a PUT's body 1 MiB at a time and answers its sha256, as the server does; notes the headers it came with."""

    server: _Stub

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_PUT(self) -> None:
        self.server.headers.append({name.lower(): value for name, value in self.headers.items()})
        left, digest = int(self.headers.get("Content-Length") or 0), hashlib.sha256()
        while left:
            piece = self.rfile.read(min(left, 1 << 20))
            if not piece:
                break
            digest.update(piece)
            left -= len(piece)
        answer(self, 200, json.dumps({"sha256": digest.hexdigest()}).encode())


class _Stub(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Receiver)
        self.headers: list[dict[str, str]] = []


@pytest.fixture
def stub() -> Iterator[_Stub]:
    with serving(_Stub()) as server:
        yield server


@pytest.mark.slow  # a stub server on a socket
def test_an_output_file_is_streamed_with_its_length_and_never_held_whole(stub: _Stub, tmp_path: Path) -> None:
    output = tmp_path / "output"
    with output.open("wb") as handle:  # 64 MiB of varied bytes, written in pieces (none of them held by the test)
        for piece in range(64):
            handle.write(hashlib.sha256(piece.to_bytes(4, "big")).digest() * (1 << 15))
    expected = hashlib.sha256(output.read_bytes()).hexdigest()
    api = ShardApi(worker_client(f"http://127.0.0.1:{stub.server_address[1]}", "token"))
    job = ShardJobMessage.model_construct(job_id=7, tries=1)
    tracemalloc.start()
    try:
        said = api.put_output(job, output, {"scheme": "x"})
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert said == expected  # the server's digest of what it received: the file, byte for byte
    sent = stub.headers[-1]
    assert sent["content-length"] == str(OUTPUT_BYTES) == str(os.path.getsize(output)) and "transfer-encoding" not in sent
    assert peak < 8 << 20, peak  # a few 1 MiB pieces at a time (the stub's included), never the 64 MiB output
