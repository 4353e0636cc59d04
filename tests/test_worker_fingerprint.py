"""A worker's fingerprint (what replicas are paired by) and how the server names it in a report."""

from __future__ import annotations

import pytest

from grader.errors import TaskFailure
from grader.grading.scoring import report_labels
from grader.hosting.worker.fingerprint import KERNEL_FLAGS, worker_fingerprint


def test_the_fingerprint_names_the_machine_its_kernel_flags_and_runtime() -> None:
    fingerprint = worker_fingerprint()
    assert set(fingerprint) == {"machine", "isa", "cpu_flags_sha256", "onnxruntime", "execution_provider"}
    assert set(fingerprint["isa"]) <= set(KERNEL_FLAGS) and len(fingerprint["cpu_flags_sha256"]) == 64
    assert fingerprint["execution_provider"] == "CPUExecutionProvider"
    assert report_labels({"labels": {"training": {"setting": "zero-shot"}}, "fingerprint": fingerprint}) == {
        "training": {"setting": "zero-shot"},
        "fingerprint": fingerprint,
    }


@pytest.mark.parametrize("bad", ["avx2", {"isa": "x" * 201}, {"isa": [{"nested": 1}]}, {f"k{i}": "v" for i in range(11)}])
def test_a_fingerprint_that_is_not_a_few_short_strings_is_refused(bad: object) -> None:
    with pytest.raises(TaskFailure, match="fingerprint"):
        report_labels({"labels": {}, "fingerprint": bad})
