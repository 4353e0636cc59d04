"""Whose fault a failure is: a property of its code, and one rule from error types to codes.

The local runner (``grader run``) and the hosting adapter (workers) translate an
error with the same function, :func:`grader.errors.failure_code`; a submission's
fault is charged, the platform's (``INFRA``) never is. A ``UsageError`` is the
caller's request: it stops a local run (exit 2) and is ``INFRA`` on a host; the one
submission-caused refusal that used to be a ``UsageError`` (a translate-mode image on
a retrieval benchmark) is ``IMAGE_INVALID`` in both.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from grader.errors import DataError, SandboxUnavailable, SubmissionError, TaskFailure, UsageError, failure_code
from grader.failures import FailureCode, Fault
from grader.grading.interfaces import ProgressListener, Ranked, RunOptions, SilentProgress, TaskInputs, load_task_inputs
from grader.grading.runner import grade_task
from grader.hosting.results.grading_adapter import GradeRequest, grade_upload
from grader.sandbox.limits import SandboxLimits
from tests.sandbox_support import docker_submission, write_benchmark

PARTICIPANT_CODES = {"TIMEOUT", "OOM", "NONZERO_EXIT", "OUTPUT_MISSING", "OUTPUT_INVALID", "OUTPUT_TOO_LARGE", "IMAGE_INVALID", "MODEL_ERROR"}


def test_every_code_says_whose_fault_it_is() -> None:
    for code in FailureCode:
        assert isinstance(code.fault, Fault), code
        assert code.charged is (code.fault is Fault.PARTICIPANT)
    assert {code.value for code in FailureCode if code.charged} == PARTICIPANT_CODES
    assert not FailureCode.INFRA.charged and not FailureCode.INPUT_INVALID.charged
    assert {code.value for code in FailureCode if code.about_outputs} == {"OUTPUT_MISSING", "OUTPUT_INVALID", "OUTPUT_TOO_LARGE"}


@pytest.mark.parametrize(
    ("error", "code"),
    [
        *((TaskFailure(code, "x"), code) for code in FailureCode),
        (SubmissionError("model.onnx does not load"), FailureCode.MODEL_ERROR),
        (SandboxUnavailable("no engine"), FailureCode.INFRA),
        (UsageError("unknown task"), FailureCode.INFRA),
        (DataError("corpus line 3 is not JSON"), FailureCode.INFRA),
        (ZeroDivisionError("a bug of ours"), FailureCode.INFRA),
    ],
    ids=repr,
)
def test_one_rule_translates_error_types_to_codes(error: BaseException, code: FailureCode) -> None:
    assert failure_code(error) is code


class _Raising:
    """A task grader whose ranking ends in ``error`` (the error types are what a real backend raises)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def report(self) -> dict[str, Any]:
        return {"kind": "none"}

    def rank(self, inputs: TaskInputs, options: RunOptions, progress: ProgressListener, *, keep_output: Path | None = None) -> Ranked:
        raise self.error


@pytest.fixture
def tiny(tmp_path: Path) -> tuple[RunOptions, TaskInputs]:
    from grader.data.registry import resolve_benchmark

    benchmark = resolve_benchmark(str(write_benchmark(tmp_path / "bench", ["only"])))
    options = RunOptions(benchmark=benchmark, tasks=["only"], split="test", out_dir=tmp_path / "out")
    return options, load_task_inputs(benchmark.task("only"), "test")


@pytest.mark.parametrize(
    "error",
    [TaskFailure(FailureCode.OOM, "killed"), SubmissionError("tokenizer.json is not a tokenizer"), SandboxUnavailable("the engine went away")],
    ids=lambda e: type(e).__name__,
)
def test_the_local_runner_records_a_task_fault_by_the_rule(tiny: tuple[RunOptions, TaskInputs], error: Exception) -> None:
    options, inputs = tiny
    entry = grade_task(_Raising(error), inputs, options, SilentProgress())
    assert entry["status"] == "failed"
    assert entry["failure"]["code"] == failure_code(error)


def test_the_local_runner_stops_on_a_usage_error(tiny: tuple[RunOptions, TaskInputs]) -> None:
    options, inputs = tiny
    with pytest.raises(UsageError):
        grade_task(_Raising(UsageError("--top-k out of range")), inputs, options, SilentProgress())


def _translate_image(tmp_path: Path) -> tuple[Path, Path]:
    return write_benchmark(tmp_path / "bench", ["only"]), docker_submission(tmp_path / "sub", "some-image:1", mode="translate")


def test_a_translate_image_on_a_retrieval_benchmark_is_image_invalid_on_a_host(tmp_path: Path) -> None:
    bench, submission = _translate_image(tmp_path)
    request = GradeRequest(benchmark=str(bench), tasks=["only"], split="test", limits=SandboxLimits())
    outcome = grade_upload(submission, request, tmp_path / "work")
    assert outcome.facts is None
    assert outcome.failure_code is FailureCode.IMAGE_INVALID and outcome.failure_code.charged
    assert "translate-mode images" in outcome.message


def test_a_translate_image_on_a_retrieval_benchmark_is_the_submissions_fault_locally(tmp_path: Path, grader_cli: Any) -> None:
    bench, submission = _translate_image(tmp_path)
    result = grader_cli("run", submission, "--benchmark", bench, "--tasks", "only", "--split", "test", "--out", tmp_path / "out")
    assert result.exit_code == 3, result.output  # the submission's fault, as docs/protocol.md says
    assert "IMAGE_INVALID" in result.output and "translate-mode images" in result.output
    assert not (tmp_path / "out" / "report.json").exists()


def test_a_usage_error_on_a_host_is_infra_never_charged(tmp_path: Path) -> None:
    _bench, submission = _translate_image(tmp_path)
    request = GradeRequest(benchmark="no-such-benchmark", tasks=["only"], split="test", limits=SandboxLimits())
    outcome = grade_upload(submission, request, tmp_path / "work")
    assert outcome.failure_code is FailureCode.INFRA and not outcome.failure_code.charged
    assert outcome.message.startswith("UsageError: unknown benchmark")


def test_an_unexpected_error_on_a_host_is_infra_with_its_traceback_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _bench, submission = _translate_image(tmp_path)

    def broken(name: str) -> Any:
        raise ZeroDivisionError("a bug of ours")

    monkeypatch.setattr("grader.hosting.results.grading_adapter.resolve_benchmark", broken)
    request = GradeRequest(benchmark="mini", tasks=["only"], split="test", limits=SandboxLimits())
    with caplog.at_level(logging.ERROR, logger="grader.worker"):
        outcome = grade_upload(submission, request, tmp_path / "work")
    assert outcome.failure_code is FailureCode.INFRA
    assert "ZeroDivisionError: a bug of ours" in outcome.message
    logged = [record for record in caplog.records if record.exc_info]
    assert logged and logged[0].exc_info is not None and logged[0].exc_info[0] is ZeroDivisionError


def test_no_module_spells_a_failure_code_as_a_string() -> None:
    import ast

    grader_root = Path(__file__).resolve().parent.parent / "grader"
    spellings = {code.value for code in FailureCode}
    found = [
        f"{path.relative_to(grader_root)}:{node.lineno}"
        for path in grader_root.rglob("*.py")
        if path.name != "failures.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value in spellings
    ]
    assert found == [], "use grader.failures.FailureCode"
