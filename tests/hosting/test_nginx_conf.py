"""docs/nginx.conf, rendered as its head says, starts in a fresh prefix holding nothing: nginx creates its temporary
folders there itself (a rendered file once failed until a ``tmp/`` folder was made by hand under the prefix)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.hosting.nginx import TEMPLATE, render, require_nginx


@pytest.mark.slow
def test_the_rendered_file_passes_nginx_t_in_an_empty_prefix(tmp_path: Path) -> None:
    nginx = require_nginx()
    values = {"LISTEN": "127.0.0.1:9", "LISTEN_OPTS": "", "TLS": "", "UPSTREAM": "127.0.0.1:8000"}
    values |= {"MAX_BODY": "600m", "HEADER_TIMEOUT": "10s", "BODY_TIMEOUT": "10s"}
    config = tmp_path / "nginx.conf"
    config.write_text(render(values), encoding="utf-8")
    prefix = tmp_path / "prefix"
    prefix.mkdir()  # the one folder the file's head says to create
    checked = subprocess.run(
        [nginx, "-t", "-p", str(prefix), "-c", str(config), "-e", str(tmp_path / "error.log")], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stderr
    assert "test is successful" in checked.stderr
    assert {"body_temp", "proxy_temp"} <= {path.name for path in prefix.iterdir()}
    assert "mkdir -p /var/lib/grader-nginx && nginx -p /var/lib/grader-nginx" in TEMPLATE.read_text(encoding="utf-8")
