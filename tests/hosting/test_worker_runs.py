"""Workers return rankings; the server scores: a worker cannot post a score, and a forged run is refused.

One server app (real routes, SQLite, the scoring child process) for the module. Each
job is a real hidden-split submission, claimed by the local worker, whose compact runs
are put through the worker route and whose result is posted through it.
"""

from __future__ import annotations

import csv
import io
import json
import struct
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from grader.data.registry import resolve_benchmark
from grader.grading.cost import RankCost, TaskCost, cost_block
from grader.hosting.api.app import create_app
from grader.hosting.clock import utcnow
from grader.hosting.config import Competition
from grader.hosting.db.models import Participant, Result, Submission
from grader.hosting.errors import RefusedSubmission
from grader.hosting.intake.quotas import check_quota, quota_status
from grader.runs.compact import HEADER_BYTES
from grader.sandbox.usage import ResourceUsage
from tests.hosting.leaderboard_world import make_world, seed
from tests.hosting.support import admin, worker_headers
from tests.hosting.world import World

pytestmark = pytest.mark.slow  # the server scores in a child process


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    built = make_world(tmp_path_factory.mktemp("worker-runs"), None)
    yield built
    built.ctx.db.dispose()


@pytest.fixture(scope="module")
def client(world: World) -> TestClient:
    return TestClient(create_app(world.ctx))


def _worker(world: World) -> dict[str, str]:
    return worker_headers(world.worker_token)


def _stored_report(world: World, submission_id: str) -> dict:  # type: ignore[type-arg]
    with world.ctx.db.session() as session:
        row = session.get(Submission, submission_id)
        assert row is not None and row.result_id is not None
        result = session.get(Result, row.result_id)
        assert result is not None and result.report_path is not None
        return json.loads(Path(result.report_path).read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_a_report_field_is_refused_outright(world: World, client: TestClient) -> None:
    forged = {"attempt": 1, "report": {"aggregate": {"score": 0.99}}}
    answer = client.post("/api/v1/worker/jobs/s0000000000000000/result", json=forged, headers=_worker(world))
    assert answer.status_code == 422 and "report" in answer.text and "Extra inputs are not permitted" in answer.text


def test_scores_a_worker_states_are_ignored_the_server_scores_the_ranking(world: World, client: TestClient) -> None:
    """A worker that puts 0.99 everywhere it can in its facts: the signed report holds only what the server computed."""
    stated_tasks = {
        name: {"failure": None, "measures": {"NDCG@10": 0.99}, "per_query": {"measure": "NDCG@10", "values": {"x": 0.99}}} for name in world.ctx.tasks
    }
    seeded = seed(world, "alice", "alice-states-scores", 0.5, through=client, stated={"aggregate": {"score": 0.99}, "tasks": stated_tasks})
    report = _stored_report(world, seeded.id)
    assert report["aggregate"]["score"] != 0.99
    assert all(entry["measures"]["NDCG@10"] != 0.99 and "x" not in entry["per_query"]["values"] for entry in report["tasks"].values())
    # the aggregate is the mean of the tasks' means of the per-query values the server computed
    assert report["aggregate"]["score"] == pytest.approx(seeded.full, abs=1e-12)
    assert {name: len(values) for name, values in seeded.values.items()} == {n: e["queries"]["judged"] for n, e in report["tasks"].items()}


def _first_hit(data: bytes) -> int:
    queries = struct.unpack_from("<I", data, 12)[0]
    return HEADER_BYTES + 8 * queries


def _outside_corpus(_task: str, data: bytes) -> bytes:
    documents = struct.unpack_from("<I", data, 8)[0]
    at = _first_hit(data)
    return data[:at] + struct.pack("<I", documents) + data[at + 4 :]


def _twice(_task: str, data: bytes) -> bytes:
    at = _first_hit(data)
    return data[: at + 4] + data[at : at + 4] + data[at + 8 :]


def _truncated(_task: str, data: bytes) -> bytes:
    return data[:-4]


def _other_depth(_task: str, data: bytes) -> bytes:
    return data[:16] + struct.pack("<I", 5) + data[20:]


@pytest.mark.parametrize("tamper", [_outside_corpus, _twice, _truncated, _other_depth], ids=lambda f: f.__name__.strip("_"))
def test_a_forged_run_is_refused_and_nothing_is_accepted(tmp_path: Path, tamper) -> None:  # type: ignore[no-untyped-def]
    world = make_world(tmp_path, None)  # its own queue: the refused job goes back to it
    client = TestClient(create_app(world.ctx))
    with world.ctx.db.session() as session:
        before = session.scalar(select(func.count()).select_from(Result))
    seed(world, "bob", f"bob-forged-{tamper.__name__}", 0.5, through=client, tamper=tamper, expect="requeued")
    with world.ctx.db.session() as session:
        assert session.scalar(select(func.count()).select_from(Result)) == before  # no report stored, none signed
        assert session.scalar(select(Submission.state).where(Submission.name == f"bob-forged-{tamper.__name__}")) == "queued"
    world.ctx.db.dispose()


def test_run_puts_are_bounded_and_held_to_the_lease(world: World, client: TestClient) -> None:
    seed(world, "carol", "carol-for-puts", 0.5)
    with world.ctx.db.session() as session:
        submission_id = session.scalar(select(Submission.id).where(Submission.name == "carol-for-puts"))
    task = world.ctx.tasks[0]
    url = f"/api/v1/worker/jobs/{submission_id}/runs/{task}"
    # accepted already: no lease is held, so nothing may be put for it
    assert client.put(url, params={"attempt": 1}, content=b"GRUN", headers=_worker(world)).status_code == 409
    # a body declared past the largest task's bound is answered 413 before a byte is read
    too_big = max(world.ctx.run_body_bytes.values()) + 1
    answer = client.put(url, params={"attempt": 1}, content=b"", headers={**_worker(world), "Content-Length": str(too_big)})
    assert answer.status_code == 413
    # a task the job does not grade
    assert client.put(
        f"/api/v1/worker/jobs/{submission_id}/runs/..%2Fkeys", params={"attempt": 1}, content=b"x", headers=_worker(world)
    ).status_code in (404, 409)


def test_admin_reports_the_runs_held(world: World, client: TestClient) -> None:
    seed(world, "alice", "alice-for-retention", 0.5, through=client)
    files = list((world.state.root / "runs").rglob("*.run"))
    assert all((path.parent / "facts.json").is_file() for path in files)  # what a re-scoring needs besides the runs
    expected = (
        f"{len(files)} compact run(s) of {len({p.parent.parent.name for p in files})} submission(s): {sum(p.stat().st_size for p in files)} bytes"
    )
    assert files and admin(world.state.root, "runs").startswith(expected)


def _worker_cost(world: World) -> dict[str, Any]:
    """An honest worker's cost block for a grade of the world's tasks: the server's own counts, figures any CPU could do."""
    benchmark = resolve_benchmark(world.ctx.benchmark_target)
    entries = {}
    for name in world.ctx.tasks:
        task = benchmark.task(name)
        judged = task.qrels("test")
        queries = sum(1 for query in task.iter_queries() if query.id in judged)
        texts = sum(1 for _ in task.iter_corpus()) + queries
        usage = ResourceUsage(1.5, 200 << 20, "cgroup v2 cpu.stat and memory.peak")
        entries[name] = TaskCost(texts, queries, RankCost(10.0, usage, search_s=0.5), missing={"score_s": "the server scores"}).as_json()
    return cost_block(entries, source="worker")


def test_a_workers_cost_is_carried_labelled_as_its_word_and_shown_on_the_board(tmp_path: Path) -> None:
    world = make_world(tmp_path, None)  # its own board: a row with a cost block and one without
    client = TestClient(create_app(world.ctx))
    seed(world, "bob", "bob-uncosted", 0.4, through=client)
    seeded = seed(world, "carol", "carol-costed", 0.5, through=client, stated={"cost": _worker_cost(world)})
    cost = _stored_report(world, seeded.id)["cost"]
    assert cost["source"] == "worker" and cost["machine"]["fingerprint"] is None  # this seeded worker stated no fingerprint
    assert cost["total"]["cpu_s"] == 1.5 * len(world.ctx.tasks)
    rows = {e["submission"]: e for board in client.get("/api/v1/leaderboard").json()["boards"] for e in board["entries"]}
    assert rows[seeded.id]["cpu_s_per_1000_queries"] == round(cost["total"]["cpu_s_per_1000_queries"], 4)
    assert all("cpu_s_per_1000_queries" not in row for key, row in rows.items() if key != seeded.id)  # no cost block: absent
    assert "CPU s / 1k queries" in client.get("/").text
    exported = list(csv.DictReader(io.StringIO(client.get("/leaderboard.csv").text)))
    assert list(exported[0])[-1] == "cpu_s_per_1000_queries"  # last: the columns before it keep their places
    by_submission = {row["submission"]: row["cpu_s_per_1000_queries"] for row in exported}
    assert by_submission[seeded.id] == str(rows[seeded.id]["cpu_s_per_1000_queries"])  # the board's figure, as the JSON shows it
    assert all(figure == "" for key, figure in by_submission.items() if key != seeded.id)  # no cost block: an empty cell
    _check_cpu_quota(world, seeded.id, cost["total"]["cpu_s"])
    world.ctx.db.dispose()


def _check_cpu_quota(world: World, costed: str, spent: float) -> None:
    """Admission on CPU-minutes already spent: carol's one costed grade reaches a quota of exactly its minutes, not one above."""
    now = utcnow()
    with world.ctx.db.session() as session:
        carol = session.scalar(select(Submission.participant_id).where(Submission.id == costed))
        bob = session.scalar(select(Participant.id).where(Participant.name == "bob"))
        uploaded = session.scalar(select(Submission.uploaded_at).where(Submission.id == costed))

        def under(minutes: float) -> Competition:
            return replace(world.ctx.competition, quotas=replace(world.ctx.competition.quotas, cpu_minutes_per_day=minutes))

        status = quota_status(session, under(spent / 60), carol, "hidden", now)
        assert status.cpu_s_24h == spent and status.cpu_next_at == uploaded + timedelta(hours=24)
        with pytest.raises(RefusedSubmission, match=r"CPU quota used: your grades of the last 24 h cost .* CPU-minutes") as refused:
            check_quota(session, under(spent / 60), carol, "hidden", now, world.ctx.competition.end)
        assert refused.value.status == 429
        check_quota(session, under(spent / 60 + 0.01), carol, "hidden", now, world.ctx.competition.end)  # below it: admitted
        # bob's grade states no cost: nothing charged; and no CPU quota (the default) refuses no one
        assert quota_status(session, under(spent / 60), bob, "hidden", now).cpu_s_24h == 0.0
        assert quota_status(session, world.ctx.competition, carol, "hidden", now).cpu_minutes_per_day is None
