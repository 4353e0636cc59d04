"""A job's search runs on the CPUs its worker may use now (grader/retrieval/threads.py): a worker pinned to one CPU
after it loaded faiss and numba (``taskset -p``, a cgroup's cpuset changed live) ran each job's search with the
machine's thread count on that one CPU, twice as slow. Run in a fresh interpreter, as a worker is."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROGRAM = r"""
import os
import faiss, numba
import numpy as np
from grader.hosting.worker.child import run_in_child
from grader.hosting.worker.loop import preload_search

preload_search()  # what a worker loads before it forks job children
print("loaded", faiss.omp_get_max_threads(), numba.config.NUMBA_NUM_THREADS)
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # pinned after loading, as `taskset -p` pins


def job():
    from grader.retrieval.search import exact_top_k
    rng = np.random.default_rng(7)
    queries = rng.standard_normal((20, 24)).astype(np.float32)
    documents = rng.standard_normal((300, 24)).astype(np.float32)
    docs = exact_top_k(queries, documents, 10)[1]
    exact = queries.astype(np.float64) @ documents.astype(np.float64).T
    same = bool((docs == np.argsort(-exact, axis=1, kind="stable")[:, :10]).all())
    return faiss.omp_get_max_threads(), numba.get_num_threads(), same


print("job", *run_in_child(job, abandon=lambda: False, ended=lambda status: ("died", status, None), on_orphan=lambda: None, name="job"))
"""


@pytest.mark.slow
def test_a_job_forked_by_a_worker_pinned_after_it_started_searches_with_one_thread_per_cpu_it_may_use() -> None:
    assert len(os.sched_getaffinity(0)) >= 2, "this test needs a machine of two CPUs or more (CI has two)"
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded, job = done.stdout.splitlines()
    cpus = len(os.sched_getaffinity(0))
    assert loaded == f"loaded {cpus} {cpus}"  # loaded with the machine's CPUs in view: pools of its size
    assert job == "job 1 1 True"  # the job on its one CPU: one thread each, the same ranking
