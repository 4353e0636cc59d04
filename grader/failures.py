"""The failure codes of a task: one type, used by the sandbox, the grading loop, ``grader check``,
the report schema and the docs (a test checks that all of them list the same codes).

A :class:`FailureCode` is a ``StrEnum``: it compares equal to its spelling
(``FailureCode.TIMEOUT == "TIMEOUT"``) and serialises as that string, so stored
results and old reports read the same as before.
"""

from __future__ import annotations

import enum


class FailureCode(enum.StrEnum):
    """Why a task of a submission has no score."""

    #: the grader's own wall-clock timer killed the container
    TIMEOUT = "TIMEOUT"
    #: the kernel killed it for memory (the container's ``OOMKilled`` state)
    OOM = "OOM"
    #: it exited with a non-zero status
    NONZERO_EXIT = "NONZERO_EXIT"
    #: an expected output file is absent
    OUTPUT_MISSING = "OUTPUT_MISSING"
    #: an output failed validation (JSON, schema, NaN, unknown or duplicate ids, shape, nesting)
    OUTPUT_INVALID = "OUTPUT_INVALID"
    #: an output exceeded its size bound
    OUTPUT_TOO_LARGE = "OUTPUT_TOO_LARGE"
    #: the image failed intake (root user, architecture, several images in a tar, size, host image refused)
    IMAGE_INVALID = "IMAGE_INVALID"
    #: the container engine itself failed: not the submission's fault
    INFRA = "INFRA"
    #: an ONNX model failed or produced NaN while encoding (in-process or in the runner image alike)
    MODEL_ERROR = "MODEL_ERROR"
    #: no longer emitted; kept so that reports written by older graders stay readable
    INPUT_INVALID = "INPUT_INVALID"


#: Codes the current grader emits (every code but the legacy ones).
EMITTED_CODES: tuple[FailureCode, ...] = tuple(code for code in FailureCode if code is not FailureCode.INPUT_INVALID)

#: Codes that mean "the output files are wrong" (``grader check`` then lists every problem in them).
OUTPUT_CODES = frozenset({FailureCode.OUTPUT_MISSING, FailureCode.OUTPUT_INVALID, FailureCode.OUTPUT_TOO_LARGE})

#: Exit status of the grader's runner image when the submitted model failed (not the image's own fault).
RUNNER_MODEL_ERROR_EXIT = 3
