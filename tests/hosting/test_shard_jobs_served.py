"""Sharded ONNX grades through `grader serve`: shard jobs in the database, run in the runner container by two local workers.

One server (SQLite) with ``[sharding] shard_documents`` set and two local workers. The benchmark
is one task built here from mini's three corpora plus 6,000 of their texts again under other ids
(16,928 documents: three shards of whole 8,192-document encoding chunks; the repeated texts give
equal vectors, hence score ties that a cut under the workers' pseudonyms would break otherwise
than a cut under the real ids), with mini's text2code queries. Each shard job stages its shard of
the workers' pseudonymous copy, encodes it in the runner image's container and searches it.

* The example ONNX encoder is graded while one shard job's process is killed (SIGKILL): that job
  alone runs again (its second try), and the served report equals ``grader run`` of the same
  submission without sharding, measure for measure and per-query value for per-query value.
* The output cap (``[limits] output``, 32 MiB here) applies per container: a model of 4,096
  dimensions has its query vectors (14 MB) returned, but a shard's 8,192 document vectors (134 MB)
  exceed it: that shard's container fails with ``OUTPUT_TOO_LARGE``, the task fails with that
  code, and the submission is charged one attempt. (The example's shards are 12.6 MB.)
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from grader.data.registry import resolve_benchmark
from grader.data.task import Document, Query
from grader.data.writers import write_task
from grader.hosting.db.models import ShardJob, Submission
from grader.hosting.db.session import open_database
from grader.hosting.participant.client import HostingClient
from tests.hosting.support import REPO, Server, admin, grader_cli, write_competition
from tests.onnx_models import embedding_table, onnx_submission

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
#: Documents of the task: three shards at 8,192 documents a chunk (the default encoding chunk).
SHARDS = 3


def _three_shard_benchmark(root: Path) -> Path:
    """One task "big": mini's corpora (ids prefixed by their task) and 6,000 of their texts again under new ids; text2code's queries."""
    mini = resolve_benchmark("mini")
    corpus: list[Document] = []
    for name in mini.spec.tasks:
        corpus += [Document(f"{name}-{d.id}", d.title, d.text) for d in mini.task(name).iter_corpus()]
    corpus += [Document(f"again-{n:05d}", d.title, d.text) for n, d in enumerate(corpus[:6000])]
    source = mini.task("text2code")
    queries = [Query(q.id, q.text) for q in source.iter_queries()]
    qrels = {
        split: {query: {f"text2code-{doc}": grade for doc, grade in judged.items()} for query, judged in source.qrels(split).items()}
        for split in ("test", "dev")
    }
    write_task(root / "big", corpus, queries, qrels)
    spec = {"name": "big", "version": "1", "primary_measure": "NDCG@10", "tasks": ["big"]}
    (root / "benchmark.json").write_text(json.dumps(spec), encoding="utf-8")
    return root


def _kill_a_shard_process(server: Server, submission_id: str, timeout: float = 300) -> int:
    """SIGKILL a forked child of a local worker once the submission's query job is done: a shard job's process then (a
    sharded grade forks nothing else, and the query job's child has exited before its job is marked done). Killing
    earlier would hit the query job's short process or none, at random: worker protocol 5 runs shards beside it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _attempt, jobs = _shard_jobs(server.state, submission_id)
        if any(job.number == -1 and job.state == "done" for job in jobs):
            workers = set(server.worker_pids())
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if int(stat[stat.rindex(")") + 2 :].split()[1]) in workers:
                    os.kill(int(entry.name), signal.SIGKILL)
                    return int(entry.name)
        time.sleep(0.02)
    raise AssertionError("no shard process seen")


def _shard_jobs(state: Path, submission_id: str) -> tuple[int, list[ShardJob]]:
    db = open_database(state, None)
    try:
        with db.session() as session:
            submission = session.get(Submission, submission_id)
            assert submission is not None
            return submission.attempt, list(session.scalars(select(ShardJob).where(ShardJob.submission_id == submission_id)).all())
    finally:
        db.dispose()


def _served_report(server: Server, submission_id: str, env: dict[str, str], folder: Path) -> dict[str, Any]:
    got = grader_cli("status", submission_id, "--report", str(folder / f"{submission_id}.dsse.json"), "--server", server.url, env=env)
    assert got.returncode == 0, got.stderr
    verified = grader_cli("verify", str(folder / f"{submission_id}.dsse.json"), "--key", str(folder / "host.pub"), "--json")
    assert verified.returncode == 0, verified.stderr
    return dict(json.loads(verified.stdout))


def test_a_sharded_grade_serves_the_unsharded_report_a_killed_shard_runs_again_alone_and_a_failing_shard_fails_its_task(tmp_path: Path) -> None:
    benchmark = _three_shard_benchmark(tmp_path / "bench")
    # A lease long enough that a loaded machine's late heartbeat never hands a job on: only the killed one runs twice.
    tables = {"sharding": {"shard_documents": 1000}, "limits": {"output": "32m"}, "queue": {"lease_s": 30, "heartbeat_s": 2}}
    competition = write_competition(tmp_path / "c.toml", benchmark=str(benchmark), tables=tables)
    failing = onnx_submission(tmp_path / "wide", table=embedding_table(dim=4096, seed=4))
    server = Server(competition, tmp_path / "state", workers=2).start()
    try:
        token = admin(server.state, "add-participant", "alice").strip()
        alice = {"GRADER_TOKEN": token}
        client = HostingClient(server.url, token)
        killed_id = client.submit(EXAMPLE)["id"]
        _kill_a_shard_process(server, killed_id)
        assert client.wait(killed_id, poll_s=0.2, timeout_s=300)["state"] == "scored", server.log.read_text()[-3000:]
        failing_id = client.submit(failing)["id"]
        client.wait(failing_id, poll_s=0.2, timeout_s=300)
        direct = grader_cli(
            "run", str(EXAMPLE), "--benchmark", str(benchmark), "--split", "test", "--sandbox", "none", "--out", str(tmp_path / "direct")
        )
        assert direct.returncode == 0, direct.stderr
        expected = json.loads((tmp_path / "direct" / "report.json").read_text())
        (tmp_path / "host.pub").write_bytes(httpx.get(f"{server.url}/host-key.pub").content)
        admin(server.state, "end", "--yes")
        report, failed = (_served_report(server, submission_id, alice, tmp_path) for submission_id in (killed_id, failing_id))
    finally:
        server.stop()
    assert report["aggregate"] == expected["aggregate"]
    # run_digest too: the server digests the merged run of three shards under the real ids, as a direct run digests its own.
    for key in ("measures", "per_query", "queries", "run_digest"):
        assert report["tasks"]["big"][key] == expected["tasks"]["big"][key], key
    assert report["subject"]["digest"] == expected["subject"]["digest"]
    sandbox = report["sandbox"]
    assert (sandbox["kind"], sandbox["network"], sandbox["isolated"], sandbox["sharded"]) == ("docker", "none", True, True)
    attempt, jobs = _shard_jobs(server.state, killed_id)
    assert attempt == 1  # charged once: one attempt; its shard jobs are rows of it
    assert sorted(job.number for job in jobs) == list(range(-1, SHARDS))
    assert all(job.state == "done" for job in jobs) and len({job.fingerprint for job in jobs}) == 1
    # Charged tries: the killed shard's second, and no other job's.
    assert sorted(job.tries - job.unused for job in jobs) == [1] * SHARDS + [2], [(j.number, j.tries, j.unused, j.message) for j in jobs]

    assert failed["tasks"]["big"]["status"] == "failed"
    assert failed["tasks"]["big"]["failure"]["code"] == "OUTPUT_TOO_LARGE", failed["tasks"]["big"]["failure"]
    attempt, jobs = _shard_jobs(server.state, failing_id)
    assert attempt == 1  # charged once
    states = [(j.number, j.state, j.failure_code) for j in jobs]
    # A shard starts beside its query job (worker protocol 5), so it may fail before the query job ends: the query job
    # is then done, or told at its next renewal that its task failed (running until then, skipped after).
    assert any(n == -1 and state in ("done", "running", "skipped") and code is None for n, state, code in states), states
    assert any(n >= 0 and code == "OUTPUT_TOO_LARGE" for n, _state, code in states), states
