"""What participants following their grades with ``--wait`` cost the server: its CPU, side by side in one run.

A fresh ``grader serve --workers 0`` on mini (SQLite); ``--participants`` participants (20) each upload one
submission, which waits (no worker), as in a long queue. Then, for ``--seconds`` (60) each, the server's CPU time
(``/proc/PID/stat``: the server process's own; nothing is scored here) with nobody looking, with each participant following theirs as
``grader submit --wait`` did before (a look every 0.5 s) and as it does now (0.5 s, x1.5 while the state stays, 2 s
at most: ``grader/cli/submit_cmd.py``), each participant in a thread of this script through
:meth:`HostingClient.wait`. The script's own CPU is not counted.

    .venv/bin/python bench/wait_cost.py
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from grader.cli.submit_cmd import FIRST_LOOK_S, MAX_LOOK_S
from grader.hosting.errors import ClientError
from grader.hosting.participant.client import HostingClient
from tests.hosting.support import REPO, queue_only_server, queued_participants

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """CPU seconds of process ``pid`` (utime and stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:13]) / TICKS


def measured(pid: int, seconds: float, follow: list[tuple[HostingClient, str]], max_poll_s: float | None) -> tuple[float, int]:
    """The server's CPU milliseconds a second while every (client, id) in ``follow`` waits on its grade
    (``max_poll_s`` None: none waits), and how many looks they took."""
    looks = [0]
    lock = threading.Lock()

    def count(_view: dict) -> None:
        with lock:
            looks[0] += 1

    def follow_one(client: HostingClient, submission_id: str) -> None:
        try:
            client.wait(submission_id, poll_s=FIRST_LOOK_S, max_poll_s=max_poll_s, timeout_s=seconds, on_poll=count)
        except ClientError:  # still queued when the time is up: what is measured
            pass

    threads = [threading.Thread(target=follow_one, args=pair) for pair in follow] if max_poll_s is not None else []
    before = cpu_s(pid)
    started = time.monotonic()
    for thread in threads:
        thread.start()
    if threads:
        for thread in threads:
            thread.join()
    else:
        time.sleep(seconds)
    spent, span = cpu_s(pid) - before, time.monotonic() - started
    return 1000 * spent / span, looks[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--participants", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    server = queue_only_server(Path(tempfile.mkdtemp(prefix="bench-wait-")))
    assert server.process is not None
    try:
        follow = [(client, submission_id) for _token, client, submission_id in queued_participants(server, args.participants, EXAMPLE)]
        time.sleep(5)  # the start's and the uploads' work done
        print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.machine()}, nproc {os.cpu_count()}")
        print(f"# {args.participants} queued submissions, each followed by its participant; {args.seconds:.0f} s each")
        print("| followers look | server CPU (ms/s) | looks/s | server ms per look |")
        print("|---|---:|---:|---:|")
        idle, _ = measured(server.process.pid, args.seconds, follow, None)
        print(f"| nobody | {idle:.1f} | 0 | |")
        rows = {}
        for label, max_poll_s in (("every 0.5 s (before)", FIRST_LOOK_S), (f"0.5 s, x1.5, {MAX_LOOK_S:g} s at most (now)", MAX_LOOK_S)):
            cpu, looks = measured(server.process.pid, args.seconds, follow, max_poll_s)
            rows[label] = cpu
            rate = looks / args.seconds
            print(f"| {label} | {cpu:.1f} | {rate:.1f} | {(cpu - idle) / rate:.2f} |")
        before, now = rows.values()
        print(
            f"# the followers' share of the server's CPU: {before - idle:.1f} ms/s before, {now - idle:.1f} now ({(before - idle) / max(now - idle, 1e-9):.1f}x less)"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
