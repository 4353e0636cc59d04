"""A short Docker outage does not end a sharded grade: through a real `grader serve`, its local workers and an engine cut.

Before: the engine restarted for about 20 s during a sharded grade; one shard used all 3 of its tries within seconds,
the attempt was retried twice within 6 s, and the submission ended ``error`` with 7 of its 8 shards done. Now a
platform failure waits out a backoff before its job is claimed again, is retried for ``[queue] infra_retry_s`` rather
than for a count of back-to-back tries, and a worker claims nothing while its engine does not answer. So the grade
whose engine comes back within that time completes, uncharged (one attempt), and only the jobs running at the cut
run twice: the done ones keep their outputs.

The engine's loss is a proxy in front of the machine's socket (tests/engine_proxy.py), which the server and its two
local workers reach through ``DOCKER_HOST``; cut as the shard job's container starts (its query job done), restored
after 20 s. The benchmark is one small task judged on ``test``: its query job and one shard job.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import select

from grader.data.task import Document, Query
from grader.data.writers import write_task
from grader.hosting.db.models import Attempt, ShardJob, Submission
from grader.hosting.db.session import open_database
from grader.hosting.participant.client import HostingClient
from tests.engine_proxy import EngineProxy
from tests.hosting.support import REPO, Server, admin, write_competition
from tests.sandbox_support import RUNNER_IMAGE, require_docker

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
#: How long the engine is away: the outage the issue saw.
OUTAGE_S = 20
#: A lease long enough that a loaded machine's late heartbeat hands nothing on; the retry time the default's.
QUEUE = {"lease_s": 30, "heartbeat_s": 2, "reap_every_s": 0.5, "infra_backoff_s": 2, "infra_retry_s": 600}


def _small_benchmark(root: Path) -> Path:
    """A folder benchmark of one task, "synth": 500 one-line functions (one shard), 10 queries judged on test."""
    corpus = [Document(f"d{n:05d}", "", f"def f{n}(x): return x * {n % 97} + {n % 89}") for n in range(500)]
    queries = [Query(f"q{n}", f"multiply x by {n} and add {n}") for n in range(10)]
    write_task(root / "synth", corpus, queries, {"test": {f"q{n}": {f"d{n:05d}": 1} for n in range(10)}})
    return root


def _rows(state: Path, submission_id: str) -> tuple[Submission, list[ShardJob], int]:
    """The submission, its shard jobs and its number of attempts, read from the server's database."""
    db = open_database(state, None)
    try:
        with db.session() as session:
            submission = session.get(Submission, submission_id)
            assert submission is not None
            jobs = list(session.scalars(select(ShardJob).where(ShardJob.submission_id == submission_id)))
            attempts = len(session.scalars(select(Attempt).where(Attempt.submission_id == submission_id)).all())
            session.expunge_all()
            return submission, jobs, attempts
    finally:
        db.dispose()


def _a_shard_runs(state: Path, submission_id: str, proxy: EngineProxy, timeout: float = 120) -> int:
    """Wait until the query vectors are in and the shard job's container starts; the containers started by then."""
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        if seen is None and (state / "grader.sqlite3").exists():
            _submission, jobs, _attempts = _rows(state, submission_id)
            if any(job.number == -1 and job.state == "done" for job in jobs):
                seen = len(proxy.containers)  # from now on a container started is a shard's
        elif seen is not None and len(proxy.containers) > seen:
            return len(proxy.containers)  # its try is used (the upload fetched): the cut costs it
        time.sleep(0.05)
    raise AssertionError("no shard job's container started")


def test_a_20_s_engine_outage_mid_grade_ends_scored_uncharged_and_runs_only_the_lost_jobs_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = require_docker([RUNNER_IMAGE])
    proxy = EngineProxy(tmp_path / "engine.sock")
    monkeypatch.setenv("DOCKER_HOST", proxy.docker_host)  # the server and its local workers reach the engine through it
    tables = {"sharding": {"shard_documents": 8192}, "queue": QUEUE}
    competition = write_competition(tmp_path / "c.toml", benchmark=str(_small_benchmark(tmp_path / "bench")), sample_split=None, tables=tables)
    # One worker: it runs the query job, then the shard (with two, the shard may start beside the query job, protocol 5,
    # and end before the cut this test needs in the middle of it).
    server = Server(competition, tmp_path / "state", workers=1).start()
    try:
        client = HostingClient(server.url, admin(server.state, "add-participant", "alice").strip())
        submission_id = client.submit(EXAMPLE)["id"]
        started = _a_shard_runs(server.state, submission_id, proxy)
        proxy.cut()
        time.sleep(OUTAGE_S)
        proxy.restore()
        final = client.wait(submission_id, poll_s=0.5, timeout_s=180)
        submission, jobs, attempts = _rows(server.state, submission_id)
    finally:
        server.stop()
        for container in proxy.containers:  # a container the cut left running in the machine's engine
            try:
                engine.containers.get(container).remove(force=True)
            except Exception:  # already gone
                pass
    assert final["state"] == "scored", server.log.read_text()[-3000:]
    assert (submission.attempt, attempts, submission.failure_code) == (1, 1, None)  # uncharged: one attempt, never retried whole
    assert sorted(job.number for job in jobs) == [-1, 0] and all(job.state == "done" for job in jobs), [(j.number, j.state) for j in jobs]
    query, shard = sorted(jobs, key=lambda job: job.number)
    # The query job was done before the cut and kept (its vectors searched by the shard's second try); the shard that
    # ran at the cut ran once more, not its 3 tries within seconds: the workers claimed nothing while the engine was away.
    assert (query.tries, shard.tries) == (1, 2), [(j.number, j.tries, j.message) for j in jobs]
    assert shard.infra_since is not None and started == 2
