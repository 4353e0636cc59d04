"""The one place where the hosting layer calls the grading core.

Workers grade through :func:`grade_upload` only, so that a change of the
core's entry points is one edit here. It grades in the Docker sandbox only
(ONNX submissions in the runner image) with the competition's limits, and
returns what the server scores: each task's ranking as a compact run and the
facts of the grade that are not scores (the server, which alone holds the
judgements, scores the runs and signs the report), or the failure code of a
submission that could not be graded at all.
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.data.registry import resolve_benchmark
from grader.errors import GraderError, SandboxUnavailable, SubmissionError, TaskFailure, failure_code
from grader.failures import FailureCode
from grader.grading.interfaces import RunOptions
from grader.grading.ranking import rank_submission
from grader.hosting.config import DEFAULT_UNPACKED_BYTES, DEPTH
from grader.hosting.results.grade_progress import PROGRESS_FILE, GradeProgress
from grader.sandbox.blinding import Preblinded
from grader.sandbox.limits import SandboxLimits
from grader.submissions.archive import open_submission, unpack_limits

log = logging.getLogger("grader.worker")

#: Bytes of each container log a worker sends back (the tail; host-only unless the run was on the sample split).
LOG_TAIL_BYTES = 64 << 10


@dataclass(frozen=True)
class GradeRequest:
    """What to grade and how: everything comes from the job the server handed out."""

    benchmark: str
    tasks: list[str]
    split: str
    limits: SandboxLimits
    #: The key the worker's data copy was exported under (its id only: the copy's ids are the pseudonyms, staged as they are).
    #: None: a fresh key per grade, which the server refuses.
    blinding_key: Preblinded | None = None
    #: What the upload may unpack to: this ratio to its compressed size, and never past the absolute cap (the server's intake bounds).
    max_unpack_ratio: float = 20.0
    max_unpacked_bytes: int = DEFAULT_UNPACKED_BYTES
    #: Per task, the judged queries' pseudonyms the job names (the worker ranks them; the judgements stay on the server).
    judged: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class GradeOutcome:
    """What a worker returns: the facts of a grade and each ranked task's compact run, or a whole-submission failure code; plus host-only logs.

    ``facts`` hold no score (:func:`grader.grading.scoring.facts_of`): the server scores the runs.
    """

    facts: dict[str, Any] | None
    failure_code: FailureCode | None = None
    message: str = ""
    logs: dict[str, str] = field(default_factory=dict)
    #: per ranked task, its compact run (:mod:`grader.runs.compact`), in the work folder
    runs: dict[str, Path] = field(default_factory=dict)


def limits_to_json(limits: SandboxLimits) -> dict[str, Any]:
    """The limits as the job description carries them."""
    return limits.as_report()


def limits_from_json(data: dict[str, Any]) -> SandboxLimits:
    """Inverse of :func:`limits_to_json` (unknown keys refused by the dataclass)."""
    return SandboxLimits(**data)


def _logs(out_dir: Path) -> dict[str, str]:
    logs: dict[str, str] = {}
    folder = out_dir / "logs"
    if folder.is_dir():
        for path in sorted(folder.glob("*.log")):
            if path.is_file() and not path.is_symlink():
                with open(path, "rb") as handle:
                    size = path.stat().st_size
                    handle.seek(max(0, size - LOG_TAIL_BYTES))
                    logs[path.stem] = handle.read().decode("utf-8", "replace")
    return logs


def _failure_message(error: Exception) -> str:
    """The host-side words for a grade that ended in ``error``; an unexpected error is logged with its traceback."""
    if isinstance(error, TaskFailure):
        return error.detail
    if isinstance(error, GraderError):
        return str(error) if isinstance(error, (SandboxUnavailable, SubmissionError)) else f"{type(error).__name__}: {error}"
    log.error("grading raised an unexpected error (INFRA)", exc_info=error)
    return traceback.format_exc(limit=5)[-4000:]


def grade_upload(upload: Path, request: GradeRequest, work_dir: Path) -> GradeOutcome:
    """Rank the uploaded archive ``upload`` in the Docker sandbox, without the judgements; never raises (``Interrupted`` aside).

    Whatever stops the grade becomes the outcome's failure code by the one rule the local
    runner uses too, :func:`grader.errors.failure_code`: a submission's fault is charged,
    anything else (a ``UsageError`` included: on a host it is the job's configuration) is ``INFRA``.
    """
    out_dir = work_dir / "out"
    try:
        benchmark = resolve_benchmark(request.benchmark)
        options = RunOptions(
            benchmark=benchmark,
            tasks=request.tasks,
            split=request.split,
            out_dir=out_dir,
            sandbox="docker",
            limits=request.limits,
            blinding_key=request.blinding_key,
            runs_dir=work_dir / "runs",
            top_k=DEPTH,
        )
        bounds = unpack_limits(upload.stat().st_size, ratio=request.max_unpack_ratio, cap=request.max_unpacked_bytes)
        with open_submission(upload, bounds) as folder:
            facts = rank_submission(folder, options, request.judged, GradeProgress(request.tasks, work_dir / PROGRESS_FILE))
    except Exception as error:  # every fault becomes a code (grader.errors.failure_code); an unexpected one is ours
        return GradeOutcome(None, failure_code(error), _failure_message(error), _logs(out_dir))
    runs = {name: work_dir / "runs" / f"{name}.run" for name, entry in facts["tasks"].items() if entry["failure"] is None}
    return GradeOutcome(facts, None, "", _logs(out_dir), runs)
