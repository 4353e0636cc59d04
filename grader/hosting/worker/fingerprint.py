"""What a worker's machine is, as far as it can change an ONNX model's vectors: replicas are paired only between equal ones.

Grades are bit-identical on one machine and across threads and file orders, but
onnxruntime picks kernels by instruction set: vectors may differ between CPU
families. So a worker states its fingerprint with each result, and the report names
it (``labels.fingerprint``): the CPU's instruction-set flags (as a digest, with the
few that pick kernels spelled out), the onnxruntime version and the execution
provider the encoder uses. The runner image, whose onnxruntime encodes the
hosted ONNX grades, is named by the report's ``sandbox.image`` already.
"""

from __future__ import annotations

import hashlib
import platform
from functools import cache
from typing import Any

#: The instruction-set flags onnxruntime's CPU kernels choose between (MLAS dispatch).
KERNEL_FLAGS = (
    "sse4_1",
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx_vnni",
    "amx_tile",
    "asimd",
    "sve",
)
#: The provider the encoder asks for (grader.retrieval.encoder).
EXECUTION_PROVIDER = "CPUExecutionProvider"


def _cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return sorted(set(value.split()))
    except OSError:
        pass
    return []


def _onnxruntime_version() -> str | None:
    try:
        import onnxruntime

        return str(onnxruntime.__version__)
    except ImportError:  # a worker that grades only in the runner image need not have it
        return None


@cache
def worker_fingerprint() -> dict[str, Any]:
    """This machine's fingerprint: architecture, kernel-choosing flags, a digest of all flags, onnxruntime, provider."""
    flags = _cpu_flags()
    return {
        "machine": platform.machine(),
        "isa": [flag for flag in KERNEL_FLAGS if flag in flags],
        "cpu_flags_sha256": hashlib.sha256(" ".join(flags).encode("ascii", "replace")).hexdigest(),
        "onnxruntime": _onnxruntime_version(),
        "execution_provider": EXECUTION_PROVIDER,
    }


def fingerprint_sha256() -> str:
    """The sha256 of this machine's fingerprint: what the report's ``cost.machine.fingerprint`` names (``grader run`` too)."""
    from grader.grading.cost import fingerprint_digest

    digest = fingerprint_digest(worker_fingerprint())
    assert digest is not None  # a fingerprint is never empty
    return digest
