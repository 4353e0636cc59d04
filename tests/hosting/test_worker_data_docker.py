"""The CAT id-pattern and position attacks of tests/test_sandbox_blinding.py, against a worker that holds only the exported copy.

On CAT-shaped data (query ``q-<n>`` answered by document ``c-<n>``, the corpus in id
order) the cheating image answers by id pattern or by position; without blinding it
scores 1.0. A worker ranks the server's pseudonymous copy (it never holds the key or
a real id), the server maps its runs back and scores them: both attacks score at the
random level (bound 0.05: tests/test_sandbox_blinding.py's module docstring derives it).
"""

from __future__ import annotations

import hashlib
import json
import random
import tarfile
from pathlib import Path

import pytest

from grader.data.benchmark import load_benchmark_folder
from grader.data.task import Document, Query
from grader.grading.scoring import report_from_runs
from grader.hosting.config import DEPTH
from grader.hosting.protocol.worker_data import copy_key, export_worker_data, pseudonymous_judged
from grader.hosting.results.grading_adapter import GradeRequest, grade_upload
from grader.hosting.results.run_scoring import HOSTED_POLICY
from grader.metrics.measures import parse_measure
from grader.sandbox.blinding import BlindingKey
from grader.sandbox.limits import SandboxLimits
from tests.sandbox_support import docker_submission, image_of, require_docker, write_beir_task

CHEATER = image_of("cheater")
pytestmark = [pytest.mark.docker(CHEATER), pytest.mark.slow]
KEY = BlindingKey(hashlib.sha256(b"tests/hosting/test_worker_data_docker.py").digest())
N = 300
RANDOM_BOUND = 0.05
TASKS = ["by-id", "by-position"]


def test_a_worker_with_the_copy_cannot_answer_by_id_pattern_or_position(tmp_path: Path, docker_engine) -> None:  # type: ignore[no-untyped-def]
    require_docker([CHEATER])
    rng = random.Random(7)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
    documents = [Document(f"c-{n:04d}", "", " ".join(rng.choices(words, k=8))) for n in range(N)]
    queries = [Query(f"q-{n:04d}", " ".join(rng.choices(words, k=4))) for n in range(N)]
    qrels = {f"q-{n:04d}": {f"c-{n:04d}": 1} for n in range(N)}
    bench = tmp_path / "bench"
    for name in TASKS:
        write_beir_task(bench / name, documents=documents, queries=queries, qrels=qrels, splits=("test",))
    (bench / "benchmark.json").write_text(json.dumps({"name": "cat-shaped", "version": "1", "primary_measure": "MRR@10", "tasks": TASKS}))
    source = load_benchmark_folder(bench)
    copy = tmp_path / "worker-data"
    export_worker_data(source, TASKS, ["test"], KEY, copy)
    upload = tmp_path / "upload.tar.gz"
    with tarfile.open(upload, "w:gz") as tar:
        tar.add(docker_submission(tmp_path / "cheat", CHEATER), arcname="cheat")
    request = GradeRequest(
        benchmark=str(copy),
        tasks=TASKS,
        split="test",
        limits=SandboxLimits(time_limit_s=120, memory_bytes=512 << 20, cpus=1),
        judged={name: pseudonymous_judged(KEY, name, qrels) for name in TASKS},
        blinding_key=copy_key(copy),
    )
    outcome = grade_upload(upload, request, tmp_path / "work")
    assert outcome.failure_code is None and outcome.facts is not None, outcome.message
    report = report_from_runs(
        source,
        split="test",
        tasks=TASKS,
        facts=outcome.facts,
        runs={name: outcome.runs[name].read_bytes() for name in TASKS},
        measures=[parse_measure("MRR@10")],
        policy=HOSTED_POLICY,
        top_k=DEPTH,
        key=KEY,
    )
    scores = {name: report["tasks"][name]["measures"]["MRR@10"] for name in TASKS}
    assert all(entry["status"] == "scored" for entry in report["tasks"].values()) and all(v < RANDOM_BOUND for v in scores.values()), scores
    # The container's log names the first staged ids: pseudonyms, never the benchmark's.
    log = outcome.logs["by-id"]
    assert "q-0" not in log and "c-0" not in log
