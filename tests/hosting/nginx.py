"""A throw-away nginx on loopback, configured by docs/nginx.conf (the configuration docs/deploy.md prescribes)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.hosting.support import REPO, free_port

NGINX = os.environ.get("GRADER_NGINX", "/usr/sbin/nginx")
TEMPLATE = REPO / "docs" / "nginx.conf"


def require_nginx() -> str:
    """The nginx binary; skip without one (scripts/setup-nginx.sh installs it), fail instead under CI=true."""
    found = NGINX if os.path.isfile(NGINX) else shutil.which("nginx")
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("nginx missing (run scripts/setup-nginx.sh)")
        pytest.skip("nginx missing (scripts/setup-nginx.sh installs it)")
    return found


def render(values: dict[str, str]) -> str:
    """docs/nginx.conf with ``values`` put in, as ``envsubst`` with the variables named does."""
    text = TEMPLATE.read_text(encoding="utf-8")
    for name, value in values.items():
        text = text.replace("${" + name + "}", value)
    assert "${" not in text, "a variable of docs/nginx.conf was left unset"
    return text


class Nginx:
    """nginx in front of ``upstream`` on a free loopback port, prefix ``root``, timeouts as given."""

    def __init__(self, root: Path, upstream: str, *, header_timeout: str, body_timeout: str, max_body: str = "8m") -> None:
        self.binary = require_nginx()
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        root.mkdir(parents=True, exist_ok=True)  # the prefix, empty: what docs/nginx.conf's head says to create, and only that
        config = render(
            {
                "LISTEN": f"127.0.0.1:{self.port}",
                "LISTEN_OPTS": "",
                "TLS": "",
                "UPSTREAM": upstream,
                "MAX_BODY": max_body,
                "HEADER_TIMEOUT": header_timeout,
                "BODY_TIMEOUT": body_timeout,
            }
        )
        if os.geteuid() == 0:  # as root nginx's workers would run as nobody, who cannot enter a test's private folder
            config = "user root root;\n" + config
        self.config = root / "nginx.conf"
        self.config.write_text(config, encoding="utf-8")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Nginx:
        """Start nginx in the foreground (a child of the test) and wait until it proxies /healthz."""
        log = open(self.root / "stdout.log", "ab")  # noqa: SIM115 - the child's
        self.process = subprocess.Popen(
            [self.binary, "-p", str(self.root), "-c", str(self.config), "-e", str(self.root / "error.log"), "-g", "daemon off;"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"nginx exited: {(self.root / 'error.log').read_text(errors='replace')[-2000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError("nginx did not proxy /healthz within 30 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
