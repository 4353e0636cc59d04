"""Results of ``grader check``: one line per step, with a reason and a fix hint."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grader.text import MAX_ERROR_LINE, bounded

STEP_NAMES = (
    "archive and manifest",
    "intake",
    "sample run",
    "output validation",
    "sample score",
    "estimate",
)

#: Errors listed in full; the rest are counted.
MAX_LISTED_ERRORS = 20


@dataclass
class StepResult:
    """The outcome of one step: ``passed``, ``failed`` or ``not run``."""

    name: str
    status: str
    reason: str
    hint: str | None = None
    details: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Reasons and details quote what a submission wrote (stderr, ids, schema errors): escaped and bounded.
        self.reason = bounded(self.reason, MAX_ERROR_LINE)
        self.hint = None if self.hint is None else bounded(self.hint, MAX_ERROR_LINE)
        self.details = [bounded(detail, MAX_ERROR_LINE) for detail in self.details]

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.name, "status": self.status, "reason": self.reason, "hint": self.hint, "details": self.details, "data": self.data}


@dataclass
class CheckReport:
    """All steps, in order."""

    submission: str
    steps: list[StepResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(step.status == "passed" for step in self.steps)

    def add(self, step: StepResult) -> StepResult:
        self.steps.append(step)
        return step

    def finish(self) -> CheckReport:
        """Mark the steps never reached as ``not run``."""
        done = {step.name for step in self.steps}
        for name in STEP_NAMES:
            if name not in done:
                self.steps.append(StepResult(name, "not run", "an earlier step failed"))
        return self

    def as_dict(self) -> dict[str, Any]:
        return {"submission": self.submission, "passed": self.passed, "steps": [s.as_dict() for s in self.steps]}

    def as_text(self) -> str:
        marks = {"passed": "PASS", "failed": "FAIL", "not run": "----"}
        lines = []
        for number, step in enumerate(self.steps, start=1):
            lines.append(f"[{marks.get(step.status, step.status)}] {number}. {step.name}: {step.reason}")
            lines.extend(f"       {detail}" for detail in step.details)
            if step.hint and step.status == "failed":
                lines.append(f"       fix: {step.hint}")
        verdict = "all checks passed" if self.passed else "the submission is not ready"
        lines.append(f"{verdict}: {self.submission}")
        return "\n".join(lines) + "\n"


def listed(errors: list[str]) -> list[str]:
    """The first errors in full, then a count of the rest."""
    shown = errors[:MAX_LISTED_ERRORS]
    if len(errors) > MAX_LISTED_ERRORS:
        shown.append(f"... and {len(errors) - MAX_LISTED_ERRORS} more")
    return shown
