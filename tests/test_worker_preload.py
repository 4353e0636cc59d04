"""A worker loads numba's CPU target once before it forks job children (grader.hosting.worker.loop.preload_search).

It must start no thread (numba's pool started before a fork makes the fork unsafe), it must load what the children
loaded each time (the target's registries, with the modules they import), and a child forked after it must search
exactly as ever. Run in a fresh interpreter: pytest's own process may have loaded numba's kernels already.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

PROGRAM = r"""
import os, sys, threading
import numpy as np
from grader.hosting.worker.loop import preload_search

loaded_before = "numba.np.arraymath" in sys.modules
preload_search()
import numba.np.ufunc.parallel as parallel
print("pool", parallel._is_initialized, "threads", threading.active_count(), "loaded", loaded_before, "numba.np.arraymath" in sys.modules)
rng = np.random.default_rng(7)
queries = rng.standard_normal((20, 24)).astype(np.float32)
documents = rng.standard_normal((300, 24)).astype(np.float32)
read, write = os.pipe()
child = os.fork()
if child == 0:
    from grader.retrieval.search import exact_top_k
    scores, docs = exact_top_k(queries, documents, 10)
    os.write(write, docs.astype(np.int64).tobytes())
    os._exit(0)
os.close(write)
_, status = os.waitpid(child, 0)
got = np.frombuffer(os.read(read, 1 << 20), dtype=np.int64).reshape(20, 10)
exact = queries.astype(np.float64) @ documents.astype(np.float64).T
print("status", status, "same", bool((got == np.argsort(-exact, axis=1, kind="stable")[:, :10]).all()))
"""


@pytest.mark.slow
def test_preloading_starts_no_thread_loads_the_target_and_a_forked_child_searches_exactly() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "pool False threads 1 loaded False True", lines
    assert lines[1] == "status 0 same True", lines
