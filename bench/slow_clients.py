"""/healthz latency while 3,000 slow connections are held: `grader serve` alone vs behind nginx.

Starts `grader serve --workers 0` on mini from a source tree (``--tree``; this one by default) under a
descriptor limit of 1,024 (a common default), opens 3,000 connections that each send half a request
head and wait, then times 5 ``GET /healthz`` (2 s timeout each). ``--nginx`` puts nginx, configured by
docs/nginx.conf (head/body timeouts 10 s as in production), in front and sends everything through it.
It also prints how many bytes the server's log grew meanwhile.

    .venv/bin/python bench/slow_clients.py --tree /tmp/old      # before: a `git worktree` of 568d208
    .venv/bin/python bench/slow_clients.py --nginx              # after
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.hosting.nginx import Nginx

COMPETITION = """name = "bench-slow"
benchmark = "mini"
split = "test"
sample_split = "dev"
start = 2020-01-01T00:00:00Z
end = 2099-01-01T00:00:00Z
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--nginx", action="store_true", help="put nginx (docs/nginx.conf) in front")
    parser.add_argument("--connections", type=int, default=3000)
    parser.add_argument("--port", type=int, default=18751)
    options = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "c.toml").write_text(COMPETITION)
        args = ["serve", "--competition", str(root / "c.toml"), "--state", str(root / "state"), "--port", str(options.port), "--workers", "0"]
        env = {**os.environ, "PYTHONPATH": str(options.tree.resolve())}
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
        with open(root / "serve.log", "wb") as log:
            server = subprocess.Popen(
                [sys.executable, "-c", "from grader.cli.main import main; main()", *args], env=env, cwd=options.tree, stdout=log, stderr=log
            )
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, options.connections + 1000), max(hard, options.connections + 1000)))
        proxy = None
        try:
            url = f"http://127.0.0.1:{options.port}"
            for _ in range(600):
                try:
                    if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            target_port = options.port
            if options.nginx:
                proxy = Nginx(root / "nginx", f"127.0.0.1:{options.port}", header_timeout="10s", body_timeout="10s").start()
                url, target_port = proxy.url, proxy.port
            logged = (root / "serve.log").stat().st_size
            held = []
            for _ in range(options.connections):
                sock = socket.socket()
                sock.setblocking(False)
                try:
                    sock.connect(("127.0.0.1", target_port))
                except BlockingIOError:
                    pass
                held.append(sock)
            time.sleep(2)
            for sock in held:
                try:
                    sock.send(b"GET / HTTP/1.1\r\nHost: x\r\n")
                except OSError:
                    pass
            latencies = []
            for _ in range(5):
                started = time.monotonic()
                try:
                    status = httpx.get(f"{url}/healthz", timeout=2).status_code
                    latencies.append((time.monotonic() - started, str(status)))
                except httpx.HTTPError as error:
                    latencies.append((time.monotonic() - started, type(error).__name__))
            grown = (root / "serve.log").stat().st_size - logged
            for sock in held:
                sock.close()
            label = "behind nginx" if options.nginx else "alone"
            print(f"grader serve {label} (tree {options.tree}), {options.connections} slow connections held, server descriptor limit 1024")
            print("  /healthz: " + ", ".join(f"{seconds * 1000:.0f} ms {outcome}" for seconds, outcome in latencies))
            print(f"  median {statistics.median(s for s, _ in latencies) * 1000:.0f} ms; serve.log grew {grown} bytes meanwhile")
        finally:
            if proxy is not None:
                proxy.stop()
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    main()
