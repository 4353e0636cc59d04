"""Exit statuses of the ``grader`` command, in one table (documented in the README).

====  ==========================================================================================
0     success
1     a verification or check that did not pass (``grader verify``, ``grader check``)
2     usage or input error: a bad option, a missing or malformed file, an unknown benchmark or measure
3     the submission's fault: its archive, manifest, model or image is unusable, or it failed while graded
4     the infrastructure's fault: the container engine is unavailable, a report could not be built or written
====  ==========================================================================================

Library code raises :class:`grader.errors.GraderError` subclasses and never exits;
:class:`grader.cli.main.GraderGroup` maps them here.
"""

from __future__ import annotations

from grader.errors import GraderError, ReportError, SandboxUnavailable, SubmissionError, TaskFailure, VerificationError

EXIT_OK = 0
EXIT_NOT_PASSED = 1
EXIT_USAGE = 2
EXIT_SUBMISSION = 3
EXIT_INFRASTRUCTURE = 4

#: Error class -> exit status; the first class an error is an instance of wins (most specific first).
EXIT_STATUSES: tuple[tuple[type[GraderError], int], ...] = (
    (VerificationError, EXIT_NOT_PASSED),
    (SubmissionError, EXIT_SUBMISSION),
    (TaskFailure, EXIT_SUBMISSION),
    (SandboxUnavailable, EXIT_INFRASTRUCTURE),
    (ReportError, EXIT_INFRASTRUCTURE),
    (GraderError, EXIT_USAGE),  # UsageError, InputError (DataError, RunFormatError, KeyFileError), and the rest
)


def exit_status(error: GraderError) -> int:
    """The process exit status for ``error`` (see ``EXIT_STATUSES``)."""
    for kind, status in EXIT_STATUSES:
        if isinstance(error, kind):
            return status
    raise AssertionError("unreachable: GraderError is the last row")  # pragma: no cover
