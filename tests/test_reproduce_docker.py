"""``grader reproduce`` of a Docker-sandbox grade: the example ONNX encoder in the runner image, on mini's text2code.

The re-grade stages under a blinding key of its own (a new one), so its container sees other pseudonyms:
the grader searches the vectors under the real ids, so the run digest is the grade's all the same. A report
re-signed with another image digest is named at the sandbox image, whose real digest is asked of the engine.
(The BM25 example image is no such test: which of the documents tied at the depth it keeps varies from run
to run, so its run digest does too, and reproduce says so.)
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from grader.reports.keys import load_public_key
from grader.reports.signing import write_signed_report
from grader.reports.verify import verify_report_file
from tests.cli_support import invoke
from tests.sandbox_support import RUNNER_IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_engine"), pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
SUBMISSION = REPO / "submissions_example" / "onnx-lsa"


@pytest.mark.slow
@pytest.mark.docker(RUNNER_IMAGE)
def test_a_docker_grade_reproduces_under_another_blinding_key_and_names_another_image(docker_engine: Any, tmp_path: Path) -> None:
    invoke("keygen", "--out", tmp_path / "keys")
    key, public = tmp_path / "keys" / "grader.key", tmp_path / "keys" / "grader.pub"
    out = tmp_path / "grade"
    invoke(
        "run", SUBMISSION, "--benchmark", "mini", "--tasks", "text2code", "--sandbox", "docker", "--threads", "2",
        "--time-limit", "120", "--memory", "2g", "--cpus", "2", "--quiet", "--out", out, "--key", key,
    )  # fmt: skip
    signed = out / "report.dsse.json"
    again = tmp_path / "again"
    result = invoke("reproduce", signed, SUBMISSION, "--key", public, "--quiet", "--out", again)
    assert result.stdout.startswith(f"reproduced: {signed}: 1 task(s)")
    assert (again / "blinding.key").read_bytes() != (tmp_path / "keys" / "blinding.key").read_bytes()

    report = copy.deepcopy(verify_report_file(signed, load_public_key(public)).report)
    report["sandbox"]["image"] = "sha256:" + "0" * 64
    changed, _ = write_signed_report(report, key, tmp_path / "changed.dsse.json")
    refused = invoke("reproduce", changed, SUBMISSION, "--key", public, "--quiet", expect=1)
    real = docker_engine.images.get(RUNNER_IMAGE).id
    assert refused.stderr == f"error: {changed}: not reproduced: sandbox image: docker 'sha256:{'0' * 64}' in the report, docker {real!r} re-graded\n"
