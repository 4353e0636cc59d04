"""/healthz and the board while participant pages watch their grades: a real `grader serve` of this tree.

A fresh `grader serve --workers 0` on mini (SQLite); ``--participants`` participants (25) each upload one
submission (it waits: no worker) and sign in on the page; each opens 4 watches (``GET /me/progress`` with
the tag it was last answered: the most one participant may have), 100 in all, more than the 40 threads of
the server's pool. Before and while they wait: 20 ``GET /healthz`` and 20 ``GET /`` timed one after the
other, and the server process's threads; then how the watches ended.

    .venv/bin/python bench/progress_watches.py
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.hosting.support import REPO, queue_only_server, queued_participants

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"


def threads(pid: int) -> int:
    """The threads of process ``pid`` now."""
    found = re.search(r"Threads:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
    return int(found.group(1)) if found else -1


def timed(url: str, n: int = 20) -> tuple[float, float]:
    """Median and largest latency of ``n`` GETs of ``url``, one after the other, in milliseconds."""
    spans = []
    for _ in range(n):
        started = time.perf_counter()
        assert httpx.get(url, timeout=60).status_code == 200
        spans.append(time.perf_counter() - started)
    return statistics.median(spans) * 1000, max(spans) * 1000


def line(count: int, health: float, health_max: float, board: float, board_max: float) -> str:
    """One measurement as printed."""
    return f"threads {count}; /healthz median {health:.1f} ms, max {health_max:.1f} ms; / median {board:.1f} ms, max {board_max:.1f} ms"


def signed_in(url: str, token: str) -> httpx.Client:
    """A web session of the participant holding ``token`` (the sign-in form, its CSRF token)."""
    client = httpx.Client(base_url=url, timeout=90)
    page = client.get("/signin").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    assert client.post("/signin", data={"csrf": csrf.group(1), "token": token}).status_code in (200, 303)
    return client


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--participants", type=int, default=25)
    args = parser.parse_args()
    server = queue_only_server(Path(tempfile.mkdtemp(prefix="bench-progress-")))
    assert server.process is not None
    try:
        sessions = [signed_in(server.url, token) for token, _client, _id in queued_participants(server, args.participants, EXAMPLE)]
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; {args.participants} participants, {4 * args.participants} watches")
        idle = (threads(server.process.pid), *timed(f"{server.url}/healthz"), *timed(f"{server.url}/"))
        print(f"no watch:    {line(*idle)}")
        ended: list[int] = []

        def watch(client: httpx.Client) -> None:
            tag = client.get("/me/progress").json()["tag"]  # answered at once: no tag seen
            ended.append(client.get("/me/progress", params={"seen": tag}).status_code)  # waits: nothing changes

        watches = [threading.Thread(target=watch, args=(client,)) for client in sessions for _ in range(4)]
        for thread in watches:
            thread.start()
        time.sleep(8)
        waiting = len(watches) - len(ended)
        busy = (threads(server.process.pid), *timed(f"{server.url}/healthz"), *timed(f"{server.url}/"))
        print(f"{waiting} waiting: {line(*busy)}")
        for thread in watches:
            thread.join(120)
        print("the watches ended:", dict(Counter(ended)), "(200: answered after 25 s unchanged)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
