"""``grader check`` on the deliberately broken submissions of ``tests/broken_submissions``.

Each case asserts the exact step that fails, that every earlier step passed and
every later one was not run, and that the message names the file and the field.
ONNX cases run in-process; Docker cases start real containers (see
``tests/sandbox_support.py`` for the skip/require policy).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.check.steps import STEP_NAMES
from grader.cli.main import cli
from tests.sandbox_support import image_of, write_beir_task, write_benchmark

BROKEN = Path(__file__).resolve().parent / "broken_submissions"


def _check(submission: Path, *args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["check", str(submission), "--json", *args])
    return result.exit_code, json.loads(result.stdout)


def _assert_fails_at(report: dict, step: str) -> dict:
    statuses = [(s["step"], s["status"]) for s in report["steps"]]
    index = STEP_NAMES.index(step)
    assert [name for name, _ in statuses] == list(STEP_NAMES)
    assert [status for _, status in statuses[:index]] == ["passed"] * index, statuses
    assert statuses[index][1] == "failed", statuses
    assert all(status == "not run" for _, status in statuses[index + 1 :]), statuses
    assert report["passed"] is False
    return report["steps"][index]


ONNX_CASES = [
    ("onnx-bad-json", "archive and manifest", ["onnx-bad-json/submission.json:5", "invalid JSON"]),
    ("onnx-missing-field", "archive and manifest", ["onnx-missing-field/submission.json", "'pooling' is a required property"]),
    ("onnx-wrong-pooling", "archive and manifest", ["onnx-wrong-pooling/submission.json", "/pooling", "'max' is not one of"]),
    ("onnx-missing-model", "archive and manifest", ["onnx-missing-model/submission.json", "/model", "not a file in the submission"]),
    ("onnx-missing-tokenizer", "archive and manifest", ["onnx-missing-tokenizer/submission.json", "/tokenizer"]),
    ("archive-dotdot/submission.tar.gz", "archive and manifest", ["archive-dotdot/submission.tar.gz", "'../escaped.txt'", "'..'"]),
    ("onnx-wrong-inputs", "intake", ["model.onnx", "inputs", "'pixel_values'"]),
    ("onnx-wrong-output", "intake", ["onnx-wrong-output/submission.json", "/output", "'pooler_output'"]),
    (
        "onnx-random-dropout",
        "intake",
        ["onnx-random-dropout/model.onnx", "graph > If 'cond_1' then_branch > node 'drop' (Dropout, domain ai.onnx)", "training_mode 'training'"],
    ),
]


@pytest.mark.parametrize(("name", "step", "fragments"), ONNX_CASES, ids=[case[0] for case in ONNX_CASES])
def test_broken_onnx_submission_fails_at_its_step(name: str, step: str, fragments: list[str]) -> None:
    code, report = _check(BROKEN / name, "--benchmark", "mini", "--tasks", "text2code", "--sandbox", "none")
    assert code == 1
    failed = _assert_fails_at(report, step)
    for fragment in fragments:
        assert fragment in failed["reason"], (fragment, failed["reason"])
    assert failed["hint"]


def test_unpacking_the_dotdot_archive_writes_nothing_outside(tmp_path: Path) -> None:
    assert not (BROKEN / "escaped.txt").exists()
    _check(BROKEN / "archive-dotdot" / "submission.tar.gz", "--benchmark", "mini", "--tasks", "text2code", "--sandbox", "none")
    assert not (BROKEN / "escaped.txt").exists()
    assert not (BROKEN / "archive-dotdot" / "escaped.txt").exists()


@pytest.mark.slow
def test_the_valid_onnx_submission_passes_every_step() -> None:
    code, report = _check(BROKEN / "onnx-valid", "--benchmark", "mini", "--tasks", "text2code", "--sandbox", "none")
    assert code == 0
    assert [s["status"] for s in report["steps"]] == ["passed"] * len(STEP_NAMES)
    assert "says nothing about the hidden 'test' split" in report["steps"][4]["reason"]


def test_text_output_names_steps_and_fix_hints() -> None:
    result = CliRunner().invoke(
        cli, ["check", str(BROKEN / "onnx-wrong-pooling"), "--benchmark", "mini", "--tasks", "text2code", "--sandbox", "none"]
    )
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("[FAIL] 1. archive and manifest: ")
    assert lines[1].startswith("       fix: ")
    assert lines[2] == "[----] 2. intake: an earlier step failed"
    assert lines[-1].startswith("the submission is not ready: ")


@pytest.fixture
def scripted_benchmark(tmp_path: Path) -> Path:
    """A benchmark whose task names choose the scripted image's misbehaviour."""
    root = tmp_path / "scripted-bench"
    tasks = ["wrong-field", "half", "duplicate"]
    for task in tasks:
        write_beir_task(root / task)
    write_benchmark(root, tasks)
    return root


DOCKER_CASES = [
    ("docker-root-user", None, "intake", ["runs as root", "USER"]),
    ("docker-silent", None, "output validation", ["/output/run.jsonl", "OUTPUT_MISSING"]),
    ("docker-scripted", "wrong-field", "output validation", ["/output/run.jsonl:1: /hits/0", "'id' is a required property"]),
    ("docker-scripted", "half", "output validation", ["/output/run.jsonl: answers", "score 0 under the strict policy"]),
    ("docker-scripted", "duplicate", "output validation", ["/output/run.jsonl:", "/hits/", "/id", "appears twice"]),
]


@pytest.mark.slow
@pytest.mark.docker(image_of("rootuser"), image_of("silent"), image_of("scripted"))
@pytest.mark.parametrize(("name", "task", "step", "fragments"), DOCKER_CASES, ids=[f"{c[0]}-{c[1]}" for c in DOCKER_CASES])
def test_broken_docker_submission_fails_at_its_step(
    docker_engine, scripted_benchmark: Path, name: str, task: str | None, step: str, fragments: list[str]
) -> None:  # type: ignore[no-untyped-def]
    tasks = task or "half"
    code, report = _check(BROKEN / name, "--benchmark", str(scripted_benchmark), "--tasks", tasks, "--sandbox", "docker", "--time-limit", "60")
    assert code == 1
    failed = _assert_fails_at(report, step)
    text = failed["reason"] + "\n" + "\n".join(failed["details"])
    for fragment in fragments:
        assert fragment in text, (fragment, text)
