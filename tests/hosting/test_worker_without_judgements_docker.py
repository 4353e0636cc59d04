"""A worker with only the exported copy (pseudonymous ids, no judgements) ranks in the real sandbox; the server maps back and scores."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from grader.data.registry import resolve_benchmark
from grader.grading.scoring import report_from_runs
from grader.hosting.config import DEPTH
from grader.hosting.protocol.worker_data import copy_key, export_worker_data, pseudonymous_judged
from grader.hosting.results.grading_adapter import GradeRequest, grade_upload
from grader.hosting.results.run_scoring import HOSTED_POLICY
from grader.metrics.measures import parse_measure
from grader.sandbox.blinding import BlindingKey
from grader.sandbox.limits import SandboxLimits
from tests.hosting.support import REPO
from tests.sandbox_support import RUNNER_IMAGE, require_docker

pytestmark = [pytest.mark.docker(RUNNER_IMAGE), pytest.mark.slow]
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"


def test_a_worker_without_qrels_ranks_and_the_server_scores(tmp_path: Path, docker_engine) -> None:  # type: ignore[no-untyped-def]
    require_docker([RUNNER_IMAGE])
    benchmark = resolve_benchmark("mini")
    key = BlindingKey(bytes(range(32)))
    worker_data = tmp_path / "worker-data"
    export_worker_data(benchmark, ["text2code"], ["test"], key, worker_data)
    assert not list(worker_data.rglob("*.tsv*"))
    upload = tmp_path / "upload.tar.gz"
    with tarfile.open(upload, "w:gz") as tar:
        tar.add(EXAMPLE, arcname="onnx-lsa")
    tasks = ["text2code"]
    judged = {name: pseudonymous_judged(key, name, benchmark.task(name).qrels("test")) for name in tasks}
    request = GradeRequest(
        benchmark=str(worker_data),
        tasks=tasks,
        split="test",
        limits=SandboxLimits(time_limit_s=120, memory_bytes=2 << 30, cpus=1),
        judged=judged,
        blinding_key=copy_key(worker_data),
    )
    outcome = grade_upload(upload, request, tmp_path / "work")
    assert outcome.failure_code is None, outcome.message
    assert outcome.facts is not None and set(outcome.runs) == set(tasks)
    stated = json.dumps(outcome.facts)
    assert "measures" not in stated and "per_query" not in stated and "aggregate" not in stated  # nothing to score with, nothing scored
    assert outcome.facts["sandbox"]["blinding"] == key.report()  # the copy's key, named by its id (the worker never held it)
    report = report_from_runs(
        benchmark,
        split="test",
        tasks=tasks,
        facts=outcome.facts,
        runs={name: outcome.runs[name].read_bytes() for name in tasks},
        measures=[parse_measure("NDCG@10")],
        policy=HOSTED_POLICY,
        top_k=DEPTH,
        key=key,
    )
    entry = report["tasks"]["text2code"]
    assert entry["status"] == "scored" and entry["queries"]["answered"] == len(judged["text2code"]) and 0 < entry["measures"]["NDCG@10"] <= 1
    assert set(entry["per_query"]["values"]) == set(benchmark.task("text2code").qrels("test"))  # mapped back to the real ids
