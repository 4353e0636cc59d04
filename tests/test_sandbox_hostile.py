"""Hostile container output through ``grader run``, ``grader check`` and ``grader verify`` (real containers).

Each test is an observation made on the grader before these checks existed:

* a container's last stderr line reached the terminal raw (escape codes cleared
  the screen, drew a fake score line, retitled the window, added a hyperlink);
* a ``run.jsonl`` line nested 200,000 brackets deep crashed ``grader run`` and
  ``grader check`` with ``RecursionError`` (no report, later tasks not graded);
* a huge query id was quoted whole into the failure message, so the signed
  report grew with it (a 100 MB id made a 133 MB report ``grader verify`` refused);
* a report of the hidden split carried the container's stderr, a channel out of
  the sandbox for hidden queries;
* a Docker manifest could name any image already on the host;
* an encode-mode image returning finite but huge vectors (+-1e30), or an ONNX
  model with ``normalize: false`` returning +-1e20, made float32 inner products
  overflow to infinity: a traceback, no report, later tasks not graded.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from grader.data.task import Document
from grader.sandbox.blinding import QUERY, blind
from grader.sandbox.blinding_key import write_blinding_key
from tests.cli_support import invoke
from tests.onnx_models import WORDS, embedding_table, onnx_submission
from tests.sandbox_support import (
    DOCUMENTS,
    QUERIES,
    RUNNER_IMAGE,
    TEST_BLINDING_KEY,
    HostGuard,
    docker_submission,
    image_of,
    read_report,
    write_beir_task,
    write_benchmark,
)

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_engine"), pytest.mark.slow]

HOSTILE = image_of("hostile")
HUGE_VECTORS = image_of("huge-vectors")
LIMITS = ["--time-limit", "60", "--memory", "512m", "--cpus", "1"]


def _no_raw_controls(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, repr(text[:300])


@pytest.mark.docker(HOSTILE)
def test_terminal_escapes_on_stderr_are_shown_escaped(guard: HostGuard, tmp_path: Path) -> None:
    bench = write_benchmark(tmp_path / "bench", ["ansi-stderr", "valid"])
    submission = docker_submission(tmp_path / "sub", HOSTILE)
    out = tmp_path / "out"
    # On the public sample split the report and the progress lines carry the container's line: escaped.
    result = invoke("run", submission, "--benchmark", bench, "--split", "dev", "--sandbox", "docker", "--out", out, *LIMITS)
    _no_raw_controls(result.stderr)
    failed_line = next(line for line in result.stderr.splitlines() if line.startswith("ansi-stderr: FAILED"))
    assert failed_line.startswith("ansi-stderr: FAILED NONZERO_EXIT: exit status 1; last stderr line: \\x1b[2J\\x1b[H")
    assert "\\x1b]0;grader: all tasks passed\\x07" in failed_line and "\\u202e" in failed_line
    failure = read_report(out)["tasks"]["ansi-stderr"]["failure"]
    assert failure["message"] == "exit status 1"
    assert failure["stderr"].startswith("\\x1b[2J\\x1b[Halpha: scored NDCG@10 = 0.9999")
    _no_raw_controls(json.dumps(failure, ensure_ascii=False))
    # grader check (public sample) shows the line, escaped.
    checked = invoke("check", submission, "--benchmark", bench, "--tasks", "ansi-stderr", "--sandbox", "docker", *LIMITS, expect=1)
    _no_raw_controls(checked.stdout + checked.stderr)
    assert "last stderr line: \\x1b[2J" in checked.stdout
    guard.verify()


@pytest.mark.docker(HOSTILE)
def test_a_hidden_split_report_carries_no_container_words(guard: HostGuard, tmp_path: Path) -> None:
    bench = write_benchmark(tmp_path / "bench", ["leak"])
    submission = docker_submission(tmp_path / "sub", HOSTILE)
    hidden, public = tmp_path / "hidden", tmp_path / "public"
    # One blinding key for both runs, so the first staged query (the one leaked) is the same.
    key = tmp_path / "blinding.key"
    write_blinding_key(key, TEST_BLINDING_KEY)
    blinding = ("--blinding-key", key)
    invoke("run", submission, "--benchmark", bench, "--sandbox", "docker", "--out", hidden, "--quiet", *blinding, *LIMITS)
    invoke("run", submission, "--benchmark", bench, "--split", "dev", "--sandbox", "docker", "--out", public, "--quiet", *blinding, *LIMITS)
    first = blind(TEST_BLINDING_KEY, "leak", QUERY, sorted(q.id for q in QUERIES)).real[0]
    text = next(q.text for q in QUERIES if q.id == first)
    hidden_failure = read_report(hidden)["tasks"]["leak"]["failure"]
    assert hidden_failure == {"code": "NONZERO_EXIT", "message": "exit status 1"}
    assert text not in (hidden / "report.json").read_text(encoding="utf-8")
    # The host's log keeps the words.
    assert f"leaked: {text}" in (hidden / "logs" / "leak.log").read_text(encoding="utf-8")
    public_failure = read_report(public)["tasks"]["leak"]["failure"]
    assert public_failure == {"code": "NONZERO_EXIT", "message": "exit status 1", "stderr": f"leaked: {text}"}
    guard.verify()


@pytest.mark.docker(HOSTILE)
def test_deeply_nested_run_lines_fail_the_task_not_the_run(guard: HostGuard, tmp_path: Path) -> None:
    bench = write_benchmark(tmp_path / "bench", ["deep", "deep-score", "valid"])
    submission = docker_submission(tmp_path / "sub", HOSTILE)
    out = tmp_path / "out"
    invoke("run", submission, "--benchmark", bench, "--sandbox", "docker", "--out", out, "--quiet", *LIMITS)
    tasks = read_report(out)["tasks"]
    for name in ("deep", "deep-score"):
        assert tasks[name]["status"] == "failed"
        assert tasks[name]["failure"]["code"] == "OUTPUT_INVALID"
        assert "nested" in tasks[name]["failure"]["message"]
    assert tasks["valid"]["status"] == "scored"
    checked = invoke("check", submission, "--benchmark", bench, "--tasks", "deep", "--sandbox", "docker", *LIMITS, expect=1)
    assert checked.exception is None or isinstance(checked.exception, SystemExit), checked.exception
    assert "[FAIL] 4. output validation" in checked.stdout and "nested" in checked.stdout
    guard.verify()


@pytest.mark.docker(HOSTILE)
def test_a_huge_id_gives_a_small_signed_report_that_verifies(guard: HostGuard, tmp_path: Path) -> None:
    bench = write_benchmark(tmp_path / "bench", ["huge-id"])
    submission = docker_submission(tmp_path / "sub", HOSTILE)
    key = tmp_path / "keys" / "grader.key"
    invoke("keygen", "--out", key.parent)
    out = tmp_path / "out"
    for split in ("test", "dev"):
        target = out / split
        invoke("run", submission, "--benchmark", bench, "--split", split, "--sandbox", "docker", "--out", target, "--key", key, "--quiet", *LIMITS)
        envelope = target / "report.dsse.json"
        assert envelope.stat().st_size < 64 * 1024
        invoke("verify", envelope, "--key", key.with_suffix(".pub"))
        failure = read_report(target)["tasks"]["huge-id"]["failure"]
        assert failure["code"] == "OUTPUT_INVALID"
        assert len(failure["message"]) < 1200
        _no_raw_controls(failure["message"])
        if split == "dev":
            assert "'\\x1b[2JAAAA" in failure["message"] and "(900004 characters)" in failure["message"]
        else:  # hidden split: the id the container returned is redacted
            assert "AAAA" not in failure["message"] and "'...'" in failure["message"]
    guard.verify()


@pytest.mark.docker(HUGE_VECTORS)
def test_huge_finite_vectors_from_an_encode_image_fail_the_task_not_the_run(guard: HostGuard, tmp_path: Path) -> None:
    """+-1e30 entries are finite in float32, but their inner products are not: OUTPUT_INVALID for that task, a signed report."""
    names = ["huge-corpus", "huge-queries", "huge-both", "valid"]
    bench = write_benchmark(tmp_path / "bench", names)
    submission = docker_submission(tmp_path / "sub", HUGE_VECTORS, mode="encode")
    key = tmp_path / "keys" / "grader.key"
    invoke("keygen", "--out", key.parent)
    out = tmp_path / "out"
    result = invoke("run", submission, "--benchmark", bench, "--sandbox", "docker", "--out", out, "--key", key, *LIMITS)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stderr
    tasks = read_report(out)["tasks"]
    side = {"huge-corpus": "document", "huge-queries": "query", "huge-both": "query"}
    for name, which in side.items():
        assert tasks[name]["status"] == "failed", tasks[name]
        failure = tasks[name]["failure"]
        assert failure["code"] == "OUTPUT_INVALID", failure
        # 64 columns of +-1e30: L2 norm 8e30, named in the grader's own message.
        assert f"{which} embeddings: row 0 has L2 norm 8e+30, above the limit of 1e+15" in failure["message"], failure
        assert any(line.startswith(f"{name}: FAILED OUTPUT_INVALID") for line in result.stderr.splitlines()), result.stderr
    # The task after them is graded as usual (a tiny task where each query shares its words with one document).
    assert tasks["valid"]["status"] == "scored"
    invoke("verify", out / "report.dsse.json", "--key", key.with_suffix(".pub"))
    guard.verify()


@pytest.mark.slow
@pytest.mark.docker(HOSTILE)
def test_images_from_submission_only_refuses_host_images(guard: HostGuard, docker_engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bench = write_benchmark(tmp_path / "bench", ["valid"])
    host_named = docker_submission(tmp_path / "host-named", HOSTILE)
    refused = invoke(
        "run",
        host_named,
        "--benchmark",
        bench,
        "--sandbox",
        "docker",
        "--out",
        tmp_path / "refused",
        "--quiet",
        "--images-from-submission-only",
        *LIMITS,
        expect=3,
    )
    assert "IMAGE_INVALID" in refused.stderr and "only an image in the submission's own docker save .tar" in refused.stderr
    assert not (tmp_path / "refused" / "report.json").exists()
    checked = invoke("check", host_named, "--benchmark", bench, "--sandbox", "docker", "--images-from-submission-only", *LIMITS, expect=1)
    assert "[FAIL] 2. intake" in checked.stdout
    # Without the flag the host image is graded, and the report says where it came from.
    invoke("run", host_named, "--benchmark", bench, "--sandbox", "docker", "--out", tmp_path / "host", "--quiet", *LIMITS)
    assert read_report(tmp_path / "host")["sandbox"]["image_origin"] == "host"
    # An image in the submission's own tar is accepted with the flag.
    in_tar = tmp_path / "in-tar"
    in_tar.mkdir()
    subprocess.run(["docker", "save", "-o", str(in_tar / "image.tar"), HOSTILE], check=True, timeout=120)
    docker_submission(in_tar, "image.tar")
    invoke("run", in_tar, "--benchmark", bench, "--sandbox", "docker", "--out", tmp_path / "tar", "--quiet", "--images-from-submission-only", *LIMITS)
    report = read_report(tmp_path / "tar")
    assert report["sandbox"]["image_origin"] == "submission"
    assert report["tasks"]["valid"]["status"] == "scored"
    guard.verify()


@pytest.mark.docker(RUNNER_IMAGE)
def test_a_nan_model_is_model_error_in_process_and_in_the_runner_image(guard: HostGuard, tmp_path: Path) -> None:
    table = embedding_table(dim=8)
    table[WORDS.index("w60")] = np.nan  # only the document that has w60 meets it (not the load-time probe)
    broken = onnx_submission(tmp_path / "nan-model", table=table)
    bench = tmp_path / "bench"
    documents = [*DOCUMENTS, Document("d7", "", "w60 w61")]
    write_beir_task(bench / "alpha", documents=documents)
    (bench / "benchmark.json").write_text(
        json.dumps({"name": "nan-bench", "version": "1", "primary_measure": "NDCG@10", "tasks": ["alpha"]}), encoding="utf-8"
    )
    codes = {}
    for sandbox in ("none", "docker"):
        out = tmp_path / f"out-{sandbox}"
        invoke("run", broken, "--benchmark", bench, "--sandbox", sandbox, "--out", out, "--quiet", "--threads", "1", *LIMITS)
        codes[sandbox] = read_report(out)["tasks"]["alpha"]["failure"]["code"]
    # The runner image carries the grader's source: one built before this check exits 2 (NONZERO_EXIT); rebuild it.
    assert codes == {"none": "MODEL_ERROR", "docker": "MODEL_ERROR"}, f"{codes} with {RUNNER_IMAGE} (rebuild it: images/runner/build.sh)"
    guard.verify()


@pytest.mark.docker(RUNNER_IMAGE)
def test_a_model_with_huge_finite_outputs_is_model_error_in_process_and_in_the_runner_image(guard: HostGuard, tmp_path: Path) -> None:
    """+-1e20 vectors from an ONNX model with ``normalize: false`` (finite; inner products overflow float32)."""
    table = embedding_table(dim=8, seed=4) * np.float32(1e20)
    assert np.isfinite(table).all()
    huge = onnx_submission(tmp_path / "huge-model", table=table, manifest={"normalize": False})
    bench = tmp_path / "bench"
    for name in ("alpha", "beta"):  # the tiny task plus a document of the table's own words (the tiny task's are unknown to it)
        write_beir_task(bench / name, documents=[*DOCUMENTS, Document("d7", "", "w60 w61")])
    (bench / "benchmark.json").write_text(
        json.dumps({"name": "huge-bench", "version": "1", "primary_measure": "NDCG@10", "tasks": ["alpha", "beta"]}), encoding="utf-8"
    )
    failures = {}
    for sandbox in ("none", "docker"):
        out = tmp_path / f"out-{sandbox}"
        invoke("run", huge, "--benchmark", bench, "--sandbox", sandbox, "--out", out, "--quiet", "--threads", "1", *LIMITS)
        tasks = read_report(out)["tasks"]
        assert set(tasks) == {"alpha", "beta"}  # the run went on past the first failed task
        failures[sandbox] = {name: (task["status"], task["failure"]["code"]) for name, task in tasks.items()}
        # In-process the grader names the norm; the runner image's words stay out of a hidden split's report.
        message = "has L2 norm" if sandbox == "none" else "the model failed while encoding"
        assert message in tasks["alpha"]["failure"]["message"], tasks["alpha"]["failure"]
    expected = {"alpha": ("failed", "MODEL_ERROR"), "beta": ("failed", "MODEL_ERROR")}
    assert failures == {"none": expected, "docker": expected}, f"{failures} with {RUNNER_IMAGE} (rebuild it: images/runner/build.sh)"
    guard.verify()


@pytest.mark.slow
@pytest.mark.docker(HOSTILE)
def test_fuzzed_runs_from_containers_are_documented_outcomes(guard: HostGuard, tmp_path: Path) -> None:
    """Seeded malformed runs written by a real container: each task scores or fails with an output code; the run goes on."""
    names = [f"fuzz-{seed}" for seed in range(8)]
    bench = write_benchmark(tmp_path / "bench", names)
    submission = docker_submission(tmp_path / "sub", HOSTILE)
    for split in ("test", "dev"):
        out = tmp_path / f"out-{split}"
        invoke("run", submission, "--benchmark", bench, "--split", split, "--sandbox", "docker", "--out", out, "--quiet", *LIMITS)
        tasks = read_report(out)["tasks"]
        assert set(tasks) == set(names)
        for name, task in tasks.items():
            if task["status"] == "failed":
                assert task["failure"]["code"] in ("OUTPUT_INVALID", "OUTPUT_MISSING", "OUTPUT_TOO_LARGE"), (name, task["failure"])
                _no_raw_controls(task["failure"]["message"])
                assert len(task["failure"]["message"]) < 1200
        assert sum(task["status"] == "failed" for task in tasks.values()) >= 6  # the generator breaks almost every run
    guard.verify()
