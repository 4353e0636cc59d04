"""The one place where the hosting layer calls the grading core.

Workers grade through :func:`grade_upload` only, so that a change of the
core's entry points is one edit here. It grades in the Docker sandbox only
(ONNX submissions in the runner image) with the competition's limits, and
returns the unsigned report (the server signs it with the host key) or the
failure code of a submission that could not be graded at all.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.data.registry import resolve_benchmark
from grader.errors import GraderError, SandboxUnavailable, SubmissionError, TaskFailure, UsageError
from grader.grading.interfaces import SilentProgress
from grader.grading.runner import RunOptions, grade_submission
from grader.sandbox.blinding import BlindingKey
from grader.sandbox.limits import SandboxLimits
from grader.submissions.archive import open_submission

#: Bytes of each container log a worker sends back (the tail; host-only unless the run was on the sample split).
LOG_TAIL_BYTES = 64 << 10


@dataclass(frozen=True)
class GradeRequest:
    """What to grade and how: everything comes from the job the server handed out."""

    benchmark: str
    tasks: list[str]
    split: str
    limits: SandboxLimits
    #: The competition's blinding key (the job carries it); None: a fresh one per grade, which the server refuses.
    blinding_key: BlindingKey | None = None


@dataclass
class GradeOutcome:
    """A report (some tasks may have failed), or a whole-submission failure code; plus host-only logs."""

    report: dict[str, Any] | None
    failure_code: str | None = None
    message: str = ""
    logs: dict[str, str] = field(default_factory=dict)


def limits_to_json(limits: SandboxLimits) -> dict[str, Any]:
    """The limits as the job description carries them."""
    return limits.as_report()


def limits_from_json(data: dict[str, Any]) -> SandboxLimits:
    """Inverse of :func:`limits_to_json` (unknown keys refused by the dataclass)."""
    return SandboxLimits(**data)


def blinding_key_from_job(job: dict[str, Any]) -> BlindingKey | None:
    """The blinding key a job carries (hex), or None when it carries none."""
    value = job.get("blinding_key")
    try:
        return BlindingKey(bytes.fromhex(value)) if isinstance(value, str) else None
    except (ValueError, UsageError):
        return None  # graded under a fresh key instead: the server then refuses the report (INFRA), never a crash here


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


def grade_upload(upload: Path, request: GradeRequest, work_dir: Path) -> GradeOutcome:
    """Grade the uploaded archive ``upload`` in the Docker sandbox; never raises for a submission's fault."""
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
        )
        with open_submission(upload) as folder:
            report, _path = grade_submission(folder, options, SilentProgress())
    except TaskFailure as failure:
        code = failure.code
        return GradeOutcome(None, code, failure.detail, _logs(out_dir))
    except SandboxUnavailable as error:
        return GradeOutcome(None, "INFRA", str(error), _logs(out_dir))
    except SubmissionError as error:
        return GradeOutcome(None, "MODEL_ERROR", str(error), _logs(out_dir))
    except UsageError as error:
        return GradeOutcome(None, "IMAGE_INVALID", str(error), _logs(out_dir))
    except GraderError as error:
        return GradeOutcome(None, "INFRA", f"{type(error).__name__}: {error}", _logs(out_dir))
    except Exception:  # a bug or an environment fault is the platform's, never the participant's
        return GradeOutcome(None, "INFRA", traceback.format_exc(limit=5)[-4000:], _logs(out_dir))
    return GradeOutcome(report, None, "", _logs(out_dir))
