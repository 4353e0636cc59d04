"""``grader run`` and ``grader check`` end to end in the Docker sandbox (real images, real containers).

* The BM25 example image gives, through ``grader run --sandbox docker``, exactly
  the scores of its run produced by hand (``docker run --network none`` on an
  independently staged input under the run's blinding key, the run mapped back
  to the real ids by hand) and scored with ``grader score``.
* An ONNX submission scores the same in the runner image as in-process.
* A failing task is reported with its failure code; the others still score.
* ``grader check`` stops at the right step, naming the file and field.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from grader.submissions.digest import submission_digest
from tests.cli_support import invoke
from tests.conftest import write_task
from tests.onnx_models import embedding_table, onnx_submission, words
from tests.sandbox_support import (
    BM25_IMAGE,
    RUNNER_IMAGE,
    HostGuard,
    docker_submission,
    image_of,
    read_report,
    unavailable,
    write_benchmark,
)

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_engine"), pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
MINI_TEXT2CODE = REPO / "grader" / "bundled" / "mini" / "text2code"
LIMITS = ["--time-limit", "60", "--memory", "1g", "--cpus", "1"]


def image_id_of(client: Any, reference: str) -> str:
    """The image ID a tag names now (other people may rebuild the images while tests run)."""
    return str(client.images.get(reference).id)


def assert_same_measures(got: dict[str, float], expected: dict[str, float], *, tolerance: float = 1e-12) -> None:
    assert set(got) == set(expected), (sorted(got), sorted(expected))
    for measure, value in expected.items():
        assert math.isclose(got[measure], value, rel_tol=0, abs_tol=tolerance), (measure, got[measure], value)


# --------------------------------------------------------------------------- grader run


@pytest.mark.slow
@pytest.mark.docker(BM25_IMAGE)
def test_bm25_example_scores_as_its_hand_made_run(guard: HostGuard, docker_engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if shutil.which("docker") is None:
        unavailable("the docker CLI is not installed (the by-hand run uses `docker run`)")
    submission = REPO / "submissions_example" / "docker-bm25"
    guard.watch(submission, MINI_TEXT2CODE)
    out = tmp_path / "out"
    tagged_before = image_id_of(docker_engine, BM25_IMAGE)
    result = invoke(
        "run",
        submission,
        "--benchmark",
        "mini",
        "--tasks",
        "text2code",
        "--sandbox",
        "docker",
        "--out",
        out,
        "--quiet",
        "--time-limit",
        "120",
        "--memory",
        "1g",
        "--cpus",
        "2",
        "--top-k",
        "100",
    )
    assert f"report: {out / 'report.json'}" in result.stdout
    report = read_report(out)
    image_id = report["sandbox"]["image"]
    assert image_id in (tagged_before, image_id_of(docker_engine, BM25_IMAGE))  # the tag's image (even if rebuilt meanwhile)
    assert report["subject"] == {
        "kind": "docker-image",
        "name": "bm25s-baseline",
        "digest": {"sha256": image_id.split(":", 1)[1]},
        "image": BM25_IMAGE,
        "mode": "retrieve",
    }
    sandbox = report["sandbox"]
    assert sandbox["kind"] == "docker" and sandbox["image"] == image_id and sandbox["mode"] == "retrieve" and sandbox["network"] == "none"
    assert sandbox["limits"]["time_limit_s"] == 120.0
    assert sandbox["limits"]["memory_bytes"] == 1 << 30
    assert sandbox["limits"]["cpus"] == 2.0
    task = report["tasks"]["text2code"]
    assert task["status"] == "scored" and task["failure"] is None
    assert task["queries"] == {"judged": 881, "answered": task["queries"]["answered"], "missing": task["queries"]["missing"], "extra": 0}
    assert (out / "logs" / "text2code.log").is_file()

    # By hand: stage with the stdlib script under the run's own blinding key (the same pseudonyms, the same
    # order), run the image with the docker CLI, map the run back with the stdlib script, score with `grader score`.
    staged_in, staged_out = tmp_path / "by-hand" / "in", tmp_path / "by-hand" / "out"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "tests" / "sandbox_images" / "stage_input.py"),
            str(MINI_TEXT2CODE),
            str(staged_in),
            str(staged_out),
            "--top-k",
            "100",
            "--key",
            str(out / "blinding.key"),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    first_query = json.loads((staged_in / "queries.jsonl").read_text(encoding="utf-8").splitlines()[0])["_id"]
    assert re.fullmatch(r"q[0-9a-f]{24}", first_query)  # the container sees pseudonyms, by hand as in grading
    os.chmod(staged_out, 0o777)
    subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--read-only", "--tmpfs", "/tmp", "--memory", "1g",
         "-v", f"{staged_in}:/input:ro", "-v", f"{staged_out}:/output", image_id],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    real_run = tmp_path / "by-hand" / "run.jsonl"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "tests" / "sandbox_images" / "unblind_run.py"),
            str(staged_in.with_name("in.ids.tsv")),
            str(staged_out / "run.jsonl"),
            str(real_run),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    measures = list(task["measures"])
    scored = invoke(
        "score",
        "--qrels",
        MINI_TEXT2CODE / "qrels" / "test.tsv",
        "--run",
        real_run,
        "--format",
        "json",
        *[arg for m in measures for arg in ("--measure", m)],
    )
    by_hand = json.loads(scored.stdout)
    assert by_hand["queries"] == {k: task["queries"][k] for k in by_hand["queries"]}
    assert_same_measures(task["measures"], by_hand["measures"], tolerance=0.0)
    assert 0.3 < task["measures"]["NDCG@10"] < 0.5  # README: 0.3984
    guard.verify()


ONNX_TASKS = {
    "alpha": {
        "corpus": [
            {"_id": "a1", "title": words(10), "text": words(11, 12, 13)},
            {"_id": "a2", "title": "", "text": words(14, 15, 16, 17)},
            {"_id": "a3", "title": words(18, 19), "text": words(20, 21)},
            {"_id": "a4", "title": "", "text": words(22, 23, 10)},
            {"_id": "a5", "title": "", "text": words(*range(25, 45))},  # longer than max_length: truncated
        ],
        "queries": [
            {"_id": "qa1", "text": words(11, 12)},
            {"_id": "qa2", "text": words(15, 16, 30)},
            {"_id": "qa3", "text": words(19, 21)},
            {"_id": "qa4", "text": words(23, 24)},
        ],
        "qrels": {"test": [("qa1", "a1", 1), ("qa2", "a2", 2), ("qa2", "a5", 1), ("qa3", "a3", 1), ("qa4", "a4", 1)]},
    },
    "beta": {
        "corpus": [
            {"_id": "b1", "title": "", "text": words(45, 46, 47)},
            {"_id": "b2", "title": "", "text": words(48, 49)},
            {"_id": "b3", "title": words(53), "text": words(50, 51, 52)},
        ],
        "queries": [{"_id": "qb1", "text": words(46, 47)}, {"_id": "qb2", "text": words(51, 52, 48)}],
        "qrels": {"test": [("qb1", "b1", 1), ("qb2", "b3", 1), ("qb2", "b2", 1)]},
    },
}


@pytest.mark.docker(RUNNER_IMAGE)
def test_onnx_scores_the_same_in_the_runner_image_as_in_process(
    guard: HostGuard, docker_engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("grader.grading.backends.RUNNER_IMAGE", RUNNER_IMAGE)  # run and check choose their grader there
    bench = tmp_path / "bench"
    for name, task in ONNX_TASKS.items():
        write_task(bench / name, corpus=task["corpus"], queries=task["queries"], qrels=task["qrels"])
    (bench / "benchmark.json").write_text(
        json.dumps(
            {
                "name": "onnx-tiny",
                "version": "1",
                "primary_measure": "NDCG@10",
                "measures": ["NDCG@10", "MRR@10", "Recall@3", "P@1", "MAP@100"],
                "tasks": list(ONNX_TASKS),
            }
        ),
        encoding="utf-8",
    )
    submission = onnx_submission(
        tmp_path / "tiny-model", table=embedding_table(dim=8, seed=3), manifest={"query_prefix": "w7 ", "document_prefix": "w8 "}
    )
    guard.watch(submission, bench)

    in_docker, in_process = tmp_path / "docker", tmp_path / "none"
    runner_before = image_id_of(docker_engine, RUNNER_IMAGE)
    invoke("run", submission, "--benchmark", bench, "--sandbox", "docker", "--out", in_docker, "--threads", "1", "--quiet", *LIMITS)
    invoke("run", submission, "--benchmark", bench, "--sandbox", "none", "--out", in_process, "--threads", "1", "--quiet")
    sandboxed, local = read_report(in_docker), read_report(in_process)

    assert (
        sandboxed["sandbox"]["kind"] == "docker"
        and sandboxed["sandbox"]["image"] in (runner_before, image_id_of(docker_engine, RUNNER_IMAGE))
        and sandboxed["sandbox"]["mode"] == "encode"
    )
    assert sandboxed["sandbox"]["limits"] == {
        "time_limit_s": 60.0,
        "memory_bytes": 1 << 30,
        "cpus": 1.0,
        "pids": 256,
        "nofile": 1024,
        "output_bytes": 2 << 30,
        "tmp_bytes": 1 << 30,
        "log_bytes": 10 << 20,
    }
    assert local["sandbox"]["kind"] == "none" and local["sandbox"]["threads"] == 1
    assert sandboxed["sandbox"]["isolated"] is True and local["sandbox"]["isolated"] is False
    assert sandboxed["subject"] == local["subject"] == {"kind": "onnx", "name": "tiny-lookup", "digest": {"sha256": submission_digest(submission)}}
    for name in ONNX_TASKS:
        docker_task, local_task = sandboxed["tasks"][name], local["tasks"][name]
        assert docker_task["status"] == local_task["status"] == "scored"
        assert_same_measures(docker_task["measures"], local_task["measures"])
        assert docker_task["queries"] == local_task["queries"]
        assert docker_task["encoding"] == local_task["encoding"]
    assert 0 < sandboxed["tasks"]["alpha"]["measures"]["NDCG@10"] < 1  # a discriminating comparison
    assert math.isclose(sandboxed["aggregate"]["score"], local["aggregate"]["score"], abs_tol=1e-12)
    # What each grade cost: different by design (the one block that may differ), bounded by the schema.
    for name in ONNX_TASKS:
        assert_container_cost(sandboxed["cost"]["tasks"][name])
        assert local["cost"]["tasks"][name]["measured_by"].startswith("wait4")
    guard.verify()


def assert_container_cost(entry: dict[str, Any]) -> None:
    """A container's cost entry: wall seconds; CPU and peak memory from its cgroup where visible, else null with the reason."""
    assert entry["wall_s"]["encode"] is not None and entry["tokens"] is None and "tokens" in entry["missing"]
    visible = cgroup_visible()
    for figure in ("cpu_s", "peak_memory_bytes"):
        if visible:
            assert entry[figure] is not None and entry[figure] >= 0, (figure, entry)
            assert entry["measured_by"].startswith("cgroup v")
        else:
            assert entry[figure] is None and entry["missing"][figure], (figure, entry)


def cgroup_visible() -> bool:
    """Whether this machine's Docker containers' cgroups are visible to the grader (the cgroup v1 or v2 layouts it reads)."""
    root = Path("/sys/fs/cgroup")
    return any((root / sub).is_dir() for sub in ("system.slice", "docker", "cpuacct/docker", "memory/docker"))


@pytest.fixture
def scripted_bench(tmp_path: Path) -> Path:
    """A benchmark whose tasks are named after behaviours of the ``scripted`` image."""
    return write_benchmark(tmp_path / "scripted-bench", ["nan", "valid", "half", "duplicate"])


@pytest.mark.docker(image_of("scripted"))
def test_a_failing_task_is_reported_and_the_others_still_score(guard: HostGuard, docker_engine, tmp_path: Path, scripted_bench: Path) -> None:  # type: ignore[no-untyped-def]
    submission = docker_submission(tmp_path / "scripted-sub", image_of("scripted"))
    out = tmp_path / "out"
    tagged_before = image_id_of(docker_engine, image_of("scripted"))
    invoke("run", submission, "--benchmark", scripted_bench, "--tasks", "nan,valid,half", "--sandbox", "docker", "--out", out, "--quiet", *LIMITS)
    report = read_report(out)
    assert report["sandbox"]["kind"] == "docker"
    assert report["sandbox"]["image"] in (tagged_before, image_id_of(docker_engine, image_of("scripted")))
    assert report["subject"]["kind"] == "docker-image" and report["subject"]["image"] == image_of("scripted")
    nan, valid, half = (report["tasks"][name] for name in ("nan", "valid", "half"))
    assert nan["status"] == "failed"
    assert nan["failure"]["code"] == "OUTPUT_INVALID"
    assert nan["failure"]["message"] == "/output/run.jsonl:1: NaN is not a valid score (scores must be finite numbers)"
    assert nan["measures"] == {}
    assert valid["status"] == "scored" and valid["failure"] is None
    assert valid["measures"]["NDCG@10"] == 1.0
    assert half["status"] == "scored"
    assert half["measures"]["NDCG@10"] == 0.5  # two of four queries answered; the others count 0 (strict)
    assert half["queries"] == {"judged": 4, "answered": 2, "missing": 2, "extra": 0}
    assert report["aggregate"]["score"] is None  # a failed task leaves no benchmark score
    # A failed container cost its resources too: measured as the others; only scoring did not happen.
    assert_container_cost(report["cost"]["tasks"]["nan"])
    assert report["cost"]["tasks"]["nan"]["wall_s"]["score"] is None and "score_s" in report["cost"]["tasks"]["nan"]["missing"]
    assert sorted(p.name for p in (out / "logs").iterdir()) == ["half.log", "nan.log", "valid.log"]
    assert "scripted: behaviour 'nan'" in (out / "logs" / "nan.log").read_text(encoding="utf-8")
    guard.verify()


# --------------------------------------------------------------------------- grader check


def check(submission: Path, benchmark: Path | str, tasks: str, *, expect: int, limits: list[str] = LIMITS) -> dict[str, Any]:
    result = invoke("check", submission, "--benchmark", benchmark, "--tasks", tasks, "--sandbox", "docker", "--json", *limits, expect=expect)
    return json.loads(result.stdout)


def failed_step(report: dict[str, Any]) -> dict[str, Any]:
    """The one failed step; everything before it passed, everything after it did not run."""
    statuses = [step["status"] for step in report["steps"]]
    assert statuses.count("failed") == 1, statuses
    index = statuses.index("failed")
    assert statuses[:index] == ["passed"] * index and statuses[index + 1 :] == ["not run"] * (len(statuses) - index - 1), statuses
    assert report["passed"] is False
    return report["steps"][index]


@pytest.mark.docker(image_of("rootuser"))
def test_check_stops_a_root_image_at_intake(guard: HostGuard, tmp_path: Path, scripted_bench: Path) -> None:
    submission = docker_submission(tmp_path / "root-sub", image_of("rootuser"))
    step = failed_step(check(submission, scripted_bench, "valid", expect=1))
    assert step["step"] == "intake"
    assert step["reason"] == f"IMAGE_INVALID: image {image_of('rootuser')!r} runs as root (USER is ''); set a non-root USER"
    assert "USER" in step["hint"]
    guard.verify()


@pytest.mark.docker(image_of("silent"))
def test_check_stops_a_silent_image_at_output_validation(guard: HostGuard, tmp_path: Path, scripted_bench: Path) -> None:
    submission = docker_submission(tmp_path / "silent-sub", image_of("silent"))
    step = failed_step(check(submission, scripted_bench, "valid", expect=1))
    assert step["step"] == "output validation"
    assert step["details"] == ["valid: /output/run.jsonl: was not written (OUTPUT_MISSING)"]
    guard.verify()


@pytest.mark.docker(image_of("scripted"))
def test_check_reports_missing_queries_at_output_validation(guard: HostGuard, tmp_path: Path, scripted_bench: Path) -> None:
    submission = docker_submission(tmp_path / "scripted-sub", image_of("scripted"))
    step = failed_step(check(submission, scripted_bench, "half", expect=1))
    assert step["step"] == "output validation"
    # The container saw pseudonyms under a fresh key (docs/protocol.md): the message names the one it missed.
    assert len(step["details"]) == 1
    assert re.fullmatch(
        r"half: /output/run\.jsonl: answers 2 of 4 queries; missing ones \(e\.g\. 'q[0-9a-f]{24}'\) score 0 under the strict policy",
        step["details"][0],
    )
    guard.verify()


@pytest.mark.docker(image_of("scripted"))
def test_check_points_at_a_duplicate_hit(guard: HostGuard, tmp_path: Path, scripted_bench: Path) -> None:
    submission = docker_submission(tmp_path / "scripted-sub", image_of("scripted"))
    step = failed_step(check(submission, scripted_bench, "duplicate", expect=1))
    assert step["step"] == "output validation"
    assert len(step["details"]) == 1  # the document as the container named it: a pseudonym (docs/protocol.md)
    assert re.fullmatch(r"duplicate: /output/run\.jsonl:1: /hits/1/id: document 'd[0-9a-f]{24}' appears twice", step["details"][0])
    guard.verify()


@pytest.mark.docker(image_of("scripted"))
def test_check_passes_a_valid_image(guard: HostGuard, tmp_path: Path, scripted_bench: Path) -> None:
    submission = docker_submission(tmp_path / "scripted-sub", image_of("scripted"))
    report = check(submission, scripted_bench, "valid", expect=0)
    assert [step["status"] for step in report["steps"]] == ["passed"] * 6 and report["passed"] is True
    score = next(step for step in report["steps"] if step["step"] == "sample score")
    assert score["data"]["scores"] == {"valid": 1.0}
    guard.verify()


@pytest.mark.slow
@pytest.mark.docker(BM25_IMAGE)
def test_check_passes_the_bm25_example(guard: HostGuard) -> None:
    submission = REPO / "submissions_example" / "docker-bm25"
    guard.watch(submission)
    report = check(submission, "mini", "text2code", expect=0, limits=["--time-limit", "120", "--memory", "1g", "--cpus", "2"])
    assert [(step["step"], step["status"]) for step in report["steps"]] == [
        ("archive and manifest", "passed"),
        ("intake", "passed"),
        ("sample run", "passed"),
        ("output validation", "passed"),
        ("sample score", "passed"),
        ("estimate", "passed"),
    ]
    assert report["steps"][1]["data"] == {"sandbox": "docker"}
    score = report["steps"][4]["data"]
    assert score["measure"] == "NDCG@10" and 0.2 < score["scores"]["text2code"] < 0.6
    guard.verify()


@pytest.fixture(scope="module")
def scripted_tar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``docker save`` of the scripted image, by ID (loading it back re-tags nothing)."""
    from tests.sandbox_support import require_docker

    client = require_docker([image_of("scripted")])
    if shutil.which("docker") is None:
        unavailable("the docker CLI is not installed (needed for `docker save`)")
    path = tmp_path_factory.mktemp("image-tar") / "scripted.tar"
    subprocess.run(["docker", "save", client.images.get(image_of("scripted")).id, "-o", str(path)], check=True, capture_output=True, timeout=120)
    return path


@pytest.mark.docker(image_of("scripted"))
def test_check_passes_a_tar_inside_the_submission(guard: HostGuard, docker_engine, tmp_path: Path, scripted_bench: Path, scripted_tar: Path) -> None:  # type: ignore[no-untyped-def]
    submission = docker_submission(tmp_path / "tar-sub", "image/scripted.tar")
    (submission / "image").mkdir()
    shutil.copy(scripted_tar, submission / "image" / "scripted.tar")
    report = check(submission, scripted_bench, "valid", expect=0)
    assert [step["status"] for step in report["steps"]] == ["passed"] * 6
    assert report["steps"][1]["reason"].startswith("image image/scripted.tar (sha256:")
    guard.verify()


@pytest.mark.docker(image_of("scripted"))
@pytest.mark.parametrize("where", ["parent", "absolute", "link"])
def test_check_refuses_a_tar_outside_the_submission(guard: HostGuard, tmp_path: Path, scripted_bench: Path, scripted_tar: Path, where: str) -> None:
    """A manifest may not make the grader read (and docker load) a file of the host outside the submission."""
    outside = tmp_path / "outside.tar"
    shutil.copy(scripted_tar, outside)
    submission = tmp_path / "sub"
    submission.mkdir()
    reference = {"parent": "../outside.tar", "absolute": str(outside), "link": "inner.tar"}[where]
    if where == "link":
        (submission / "inner.tar").symlink_to(outside)
    docker_submission(submission, reference)
    step = failed_step(check(submission, scripted_bench, "valid", expect=1))
    if where == "link":  # links are refused with the submission itself, before intake
        assert step["step"] == "archive and manifest"
        assert step["reason"].endswith("inner.tar: symbolic links are not allowed in a submission")
    else:
        assert step["step"] == "intake"
        assert step["reason"] == f"IMAGE_INVALID: image {reference!r}: a docker save .tar must be a file inside the submission"
    guard.verify()


@pytest.mark.parametrize("reference", ["Upper-Case:1", "two words"])
def test_check_calls_a_malformed_reference_the_submissions_fault(guard: HostGuard, tmp_path: Path, scripted_bench: Path, reference: str) -> None:
    submission = docker_submission(tmp_path / "bad-ref", reference)
    step = failed_step(check(submission, scripted_bench, "valid", expect=1))
    assert step["step"] == "intake"
    assert step["reason"].startswith(f"IMAGE_INVALID: {reference!r} is not a valid image reference: ")
    guard.verify()
