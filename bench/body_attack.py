"""Server memory under the body attack: 300 MB bodies posted to `grader serve`.

Starts `grader serve` from a source tree (this one by default; ``--tree`` another, e.g. a
`git worktree` of an older commit), then sends, each up to 300 MB or until the server answers:

* two JSON bodies with ``Content-Length`` and no token to a worker's result route (the attack as first reported);
* the same, chunked (no ``Content-Length``);
* a chunked body with a valid worker token to the result route;
* a 200 MB sign-in form, chunked.

and prints the server's VmRSS before, its peak (VmHWM) and VmRSS after, in MB.

    .venv/bin/python bench/body_attack.py
    git worktree add /tmp/old 568d208 && .venv/bin/python bench/body_attack.py --tree /tmp/old
"""

from __future__ import annotations

import argparse
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

MB = 1 << 20
CHUNK = MB
COMPETITION = """name = "bench-body"
benchmark = "mini"
split = "test"
sample_split = "dev"
start = 2020-01-01T00:00:00Z
end = 2099-01-01T00:00:00Z
"""


def status_of(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid`` in bytes."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(rest.split()[0]) * 1024
    return values


def send(port: int, path: str, size: int, *, token: str | None, chunked: bool, form: bool = False) -> str:
    """Send ``size`` bytes of body, or fewer if the server answers or closes first; what it answered."""
    kind = "application/x-www-form-urlencoded" if form else "application/json"
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {kind}\r\n"
    head += "Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {size}\r\n"
    if token:
        head += f"Authorization: Bearer {token}\r\n"
    if path.startswith("/api/v1/worker/"):
        # A worker of this protocol (since 0.3.0 one of another is refused from its head, 426; older trees ignore it).
        head += "Grader-Worker-Protocol: 1\r\n"
    piece = (f"{CHUNK:x}\r\n".encode() + b"x" * CHUNK + b"\r\n") if chunked else b"x" * CHUNK
    sent = 0
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(head.encode() + b"\r\n")
        sock.setblocking(False)
        answer = b""
        pending = memoryview(piece)
        while True:
            readable, writable, _ = select.select([sock], [sock] if sent < size else [], [], 300)
            if not readable and not writable:
                return f"stalled after {sent // MB} MB"
            try:
                if readable:
                    data = sock.recv(65536)
                    answer += data
                    if b"\r\n" in answer or not data:
                        break
                    continue
                count = sock.send(pending)
            except (ConnectionResetError, BrokenPipeError):
                return f"reset after {sent // MB} MB"
            sent += count
            pending = pending[count:] or memoryview(piece)
            if sent >= size and chunked:
                sock.setblocking(True)
                sock.sendall(b"0\r\n\r\n")
                sock.setblocking(False)
    status = answer.split(b"\r\n", 1)[0].decode("latin-1") if answer else "closed"
    return f"{status} after {sent // MB} MB sent"


def grader(tree: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [sys.executable, "-c", "from grader.cli.main import main; main()", *args], env=env, cwd=tree, capture_output=True, text=True, check=True
    ).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1], help="source tree whose `grader serve` to attack")
    parser.add_argument("--port", type=int, default=18731)
    options = parser.parse_args()
    tree = options.tree.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "c.toml").write_text(COMPETITION)
        state = root / "state"
        env = {**os.environ, "PYTHONPATH": str(tree)}
        args = ["serve", "--competition", str(root / "c.toml"), "--state", str(state), "--port", str(options.port), "--workers", "0"]
        with open(root / "serve.log", "wb") as log:
            server = subprocess.Popen(
                [sys.executable, "-c", "from grader.cli.main import main; main()", *args], env=env, cwd=tree, stdout=log, stderr=log
            )
        try:
            for _ in range(600):
                try:
                    if httpx.get(f"http://127.0.0.1:{options.port}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            worker = grader(tree, "admin", "--state", str(state), "add-worker", "bench-worker")
            before = status_of(server.pid)
            print(
                f"tree {tree} ({subprocess.run(['git', '-C', str(tree), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()})"
            )
            print(f"server VmRSS before: {before['VmRSS'] / MB:.0f} MB")
            result = "/api/v1/worker/jobs/x/result"
            attacks = [
                ("anonymous, Content-Length, result #1", result, 300 * MB, None, False, False),
                ("anonymous, Content-Length, result #2", result, 300 * MB, None, False, False),
                ("anonymous, chunked, result", result, 300 * MB, None, True, False),
                ("worker token, chunked, result", result, 300 * MB, worker, True, False),
                ("anonymous, chunked, /signin form", "/signin", 200 * MB, None, True, True),
            ]
            for name, path, size, token, chunked, form in attacks:
                started = time.monotonic()
                outcome = send(options.port, path, size, token=token, chunked=chunked, form=form)
                now = status_of(server.pid)
                print(
                    f"  {name:40s} {outcome:40s} {time.monotonic() - started:5.1f} s  VmRSS {now['VmRSS'] / MB:5.0f} MB  peak {now['VmHWM'] / MB:5.0f} MB"
                )
            time.sleep(2)
            after = status_of(server.pid)
            print(
                f"server VmRSS after: {after['VmRSS'] / MB:.0f} MB; peak {after['VmHWM'] / MB:.0f} MB; grown {(after['VmRSS'] - before['VmRSS']) / MB:.0f} MB"
            )
        finally:
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    main()
