"""Exit statuses of the ``grader`` command, in one table (documented in the README).

====  ==========================================================================================
0     success
1     a verification or check that did not pass (``grader verify``, ``grader reproduce``, ``grader check``, ``--cross-check``)
2     usage or input error: a bad option, a missing or malformed file, an unknown benchmark or measure
3     the submission's fault: its archive, manifest, model or image is unusable, or it failed while graded
4     the infrastructure's fault: the container engine is unavailable, a report could not be built or written
5     ``grader submit``/``status``/``submissions``/``finals``/``quota``: the server is unreachable or gave an error answer
6     ``grader status``/``finals``: the server knows no submission of yours by that id (404)
75    ``grader run``: another run holds the output folder's lock (EX_TEMPFAIL: try again later)
128+N stopped by signal N (SIGINT, SIGTERM, SIGHUP) after cleaning up
====  ==========================================================================================

The hosting client commands (``grader submit``, ``status``, ``submissions``) keep the statuses
docs/hosting.md documents for a remote verdict: 0 scored, 1 failed, 3 error or cancelled, 4
refused by the server or, with the server's words, by ``grader submit`` before uploading (quota, window,
kind, training labels, size, invalid upload), 5 server unreachable or an error answer, 6 unknown id;
``grader serve``/``admin`` exit 3 when the data or grader version differ from the competition's pins.

Library code raises :class:`grader.errors.GraderError` subclasses and never exits;
:class:`grader.cli.main.GraderGroup` maps them here.
"""

from __future__ import annotations

from grader.errors import (
    GraderError,
    InternalError,
    Interrupted,
    OutputLocked,
    ReportError,
    SandboxUnavailable,
    SubmissionError,
    TaskFailure,
    VerificationError,
)
from grader.hosting.errors import ClientError, PinMismatch, RefusedSubmission, UnknownSubmission

EXIT_OK = 0
EXIT_NOT_PASSED = 1
EXIT_USAGE = 2
EXIT_SUBMISSION = 3
EXIT_INFRASTRUCTURE = 4
EXIT_TRY_AGAIN = 75
EXIT_REFUSED = 4
EXIT_UNREACHABLE = 5
EXIT_UNKNOWN_ID = 6

#: ``grader submit --wait`` / ``status --wait``: the remote submission's state -> exit status
REMOTE_STATE_EXIT = {"scored": EXIT_OK, "failed": EXIT_NOT_PASSED, "error": EXIT_SUBMISSION, "cancelled": EXIT_SUBMISSION}

#: Error class -> exit status; the first class an error is an instance of wins (most specific first).
EXIT_STATUSES: tuple[tuple[type[GraderError], int], ...] = (
    (VerificationError, EXIT_NOT_PASSED),
    (OutputLocked, EXIT_TRY_AGAIN),
    (PinMismatch, EXIT_SUBMISSION),  # hosting: 3, as docs/hosting.md documents
    (RefusedSubmission, EXIT_REFUSED),
    (UnknownSubmission, EXIT_UNKNOWN_ID),
    (ClientError, EXIT_UNREACHABLE),
    (SubmissionError, EXIT_SUBMISSION),
    (TaskFailure, EXIT_SUBMISSION),
    (SandboxUnavailable, EXIT_INFRASTRUCTURE),
    (ReportError, EXIT_INFRASTRUCTURE),
    (InternalError, EXIT_INFRASTRUCTURE),  # a bug of ours, never the caller's
    (GraderError, EXIT_USAGE),  # UsageError, InputError (DataError, RunFormatError, KeyFileError), and the rest
)


#: Every status with its one-line meaning, in order (``grader --help`` lists them; the README's table says the same).
EXIT_MEANINGS: tuple[tuple[int, str], ...] = (
    (EXIT_OK, "success"),
    (EXIT_NOT_PASSED, "a verification or check did not pass"),
    (EXIT_USAGE, "usage or input error"),
    (EXIT_SUBMISSION, "the submission's fault (hosting: graded with an error or cancelled; pins differ)"),
    (EXIT_INFRASTRUCTURE, "the infrastructure's fault or an internal error; hosting: refused (quota, window, kind, labels, size)"),
    (EXIT_UNREACHABLE, "hosting: the server is unreachable or gave an error answer"),
    (EXIT_UNKNOWN_ID, "hosting: the server knows no submission of yours by that id"),
    (EXIT_TRY_AGAIN, "another run holds the output folder's lock; try again later"),
    (128, "stopped by signal N (SIGINT, SIGTERM, SIGHUP) after cleaning up"),
)


def exit_status(error: GraderError) -> int:
    """The process exit status for ``error`` (see ``EXIT_STATUSES``)."""
    for kind, status in EXIT_STATUSES:
        if isinstance(error, kind):
            return status
    raise AssertionError("unreachable: GraderError is the last row")  # pragma: no cover


def interrupted_status(stop: Interrupted) -> int:
    """128 + the signal number, as shells report a process a signal ended."""
    return 128 + stop.signum
