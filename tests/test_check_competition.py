"""`grader check --competition FILE`: the competition's limits, kinds, training-label rule and upload cap, each checked.

The refusals of step 1 use the server's own words (grader/hosting/intake/refusals.py); step 3 names the limits
it ran under and where they came from, also when they are grader check's own defaults. (`--competition URL`
is tested against a real server in tests/hosting/test_submit_refusals.py.)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from grader.cli.main import cli

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
COMPETITION = """name = "c"
benchmark = "mini"
split = "test"
sample_split = "dev"
start = 2020-01-01T00:00:00Z
end = 2099-01-01T00:00:00Z
kinds = {kinds}
require_training_labels = {labels}
[limits]
time_limit_s = {time_limit}
memory = "3g"
cpus = 1
[upload]
max_bytes = "{cap}"
"""


def competition(tmp_path: Path, *, kinds: str = '["onnx"]', labels: str = "true", time_limit: float = 600, cap: str = "64m") -> Path:
    path = tmp_path / "c.toml"
    path.write_text(COMPETITION.format(kinds=kinds, labels=labels, time_limit=time_limit, cap=cap), encoding="utf-8")
    return path


def check(*args: object) -> Result:
    return CliRunner().invoke(cli, ["check", *map(str, args), "--tasks", "text2code", "--sandbox", "none"], catch_exceptions=False)


def first_line(result: Result) -> str:
    return result.stdout.splitlines()[0]


def test_a_kind_the_competition_does_not_accept_fails_step_1_in_the_servers_words(tmp_path: Path) -> None:
    result = check(EXAMPLE, "--competition", competition(tmp_path, kinds='["docker"]'))
    assert result.exit_code == 1
    assert first_line(result) == (
        "[FAIL] 1. archive and manifest: the server would refuse it: refused (422): invalid submission: "
        "submission.json: kind: 'onnx' submissions are not accepted here (allowed: docker)"
    )


def test_missing_training_labels_fail_step_1_where_the_competition_requires_them(tmp_path: Path) -> None:
    folder = tmp_path / "no-labels"
    shutil.copytree(EXAMPLE, folder)
    manifest = json.loads((folder / "submission.json").read_text())
    del manifest["training"]
    (folder / "submission.json").write_text(json.dumps(manifest), encoding="utf-8")
    result = check(folder, "--competition", competition(tmp_path))
    assert result.exit_code == 1
    assert first_line(result).startswith(
        "[FAIL] 1. archive and manifest: the server would refuse it: refused (422): invalid submission: "
        "submission.json: training: missing: this competition requires a declared training setting"
    )


def test_an_archive_over_the_upload_cap_fails_step_1(tmp_path: Path) -> None:
    result = check(EXAMPLE, "--competition", competition(tmp_path, cap="1m"))
    assert result.exit_code == 1
    line = first_line(result)
    assert line.startswith("[FAIL] 1. archive and manifest: the server would refuse it: refused (413): upload of ")
    assert line.endswith(" bytes is larger than the competition's cap of 1048576 bytes")


@pytest.mark.slow
def test_the_competitions_time_limit_is_the_one_the_sample_run_gets(tmp_path: Path) -> None:
    result = check(EXAMPLE, "--competition", competition(tmp_path, time_limit=0.01))
    assert result.exit_code == 1
    assert "[FAIL] 3. sample run: text2code: TIMEOUT: killed after the 0.01 s time limit" in result.stdout


@pytest.mark.slow
def test_step_3_says_which_limits_it_used_and_where_from(tmp_path: Path) -> None:
    file = competition(tmp_path)
    ruled = check(EXAMPLE, "--competition", file, "--json")
    assert ruled.exit_code == 0, ruled.stdout
    steps = json.loads(ruled.stdout)["steps"]
    assert steps[0]["reason"].endswith("; onnx accepted, training labels declared, packed 1.7 MB of the 67.1 MB upload cap")
    assert steps[2]["reason"] == (
        f"ran on the public 'dev' split of 1 task(s) in the grading sandbox under 600 s, 3.0 GiB, 1 CPU(s) (limits of the competition file {file})"
    )
    assert steps[2]["data"]["limits"]["memory_bytes"] == 3 << 30
    own = check(EXAMPLE, "--json", "--memory", "5g")
    assert own.exit_code == 0, own.stdout
    assert json.loads(own.stdout)["steps"][2]["reason"] == (
        "ran on the public 'dev' split of 1 task(s) in the grading sandbox under 3600 s, 5.0 GiB, 2 CPU(s) "
        "(grader check's own defaults with --memory; --competition takes a competition's)"
    )
    assert "same sandbox and limits as grading" not in own.stdout
