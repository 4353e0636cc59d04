"""The failure codes of a task, and whose fault each one is: one type, used by the sandbox, the grading
loop, ``grader check``, the hosting layer, the report schema and the docs (a test checks that all of
them list the same codes).

A :class:`FailureCode` is a ``StrEnum``: it compares equal to its spelling
(``FailureCode.TIMEOUT == "TIMEOUT"``) and serialises as that string, so stored
results and old reports read the same as before.

Each code names its :class:`Fault`: the participant's (``charged``: a hosted
submission ends ``failed`` and counts against its quota) or the platform's
(``INFRA``: retried, never charged). Which code an error becomes is decided once,
by :func:`grader.errors.failure_code`, for the local runner and the hosting
adapter alike (docs/protocol.md, "Whose fault").
"""

from __future__ import annotations

import enum


class Fault(enum.Enum):
    """Who caused a failure."""

    #: the submission: charged to the participant
    PARTICIPANT = "participant"
    #: the grader, its host or its container engine: never charged
    PLATFORM = "platform"


class FailureCode(enum.StrEnum):
    """Why a task of a submission has no score; :attr:`fault` says whose fault that is."""

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
    #: the image failed intake (root user, architecture, several images in a tar, size, host image refused,
    #: a mode the benchmark does not grade)
    IMAGE_INVALID = "IMAGE_INVALID"
    #: the grader, its data or the container engine failed: not the submission's fault
    INFRA = "INFRA"
    #: an ONNX model failed or produced NaN while encoding (in-process or in the runner image alike),
    #: or the submission's archive, manifest, model or tokenizer is unusable
    MODEL_ERROR = "MODEL_ERROR"
    #: no longer emitted; kept so that reports written by older graders stay readable
    INPUT_INVALID = "INPUT_INVALID"
    #: hosted replicas only: a worker outvoted by the others gave, on a re-run of its job, the majority's output or a
    #: third one (two outputs for one input); the model may not be deterministic, or the worker lied once: the grader
    #: cannot tell which, so the grade ends ``error`` with this code, charged to no one, and no worker is flagged
    NONDETERMINISTIC = "NONDETERMINISTIC"

    @property
    def fault(self) -> Fault:
        """Whose fault a failure with this code is."""
        return _FAULTS[self]

    @property
    def charged(self) -> bool:
        """Whether the participant caused it (and a hosted submission is charged for it)."""
        return _FAULTS[self] is Fault.PARTICIPANT

    @property
    def about_outputs(self) -> bool:
        """Whether it means "the output files are wrong" (``grader check`` then lists every problem in them)."""
        return self in (FailureCode.OUTPUT_MISSING, FailureCode.OUTPUT_INVALID, FailureCode.OUTPUT_TOO_LARGE)


#: Whose fault each code is: every code, written once (a test walks the enum).
_FAULTS: dict[FailureCode, Fault] = {
    FailureCode.TIMEOUT: Fault.PARTICIPANT,
    FailureCode.OOM: Fault.PARTICIPANT,
    FailureCode.NONZERO_EXIT: Fault.PARTICIPANT,
    FailureCode.OUTPUT_MISSING: Fault.PARTICIPANT,
    FailureCode.OUTPUT_INVALID: Fault.PARTICIPANT,
    FailureCode.OUTPUT_TOO_LARGE: Fault.PARTICIPANT,
    FailureCode.IMAGE_INVALID: Fault.PARTICIPANT,
    FailureCode.MODEL_ERROR: Fault.PARTICIPANT,
    FailureCode.INFRA: Fault.PLATFORM,
    # Never emitted any more: a grader that emitted it now would be ours to fix.
    FailureCode.INPUT_INVALID: Fault.PLATFORM,
    # A lying worker can cause it as well as the model (a lie once, the truth on the re-run): never charged.
    FailureCode.NONDETERMINISTIC: Fault.PLATFORM,
}


def code_or_infra(value: object) -> FailureCode:
    """``value`` as a :class:`FailureCode`; anything else (an older or damaged row, another party's word) reads as ``INFRA``.

    A code read back from storage or from another process is untrusted: turning it into a code must never
    raise, and what is not a code is no one's proven fault but the platform's (never charged, retried).
    """
    if isinstance(value, str):
        try:
            return FailureCode(value)
        except ValueError:
            pass
    return FailureCode.INFRA


#: Codes the current grader emits (every code but the legacy ones).
EMITTED_CODES: tuple[FailureCode, ...] = tuple(code for code in FailureCode if code is not FailureCode.INPUT_INVALID)

#: Exit status of the grader's runner image when the submitted model failed (not the image's own fault).
RUNNER_MODEL_ERROR_EXIT = 3
