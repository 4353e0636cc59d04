"""A worker's stoppable child runs the exact search even when its parent has run numba's parallel kernels itself.

Numba's OpenMP threading layer (GNU libgomp here) is not fork-safe: a forked child's first parallel kernel prints
"fork() called from a process already using GNU OpenMP" and sends itself SIGTERM, so a shard job forked from such
a process ended INFRA and was re-queued for ever (seen when a test process had searched before running the worker
code). Each case runs in a fresh process (tests/hosting/kernel_child.py): the pytest process's own state stays out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.hosting.support import REPO

#: The norms of tests/hosting/kernel_child.py's rows, by hand: |(3, 4)| = 5, |(0, 0)| = 0, |(6, 8)| = 10.
NORMS = [5.0, 0.0, 10.0]


def _child(mode: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.hosting.kernel_child", mode], cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "method"), [("kernel-first", "spawn"), ("child-only", "fork")])
def test_the_child_searches_whether_or_not_its_parent_ran_a_kernel(mode: str, method: str) -> None:
    said = _child(mode)
    assert said == {"start_method": method, "outcome": NORMS}, said
