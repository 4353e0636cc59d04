"""A process that runs the exact search's parallel kernel, then a grade's child (:func:`grader.hosting.worker.child.run_in_child`)
that runs it again; run by tests/hosting/test_child_after_kernels.py as ``python -m tests.hosting.kernel_child MODE``
(``kernel-first``: the parent runs the kernel before starting its child; ``child-only``: it does not). Prints one JSON
line: how the child was started and what it returned (or how it ended without a result).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from functools import partial

import numpy as np

from grader.hosting.worker.child import run_in_child, start_method
from grader.retrieval import exact

ROWS = np.asarray([[3.0, 4.0], [0.0, 0.0], [6.0, 8.0]], dtype=np.float32)


def norms() -> list[float]:
    """The rows' norms by the parallel kernel (numba's threading layer started in whichever process calls it)."""
    return [float(value) for value in exact.scan_rows(ROWS, float(np.finfo(np.float32).tiny))[0]]


def main(mode: str) -> None:
    if mode == "kernel-first":
        norms()
    scratch = tempfile.mkdtemp(prefix="grader-kernel-child-")
    method = start_method()
    outcome = run_in_child(
        norms,
        abandon=lambda: False,
        ended=lambda status: f"ended without a result (exit status {status})",
        on_orphan=partial(shutil.rmtree, scratch, True),
        name="kernel-child",
    )
    shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps({"start_method": method, "outcome": outcome}))


if __name__ == "__main__":
    main(sys.argv[1])
