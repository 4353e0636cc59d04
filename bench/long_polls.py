"""/healthz and board latency while claim long-polls wait: `grader serve` of this tree against another (``--tree``).

For each scenario a fresh `grader serve --workers 0` on mini (SQLite) from the source tree; N claims
(``wait_s`` 30, the most a claim may ask) are sent whole over sockets of their own, from one worker token
(the issue's attack) or spread over N/4 workers (4 each, what a server now admits per worker); 2 s later,
5 ``GET /healthz`` and 3 ``GET /api/v1/leaderboard`` are timed one after the other (60 s timeout each), and
the claims are counted: still waiting, or answered (and how).

    .venv/bin/python bench/long_polls.py --tree /tmp/longpoll-old    # before: `git archive 8269d04 | tar -x -C /tmp/longpoll-old`
    .venv/bin/python bench/long_polls.py                             # after: this tree
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from grader import jsonio
from grader.hosting.db.session import open_database
from grader.hosting.identity.participants import rekey_local_worker
from grader.hosting.protocol.version import HEADER, WORKER_PROTOCOL

COMPETITION = """name = "bench-long-polls"
benchmark = "mini"
split = "test"
sample_split = "dev"
start = 2020-01-01T00:00:00Z
end = 2099-01-01T00:00:00Z
"""
WAIT_S = 30


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def claim(port: int, token: str) -> socket.socket:
    raw = jsonio.dumps({"wait_s": WAIT_S}).encode()
    head = (
        f"POST /api/v1/worker/claim HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {token}\r\n{HEADER}: {WORKER_PROTOCOL}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n"
    )
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(head.encode() + raw)
    return sock


def status_of(sock: socket.socket) -> str:
    """The status of the answer on ``sock`` so far, or "waiting"."""
    sock.setblocking(False)
    try:
        got = sock.recv(65536)
    except BlockingIOError:
        return "waiting"
    return got.split(b" ", 2)[1].decode() if got else "closed"


def cpu_s(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(url: str, rounds: int) -> list[str]:
    out = []
    for _ in range(rounds):
        started = time.monotonic()
        try:
            outcome = str(httpx.get(url, timeout=60).status_code)
        except httpx.HTTPError as error:
            outcome = type(error).__name__
        out.append(f"{(time.monotonic() - started) * 1000:.0f} ms {outcome}")
    return out


def scenario(tree: Path, polls: int, workers: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "c.toml").write_text(COMPETITION)
        port = free_port()
        args = ["serve", "--competition", str(root / "c.toml"), "--state", str(root / "state"), "--port", str(port), "--workers", "0"]
        with open(root / "serve.log", "wb") as log:
            server = subprocess.Popen(
                [sys.executable, "-c", "from grader.cli.main import main; main()", *args],
                env={**os.environ, "PYTHONPATH": str(tree.resolve())},
                cwd=tree,
                stdout=log,
                stderr=log,
            )
        held: list[socket.socket] = []
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(600):
                try:
                    if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            db = open_database(root / "state")
            with db.session() as session:
                tokens = [rekey_local_worker(session, f"bench-{n}") for n in range(workers)]
            db.dispose()
            timed(f"{url}/api/v1/leaderboard", 1)  # the board's first call (imports, caches) before the clock
            held = [claim(port, tokens[n % workers]) for n in range(polls)]
            time.sleep(2)
            cpu, started = cpu_s(server.pid), time.monotonic()
            healthz = timed(f"{url}/healthz", 5)
            board = timed(f"{url}/api/v1/leaderboard", 3)
            counts = Counter(status_of(sock) for sock in held)
            time.sleep(max(0.0, 5 - (time.monotonic() - started)))  # at least 5 s of waiting claims, for the CPU figure
            busy = (cpu_s(server.pid) - cpu) / (time.monotonic() - started)
            longest = max(float(entry.split()[0]) for entry in healthz)
            return "\n".join(
                (
                    f"{polls} long-polls from {workers} worker(s) (tree {tree}):",
                    "  /healthz: " + ", ".join(healthz) + f"  (the longest {longest:.0f} ms)",
                    "  /api/v1/leaderboard: " + ", ".join(board),
                    "  the long-polls meanwhile: " + ", ".join(f"{n} {what}" for what, n in sorted(counts.items())),
                    f"  the server's CPU meanwhile: {busy:.2f} s a second",
                )
            )
        finally:
            for sock in held:
                sock.close()
            server.terminate()
            server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--polls", type=int, nargs="+", default=[45, 100])
    options = parser.parse_args()
    print(f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}, load {os.getloadavg()[0]:.2f}")
    for polls in options.polls:
        for workers in (1, -(-polls // 4)):  # one token (the attack), or 4 claims a worker: what a server admits
            print(scenario(options.tree, polls, workers), flush=True)
    print(f"load at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
