"""``grader check`` and ``grader run`` rank a task through one code path: the task grader that
``grader.grading.backends.prepare_task_grader`` picks, and its ``rank``.

A spy on that grader's ``rank`` records every ranking; ``grader check`` (on the
public sample split) and ``grader run --split`` of the same split must each call
it once per task and get identical rankings, and the run's report must carry the
score ``grader check`` printed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grader.data.registry import resolve_benchmark
from grader.grading.backends import prepare_task_grader
from grader.grading.interfaces import RunOptions
from grader.submissions.manifest import load_manifest
from tests.sandbox_support import RUNNER_IMAGE

pytestmark = pytest.mark.slow  # each test starts a server, a container or a subprocess

SUBMISSION = Path(__file__).resolve().parent / "broken_submissions" / "onnx-valid"


def _spy_on_rank(monkeypatch: pytest.MonkeyPatch, sandbox: str, tmp_path: Path) -> list[tuple[str, dict[str, dict[str, float]]]]:
    """Record ``(task, ranking)`` of every ``rank`` call of the grader class ``sandbox`` selects."""
    benchmark = resolve_benchmark("mini")
    options = RunOptions(benchmark=benchmark, tasks=["text2code"], split="dev", out_dir=tmp_path / "probe", sandbox=sandbox)
    grader_class = type(prepare_task_grader(SUBMISSION, load_manifest(SUBMISSION), options).grader)
    seen: list[tuple[str, dict[str, dict[str, float]]]] = []
    original = grader_class.rank

    def rank(self: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        ranked = original(self, inputs, *args, **kwargs)
        seen.append((inputs.task.name, ranked.run.to_mapping()))
        return ranked

    monkeypatch.setattr(grader_class, "rank", rank)
    return seen


def _check_and_run(grader_cli: Any, tmp_path: Path, sandbox: str) -> tuple[dict[str, Any], dict[str, Any]]:
    extra = ["--memory", "2g", "--cpus", "1"] if sandbox == "docker" else []
    checked = grader_cli("check", SUBMISSION, "--benchmark", "mini", "--tasks", "text2code", "--sandbox", sandbox, "--json", *extra)
    assert checked.exit_code == 0, (checked.stdout, checked.stderr)
    ran = grader_cli(
        "run",
        SUBMISSION,
        "--benchmark",
        "mini",
        "--tasks",
        "text2code",
        "--split",
        "dev",
        "--sandbox",
        sandbox,
        "--out",
        tmp_path / "out",
        "--quiet",
        "--top-k",
        "1000",
        *extra,
    )
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    return json.loads(checked.stdout), json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))


def _assert_one_path(seen: list[tuple[str, dict[str, dict[str, float]]]], check: dict[str, Any], report: dict[str, Any]) -> None:
    assert [task for task, _ in seen] == ["text2code", "text2code"], "check and run must each rank the task once, through the same grader"
    (_, from_check), (_, from_run) = seen
    assert from_check == from_run and from_check  # identical rankings, scores included
    score = next(step for step in check["steps"] if step["step"] == "sample score")
    measure = score["data"]["measure"]
    assert report["tasks"]["text2code"]["split"] == "dev"
    assert report["tasks"]["text2code"]["measures"][measure] == score["data"]["scores"]["text2code"]


def test_check_and_run_rank_alike_in_process(grader_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy_on_rank(monkeypatch, "none", tmp_path)
    check, report = _check_and_run(grader_cli, tmp_path, "none")
    _assert_one_path(seen, check, report)


@pytest.mark.docker(RUNNER_IMAGE)
@pytest.mark.usefixtures("docker_engine")
def test_check_and_run_rank_alike_in_the_runner_image(grader_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy_on_rank(monkeypatch, "docker", tmp_path)
    check, report = _check_and_run(grader_cli, tmp_path, "docker")
    _assert_one_path(seen, check, report)
