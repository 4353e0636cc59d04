"""Every exit status of ``grader``, end to end: the installed console script in a real process.

0 success, 1 a verification or check that did not pass, 2 usage or input error,
3 the submission's fault, 4 the infrastructure's fault (table: grader/cli/exits.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.cli.exits import EXIT_STATUSES, exit_status
from grader.errors import (
    DataError,
    EngineLost,
    GraderError,
    InputError,
    KeyFileError,
    ReportError,
    RunFormatError,
    SandboxUnavailable,
    SubmissionError,
    TaskFailure,
    UsageError,
    VerificationError,
)
from grader.failures import FailureCode
from grader.hosting.errors import ClientError, RefusedSubmission, UnknownSubmission
from grader.stats.bootstrap import order_statistic_ranks
from grader.stats.draws import BOOTSTRAP, stream_id
from grader.stats.multiple import holm

REPO = Path(__file__).resolve().parent.parent
BROKEN = REPO / "tests" / "broken_submissions"
GRADER = Path(sys.executable).parent / "grader"


def grader(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the console script as a user would, in a fresh process."""
    command = [str(GRADER)] if GRADER.exists() else [sys.executable, "-c", "from grader.cli.main import main; main()"]
    return subprocess.run([*command, *map(str, args)], capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}, check=False)


@pytest.fixture
def scored_files(tmp_path: Path) -> tuple[Path, Path]:
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", encoding="utf-8")
    run = tmp_path / "run.json"
    run.write_text('{"q1": {"d1": 2.0, "d2": 1.0}}', encoding="utf-8")
    return qrels, run


@pytest.mark.slow
def test_0_success(scored_files: tuple[Path, Path]) -> None:
    qrels, run = scored_files
    result = grader("score", "--qrels", qrels, "--run", run, "--measure", "P@1")
    assert result.returncode == 0, result.stderr
    assert "P@1" in result.stdout and "1.0000" in result.stdout


@pytest.mark.slow
def test_1_a_check_or_verification_that_did_not_pass(tmp_path: Path) -> None:
    checked = grader("check", BROKEN / "onnx-wrong-pooling", "--benchmark", "mini", "--tasks", "text2code", "--sandbox", "none")
    assert checked.returncode == 1, checked.stderr
    assert checked.stdout.startswith("[FAIL] 1. archive and manifest: ") and checked.stderr == ""
    report = tmp_path / "report.json"
    report.write_text("{}", encoding="utf-8")
    assert grader("keygen", "--out", tmp_path / "keys").returncode == 0
    verified = grader("verify", report, "--key", tmp_path / "keys" / "grader.pub")
    assert verified.returncode == 1 and verified.stdout == "" and verified.stderr.startswith("error: ")


@pytest.mark.slow
def test_2_usage_or_input_error(tmp_path: Path, scored_files: tuple[Path, Path]) -> None:
    qrels, run = scored_files
    missing = grader("score", "--qrels", tmp_path / "absent.tsv", "--run", run)
    assert missing.returncode == 2 and missing.stderr.startswith("error: ") and "absent.tsv" in missing.stderr
    unknown_measure = grader("score", "--qrels", qrels, "--run", run, "--measure", "NOPE@3")
    assert unknown_measure.returncode == 2 and unknown_measure.stderr.startswith("error: ")
    sign_without_out = grader("score", "--qrels", qrels, "--run", run, "--sign", tmp_path / "key")
    assert sign_without_out.returncode == 2 and sign_without_out.stderr == "error: --sign needs --out REPORT\n"
    bad_option = grader("score", "--no-such-option")
    assert bad_option.returncode == 2  # click's own usage errors keep 2


@pytest.mark.slow
def test_3_the_submissions_fault(tmp_path: Path) -> None:
    result = grader(
        "run",
        BROKEN / "archive-dotdot" / "submission.tar.gz",
        "--benchmark",
        "mini",
        "--tasks",
        "text2code",
        "--sandbox",
        "none",
        "--out",
        tmp_path / "out",
        "--quiet",
    )
    assert result.returncode == 3, result.stderr
    assert result.stderr.startswith("error: ") and "'..'" in result.stderr
    assert not (tmp_path / "out" / "report.json").exists()


@pytest.mark.slow
def test_4_the_infrastructures_fault(tmp_path: Path) -> None:
    # No engine listens on this socket: the container engine is unavailable, which is nobody's input error.
    result = grader(
        "run", BROKEN / "onnx-valid", "--benchmark", "mini", "--tasks", "text2code", "--sandbox", "docker", "--out", tmp_path / "out", "--quiet",
        env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"},
    )  # fmt: skip
    assert result.returncode == 4, result.stderr
    assert result.stderr.startswith("error: the Docker engine does not answer")


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (VerificationError("bad signature"), 1),
        (UsageError("unknown measure"), 2),
        (InputError("bad", path="f", line=1), 2),
        (DataError("bad", path="corpus.jsonl"), 2),
        (RunFormatError("bad", path="run.jsonl"), 2),
        (KeyFileError("mode 0644", path="grader.key"), 2),
        (GraderError("anything else"), 2),
        (SubmissionError("no manifest", path="sub"), 3),
        (TaskFailure(FailureCode.TIMEOUT, "killed"), 3),
        (SandboxUnavailable("no engine"), 4),
        (EngineLost("the engine went away"), 4),
        (ReportError("cannot write"), 4),
        (RefusedSubmission("refused (429): daily quota used"), 4),
        (ClientError("cannot reach the server"), 5),
        (UnknownSubmission("server answered 404: no such submission"), 6),
    ],
)
def test_the_table_maps_each_kind_of_error(error: GraderError, status: int) -> None:
    assert exit_status(error) == status


def test_an_argument_the_library_refuses_is_a_usage_error() -> None:
    # grader.stats and grader.effect check their arguments with UsageError (never a bare ValueError: tests/test_source_rules.py).
    for call in (lambda: order_statistic_ranks(38, 0.95), lambda: holm([1.5]), lambda: stream_id(BOOTSTRAP, -1)):
        with pytest.raises(UsageError) as caught:
            call()
        assert exit_status(caught.value) == 2


def test_the_table_ends_with_the_base_class_and_statuses_are_documented() -> None:
    assert EXIT_STATUSES[-1] == (GraderError, 2)
    # 1-4 for every command; 75 (output folder locked) for grader run; 5 (server unreachable) and 6 (unknown id) for the hosting client.
    assert {status for _, status in EXIT_STATUSES} == {1, 2, 3, 4, 5, 6, 75}
    assert len({exit_status(kind("x")) for kind in (VerificationError, UsageError, SubmissionError, SandboxUnavailable)}) == 4


def test_only_the_cli_entry_point_exits() -> None:
    """Commands and library code raise; GraderGroup alone calls sys.exit (plus the entry point of a separate program:
    the runner image's encoder; workers are `grader worker`)."""
    callers = sorted(
        str(path.relative_to(REPO))
        for path in (REPO / "grader").rglob("*.py")
        if "sys.exit(" in path.read_text(encoding="utf-8") or "click.UsageError(" in path.read_text(encoding="utf-8")
    )
    assert callers == ["grader/cli/main.py", "grader/sandbox/onnx_entry.py"]


@pytest.mark.slow
def test_4_when_the_engine_goes_away_mid_task_one_line(tmp_path: Path) -> None:
    """The engine's loss while a container runs (a proxy to its socket, cut): one error line and exit 4, as the README
    says, not a traceback. The machine's engine keeps running; the container is removed here."""
    from tests.engine_proxy import EngineProxy
    from tests.sandbox_support import RUNNER_IMAGE, require_docker

    engine = require_docker([RUNNER_IMAGE])
    proxy = EngineProxy(tmp_path / "engine.sock")
    args = [str(GRADER), "run", str(BROKEN / "onnx-valid"), "--benchmark", "mini", "--tasks", "text2code", "--sandbox", "docker"]
    env = {**os.environ, "DOCKER_HOST": proxy.docker_host}
    run = subprocess.Popen([*args, "--out", str(tmp_path / "out"), "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proxy.started.wait(120), "no container was started"
        proxy.cut()
        _stdout, stderr = run.communicate(timeout=120)
    finally:
        run.kill()
        for container in proxy.containers:
            try:
                engine.containers.get(container).remove(force=True)
            except Exception:  # already gone (its watchdog, or the run, removed it)
                pass
    assert run.returncode == 4, stderr
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr and 1 <= len(lines) <= 2, stderr
    assert lines[0].startswith("error: the Docker engine went away while a container ran and does not answer"), stderr
    assert not (tmp_path / "out" / "report.json").exists()  # no report of tasks the engine never ran
