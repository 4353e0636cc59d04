"""A container's ``/output/progress.json``: read while it runs, forwarded as ``encoding N of M``, never trusted.

The file is optional (docs/protocol.md). The host looks at it about once a second and once after
the container ended (:mod:`grader.sandbox.progress_file`); a count above the task's documents, a
count going down, a link, a FIFO, a folder, a large or malformed file are ignored, and none of it
changes how the task ends. The reader is checked on files here; the real runs use the
``progress`` test image (tests/sandbox_images/progress) and the runner image (ONNX).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from grader.data.benchmark import load_benchmark_folder
from grader.grading.interfaces import RunOptions, SilentProgress, load_task_inputs
from grader.grading.sandboxed import DockerTaskGrader, run_and_collect
from grader.hosting.protocol.messages import Phase
from grader.hosting.results.grade_progress import GradeProgress, read_progress
from grader.sandbox.progress_file import MAX_PROGRESS_BYTES, PROGRESS_FILE, ProgressWatch, image_step, read_progress_count
from grader.submissions.manifest import load_manifest
from tests.cli_support import invoke
from tests.onnx_models import onnx_submission
from tests.sandbox_support import (
    DOCUMENTS,
    RUNNER_IMAGE,
    TEST_BLINDING_KEY,
    HostGuard,
    docker_submission,
    image_of,
    small_limits,
    stage_small,
    write_benchmark,
)

PROGRESS_IMAGE = image_of("progress")


# --------------------------------------------------------------------------- the reader (no container)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"encoded": 12}', 12),
        (b'{"encoded": 0}\n', 0),
        (b'{"encoded": -1}', None),
        (b'{"encoded": true}', None),
        (b'{"encoded": 1.5}', None),
        (b'{"encoded": "12"}', None),
        (b'{"encoded": 1, "of": 2}', None),
        (b'{"encoded": 1, "encoded": 2}', None),
        (b"[12]", None),
        (b"12", None),
        (b"", None),
        (b"\xff\xfe", None),
        (b'{"encoded": NaN}', None),
        (b'{"encoded": 1' + b"0" * 5000 + b"}", None),
        (b'{"encoded": 1}' + b" " * MAX_PROGRESS_BYTES, None),
    ],
)
def test_only_a_small_strict_count_is_read(tmp_path: Path, content: bytes, expected: int | None) -> None:
    (tmp_path / PROGRESS_FILE).write_bytes(content)
    assert read_progress_count(tmp_path) == expected


def test_links_fifos_folders_and_huge_files_are_not_read(tmp_path: Path) -> None:
    path = tmp_path / PROGRESS_FILE
    assert read_progress_count(tmp_path) is None  # absent
    valid = tmp_path / "elsewhere.json"
    valid.write_bytes(b'{"encoded": 3}')
    path.symlink_to(valid)
    assert read_progress_count(tmp_path) is None  # a link, even to a valid file
    path.unlink()
    os.mkfifo(path)
    assert read_progress_count(tmp_path) is None  # no writer: a blocking open would hang here
    path.unlink()
    path.mkdir()
    assert read_progress_count(tmp_path) is None
    path.rmdir()
    with open(path, "wb") as handle:
        handle.truncate(1 << 30)  # sparse: 1 GiB claimed, nothing read
    assert read_progress_count(tmp_path) is None


def test_the_watch_passes_on_increases_within_the_total_in_steps(tmp_path: Path) -> None:
    added: list[int] = []
    watch = ProgressWatch(tmp_path, total=100, advance=added.append, step=image_step(100))
    assert watch.step == 5
    for said in (3, 7, 7, 200, 101, 4, 12, 99, 100, 100):
        (tmp_path / PROGRESS_FILE).write_bytes(f'{{"encoded": {said}}}'.encode())
        watch.poll()
    # 3 rounds to 0 (nothing); 7 -> 5; above the total and going down: ignored; 12 -> 10; 99 -> 95; the total itself stays.
    assert added == [5, 5, 85, 5]
    assert watch.shown == 100
    assert image_step(0) == 1 and image_step(19) == 1 and image_step(21) == 2


# --------------------------------------------------------------------------- real containers


class Recorder(SilentProgress):
    """A listener that keeps each task's cumulative count of encoded documents, and tells a worker's listener too."""

    def __init__(self, worker: GradeProgress) -> None:
        self.worker = worker
        self.counts: dict[str, list[int]] = {}
        self.totals: dict[str, int] = {}

    def progress(self, label: str, total: int) -> Any:
        seen = self.counts.setdefault(label, [])
        self.totals[label] = total
        worker = self.worker.progress(label, total)

        def advance(count: int) -> None:
            assert count > 0, "only increases are passed on"
            seen.append((seen[-1] if seen else 0) + count)
            worker(count)

        return advance

    def stage(self, task: str, stage: str) -> None:
        self.worker.stage(task, stage)


def _run(guard: HostGuard, task: str) -> list[int]:
    staged = stage_small(guard.root / "input", task=task)
    guard.watch(staged.folder)
    scratch = guard.root / "scratch"
    scratch.mkdir(exist_ok=True)
    counts: list[int] = []

    def advance(count: int) -> None:
        counts.append((counts[-1] if counts else 0) + count)

    output = run_and_collect(
        PROGRESS_IMAGE,
        staged,
        mode="retrieve",
        limits=small_limits(time_limit_s=60.0),
        log_path=guard.root / "logs" / f"{task}.log",
        scratch=scratch,
        on_encoded=advance,
    )
    assert output.outputs.run is not None and output.outcome.exit_code == 0  # the grade went on, whatever the file said
    assert list(scratch.iterdir()) == []
    return counts


@pytest.mark.slow
@pytest.mark.docker(PROGRESS_IMAGE)
@pytest.mark.usefixtures("docker_engine")
def test_a_container_s_counts_reach_the_listener_while_it_runs(guard: HostGuard) -> None:
    counts = _run(guard, "steps")
    total = len(DOCUMENTS)
    assert counts == sorted(set(counts)) and counts[-1] == total, counts
    assert len(counts) >= 2, f"no count seen while the container ran: {counts}"
    assert set(counts) <= {total // 4, total // 2, 3 * total // 4, total}
    guard.verify()


@pytest.mark.slow
@pytest.mark.docker(PROGRESS_IMAGE)
@pytest.mark.usefixtures("docker_engine")
def test_a_hostile_progress_file_is_ignored_and_fails_nothing(guard: HostGuard) -> None:
    counts = _run(guard, "hostile")
    # Above the total, garbage, too large, a link (to a file saying the total), a FIFO, a folder, a decrease: ignored.
    # Only the half is a valid count; a look may miss it, never show more.
    assert counts in ([], [len(DOCUMENTS) // 2]), counts
    guard.verify()


@pytest.mark.slow
@pytest.mark.docker(RUNNER_IMAGE)
@pytest.mark.usefixtures("docker_engine")
def test_the_runner_image_reports_its_documents_encoded(guard: HostGuard, tmp_path: Path) -> None:
    """An ONNX grade in the runner image: the listener hears ``encoded`` counts, increasing, ending at the corpus's size."""
    submission = onnx_submission(tmp_path / "model")
    benchmark = load_benchmark_folder(write_benchmark(tmp_path / "bench", ["alpha"]))
    options = RunOptions(
        benchmark=benchmark,
        tasks=["alpha"],
        split="test",
        out_dir=tmp_path / "out",
        sandbox="docker",
        limits=small_limits(time_limit_s=60.0, memory_bytes=512 << 20),
        blinding_key=TEST_BLINDING_KEY,
        top_k=10,
    )
    grader = DockerTaskGrader.prepare(submission, load_manifest(submission), options, runner_image=RUNNER_IMAGE)
    inputs = load_task_inputs(benchmark.task("alpha"), "test")
    heartbeat = tmp_path / "progress.json"
    worker = GradeProgress(["alpha"], heartbeat)
    worker.task_started("alpha", documents=len(inputs.documents), queries=len(inputs.queries))
    recorder = Recorder(worker)
    ranked = grader.rank(inputs, options, recorder)
    assert ranked.corpus_vectors is not None
    counts = recorder.counts.get("alpha: corpus")
    # A runner image built before containers could report progress says nothing: rebuild it (images/runner/build.sh).
    assert counts, f"no count of documents encoded from {RUNNER_IMAGE} (rebuild it: images/runner/build.sh)"
    assert counts == sorted(set(counts)) and counts[-1] == len(inputs.documents) == recorder.totals["alpha: corpus"], counts
    # What a hosted worker's heartbeat sends: the task searching, all its documents encoded.
    (sent,) = read_progress(heartbeat)
    assert (sent.phase, sent.documents, sent.encoded) == (Phase.SEARCHING, len(inputs.documents), len(inputs.documents))
    guard.verify()


@pytest.mark.slow
@pytest.mark.docker(PROGRESS_IMAGE)
@pytest.mark.usefixtures("docker_engine")
def test_grader_run_shows_a_container_s_count(guard: HostGuard, tmp_path: Path) -> None:
    """``grader run --sandbox docker``: the progress line of the corpus comes from the container's file (the task named ``steps``)."""
    bench = write_benchmark(tmp_path / "bench", ["steps"])
    submission = docker_submission(tmp_path / "sub", PROGRESS_IMAGE)
    result = invoke("run", submission, "--benchmark", bench, "--sandbox", "docker", "--out", tmp_path / "out", "--time-limit", "60", "--cpus", "1")
    total = len(DOCUMENTS)
    assert f"steps: corpus: {total}/{total} (100%" in result.stderr, result.stderr
    guard.verify()
