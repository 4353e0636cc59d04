"""The one error hierarchy of the grader.

Library code raises subclasses of :class:`GraderError`; only the CLI turns them
into exit statuses, in one table (:mod:`grader.cli.exits`). ``str(error)`` is the single line a person sees: it names the
file, line and field where one is known, and never contains secret material.
"""

from __future__ import annotations

from os import PathLike

from grader.failures import FailureCode


class GraderError(Exception):
    """Base of every error the grader raises on purpose."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        from grader.text import MAX_ERROR_LINE, bounded

        # Messages quote files, ids and text a submission controls: escaped and bounded here, once.
        message = bounded(message, MAX_ERROR_LINE)
        super().__init__(message)
        self.message = message
        self.hint = None if hint is None else bounded(hint, MAX_ERROR_LINE)

    def __str__(self) -> str:
        return self.message


class InputError(GraderError):
    """A file given to the grader is missing, unreadable or malformed.

    The message is rendered as ``file:line: field: what is wrong`` so that a
    person can jump to the offending place.
    """

    def __init__(
        self,
        what: str,
        *,
        path: str | PathLike[str] | None = None,
        line: int | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.field = field
        self.what = what
        location = ""
        if self.path is not None:
            location = self.path if line is None else f"{self.path}:{line}"
            location += ": "
        field_part = f"{field}: " if field else ""
        super().__init__(f"{location}{field_part}{what}", hint=hint)


class DataError(InputError):
    """Benchmark or task data (corpus, queries, qrels, benchmark.json) is invalid."""


class RunFormatError(InputError):
    """A run (ranked results) is malformed: bad JSON, duplicate documents, NaN scores..."""


class UsageError(GraderError):
    """The command line, or a library caller, asks for something inconsistent (unknown measure, benchmark, an argument out of range...)."""


class PackError(GraderError):
    """``grader pack`` cannot turn a model folder into a faithful submission (unsupported module, missing extra, cosine check failed)."""


class ReportError(GraderError):
    """A report could not be built, signed or written."""


class VerificationError(GraderError):
    """A signed report failed verification. Exit status 1, as ``grader verify`` documents."""


class CrossCheckError(VerificationError):
    """``--cross-check``: the grader's metrics differ from pytrec_eval's on the same run. Exit status 1: a check that did not pass."""


class NotReproduced(VerificationError):
    """``grader reproduce``: a re-grade differs from its signed report (the message names what differs first)."""


class ComparisonError(GraderError):
    """Reports cannot be compared: different benchmarks, tasks or queries, or no per-query values."""


class KeyFileError(InputError):
    """A key file is missing, malformed, or has unsafe permissions."""


class SubmissionError(InputError):
    """A submission (archive, manifest, model, tokenizer, image) is unusable."""


class SandboxUnavailable(GraderError):
    """The container engine cannot be reached or refused an operation: an infrastructure fault."""


class EngineLost(SandboxUnavailable):
    """The container engine went away mid-task and no longer answers: every task after would fail the same way, so a
    local run stops here (exit 4, the tasks already graded kept for a rerun) instead of recording this one as failed."""


class TaskFailure(GraderError):
    """A task of a submission failed with one of the report's failure codes.

    ``code`` is a :class:`grader.failures.FailureCode` (its spelling is accepted too).
    The message is one line a participant can act on, escaped and bounded
    (:func:`grader.text.bounded`); full logs stay on the host.
    ``container_words`` is what the submission's container said (its last stderr
    line), kept apart so that a report of a hidden split can leave it out.
    """

    def __init__(self, code: FailureCode | str, message: str, *, hint: str | None = None, container_words: str | None = None) -> None:
        from grader.text import MAX_STDERR_LINE, bounded

        self.code = FailureCode(code)
        #: the grader's own words
        self.own_message = bounded(message)
        #: the container's last stderr line (escaped, bounded), if it said anything
        self.container_words = bounded(container_words, MAX_STDERR_LINE) if container_words else None
        #: everything a person on the host or running ``grader check`` may see
        self.detail = f"{self.own_message}; last stderr line: {self.container_words}" if self.container_words else self.own_message
        super().__init__(f"{self.code}: {self.detail}", hint=hint)

    def report_text(self, *, public: bool) -> tuple[str, str | None]:
        """``(message, stderr)`` as a report carries them.

        A report is handed to the submitter, and a container's words can carry hidden
        queries and corpus text out of the sandbox. For a hidden split the report keeps
        the code and the grader's own message, with quoted ids a container returned
        redacted, and no stderr (the host's log under OUT/logs keeps it); for the public
        sample it keeps the container's last stderr line too.
        """
        from grader.text import redact_quoted

        if public:
            return self.own_message, self.container_words
        return redact_quoted(self.own_message), None


class DimensionMismatch(TaskFailure):
    """Query vectors and document vectors of different dimensions met in a search; ``code`` is the raiser's choice.

    Carries both dimensions, so that a shard worker can tell the model's fault from another worker's vectors
    (:func:`grader.grading.shard_sandbox.judge_mismatch`).
    """

    def __init__(self, code: FailureCode | str, *, queries: int, documents: int) -> None:
        super().__init__(code, f"query vectors have {queries} dimensions, document vectors {documents}")
        self.queries, self.documents = queries, documents


class SuspectQueries(TaskFailure):
    """A shard job's query vectors (another worker's output, by their ``sha256``) do not fit its documents, and this
    worker's own query vectors do: the vectors are suspect, not the model (``INFRA``; the server re-runs the query job)."""

    def __init__(self, message: str, *, sha256: str) -> None:
        super().__init__(FailureCode.INFRA, message)
        self.sha256 = sha256


#: Errors of a type that carries its code by itself (a :class:`TaskFailure` carries the code its raiser chose).
_CODE_OF_TYPE: tuple[tuple[type[GraderError], FailureCode], ...] = (
    (SubmissionError, FailureCode.MODEL_ERROR),  # the archive, manifest, model or tokenizer is unusable
    (SandboxUnavailable, FailureCode.INFRA),  # the container engine: this task fails, a rerun grades it again
)

#: Errors that end one task of a local run, recorded under :func:`failure_code` (the other tasks still run).
#: Every other error stops a local run (the CLI maps it to an exit status); the hosting adapter records any
#: error as :func:`failure_code` says.
TASK_FAULT_TYPES: tuple[type[GraderError], ...] = (TaskFailure, *(kind for kind, _code in _CODE_OF_TYPE))


def failure_code(error: BaseException) -> FailureCode:
    """The failure code of an error that ended a task (local runs) or a whole grade (hosting): the one rule.

    The place where an error arises chooses its type: a submission's fault is a
    :class:`TaskFailure` with its code, or a :class:`SubmissionError` (``MODEL_ERROR``).
    Anything else is ``INFRA``, never charged to the participant: a
    :class:`SandboxUnavailable`, a :class:`UsageError` (the caller's request, which on a
    host is the platform's own configuration), any other :class:`GraderError`, and an
    unexpected exception (a bug of ours; its handler logs the traceback).
    """
    if isinstance(error, TaskFailure):
        return error.code
    for kind, code in _CODE_OF_TYPE:
        if isinstance(error, kind):
            return code
    return FailureCode.INFRA


class InternalError(GraderError):
    """A bug of ours: an invariant the code relies on does not hold (e.g. a submission state move outside the state table).

    Never the participant's fault and never a usage error; the CLI exits 4 (infrastructure).
    """


class OutputLocked(GraderError):
    """Another grader run holds the lock of the ``--out`` folder. Exit status 75 (EX_TEMPFAIL: try again later)."""


class Interrupted(BaseException):
    """The grader was asked to stop (SIGINT, SIGTERM, SIGHUP) and cleaned up. Exit status 128 + the signal number.

    Like ``KeyboardInterrupt`` it derives from ``BaseException``, not :class:`GraderError`:
    an ``except Exception`` around a library call (the engine, onnxruntime) must not
    turn a stop request into a task failure and carry on.
    """

    def __init__(self, signum: int, name: str) -> None:
        super().__init__(f"stopped by {name}; containers, mounts and staged data were cleaned up")
        self.signum = signum
