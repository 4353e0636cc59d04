"""Progress you can see (issue 34 item 2): a waiting grade's place, estimate and reason; a running grade's progress.

The estimate's arithmetic is redone here by hand (worker by worker), the median from the database's own rows;
the real server part drives a real ``grader serve`` over sockets: a participant's status and ``grader status
--watch`` while a worker (speaking the protocol by hand, as a remote worker does) claims and reports progress.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from grader.grading.interfaces import SEARCHING
from grader.hosting.clock import utcnow
from grader.hosting.db.models import Attempt, Submission
from grader.hosting.identity.principal import Principal, Role
from grader.hosting.keyring.worker_signing import ensure_worker_key, worker_public_key_path
from grader.hosting.participant.client import HostingClient
from grader.hosting.protocol.messages import HeartbeatRequest, Phase, QueueView, TaskProgress, WorkerResult
from grader.hosting.protocol.progress import queue_words, task_words
from grader.hosting.protocol.version import HEADER, WORKER_PROTOCOL
from grader.hosting.queue import lifecycle, shard_jobs
from grader.hosting.queue.dispatch import LocalDispatcher
from grader.hosting.results.grade_progress import GradeProgress
from grader.hosting.results.recording import AuthenticResult, Grading
from grader.hosting.services import jobs, progress
from grader.hosting.states import Track
from grader.hosting.worker.loop import Heartbeat, WorkerApi
from tests.hosting.support import REPO, Server, admin, claim_body, stated_fingerprint, wait_for, worker_headers, write_competition
from tests.hosting.world import World, new_submission

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"


def test_the_words_of_each_step() -> None:
    assert task_words(TaskProgress(task="t", phase=Phase.WAITING)) == "t: waiting"
    assert task_words(TaskProgress(task="t", phase=Phase.ENCODING, documents=500)) == "t: encoding 500 documents"
    assert task_words(TaskProgress(task="t", phase=Phase.ENCODING, documents=500, encoded=120)) == "t: encoding 120 of 500 documents"
    assert task_words(TaskProgress(task="t", phase=Phase.ENCODING, shards_done=1, shards=4)) == "t: encoding, shard 2 of 4"
    assert task_words(TaskProgress(task="t", phase=Phase.RANKED, shards_done=4, shards=4)) == "t: ranked, 4 of 4 shards ranked"
    assert task_words(TaskProgress(task="t", phase=Phase.SEARCHING)) == "t: searching"
    view = QueueView(position=2, ahead=1, running=1, workers=1, free_workers=0, starts_at="2026-01-01T00:01:00Z", ends_at="2026-01-01T00:02:00Z")
    assert queue_words(view) == (
        "position 2 in the queue (1 ahead, 1 running); starts about 2026-01-01T00:01:00Z; ends about 2026-01-01T00:02:00Z; 0 of 1 workers free"
    )
    assert queue_words(QueueView(position=1, waiting=progress.NO_WORKER)).endswith(
        "0 of 0 workers free; waiting: no worker of this competition is connected"
    )


def test_a_report_past_its_totals_is_refused_naming_the_field() -> None:
    for bad in (
        {"task": "t", "phase": "encoding", "documents": 5, "encoded": 6},
        {"task": "t", "phase": "encoding", "encoded": 1},
        {"task": "t", "phase": "encoding", "shards_done": 3, "shards": 2},
        {"task": "t", "phase": "dancing"},
        {"task": "t", "phase": "ranked", "secret": "x"},
    ):
        with pytest.raises(ValueError):
            TaskProgress.model_validate(bad)


def test_an_estimate_is_shown_to_the_next_whole_minute() -> None:
    assert progress.about(datetime(2026, 1, 1, 10, 4, 0, tzinfo=UTC)) == datetime(2026, 1, 1, 10, 4, tzinfo=UTC)
    assert progress.about(datetime(2026, 1, 1, 10, 4, 0, 1, tzinfo=UTC)) == datetime(2026, 1, 1, 10, 5, tzinfo=UTC)
    assert progress.about(datetime(2026, 1, 1, 23, 59, 30, tzinfo=UTC)) == datetime(2026, 1, 2, 0, 0, tzinfo=UTC)


def test_the_estimate_gives_each_grade_to_the_worker_free_first() -> None:
    # by hand: worker B is free at 10 s and takes the first grade ahead (10-70), worker A at 30 s the second (30-90);
    # ours goes to whoever is free first after that: B, at 70 s
    assert progress.start_after(2, 0, [30.0, 10.0], 60.0) == 70.0
    assert progress.start_after(0, 1, [30.0], 60.0) == 0.0  # a free worker takes it now
    assert progress.start_after(1, 1, [], 60.0) == 60.0  # one worker: after the one ahead
    assert progress.start_after(0, 0, [-5.0], 60.0) == 0.0  # a grade past its median: its worker is counted free now


def _median_of_results(world: World) -> tuple[float, int]:
    """The median of every accepted grade of the hidden track, from the rows (the seeded world has fewer than twenty)."""
    with world.db.session() as session:
        rows = session.execute(
            select(Attempt.claimed_at, Attempt.ended_at)
            .join(Submission, Submission.id == Attempt.submission_id)
            .where(Attempt.outcome == "result", Submission.track == Track.HIDDEN)
        ).all()
    spans = [(ended - claimed).total_seconds() for claimed, ended in rows]
    return statistics.median(spans), len(spans)


def _seconds(moment: str) -> datetime:
    return datetime.strptime(moment, "%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.board(seeded=True)
def test_a_queued_grade_knows_its_place_its_estimate_and_why_it_waits(world: World) -> None:
    ctx = world.ctx
    dispatcher = LocalDispatcher()
    first, second = world.by_name("bob-lsa").id, world.by_name("alice-encoder-v1").id
    for sid in (first, second):
        assert lifecycle.rejudge_submission(ctx.db, dispatcher, sid, max_attempts=5)
    with ctx.db.session() as session:
        order = sorted((session.get(Submission, sid).uploaded_at, sid) for sid in (first, second))  # type: ignore[union-attr]
    earlier, later = order[0][1], order[1][1]
    alone = progress.queue_view(ctx, later)
    assert alone is not None and (alone.position, alone.ahead, alone.workers) == (2, 1, 0)
    assert alone.waiting == progress.NO_WORKER and alone.starts_at is None  # nothing to count on: no estimate
    typical, count = _median_of_results(world)
    assert (alone.typical_s, alone.typical_of) == (pytest.approx(typical), count) and count > 0
    # a worker looks: one free worker takes the earlier grade now, then ours after one typical grade
    ctx.presence.seen(world.workers[0])
    seen = progress.queue_view(ctx, later)
    assert seen is not None and (seen.workers, seen.free_workers, seen.waiting) == (1, 1, None)
    assert seen.starts_at is not None and seen.ends_at is not None
    # shown to the next whole minute: the start is one typical grade from now (the worker takes the earlier one first)
    start = _seconds(seen.starts_at)
    assert start.second == 0 and timedelta(0) <= start - (utcnow().replace(tzinfo=None) + timedelta(seconds=typical)) <= timedelta(seconds=62)
    assert timedelta(0) <= _seconds(seen.ends_at) - start <= timedelta(seconds=typical + 60)
    # the worker takes the earlier one: ours is first; the running one has its start and no progress yet
    claim = lifecycle.claim(ctx.db, world.workers[0], lease_s=600)
    assert claim is not None and claim.submission_id == earlier
    assert progress.queue_view(ctx, later).position == 1  # type: ignore[union-attr]
    running = progress.queue_view(ctx, earlier)
    assert running is not None and running.position is None and running.running == 1 and running.progress == []
    # the worker is lost: the reaper re-queues the grade, which says why
    with ctx.db.session() as session:
        session.get(Submission, earlier).lease_expires_at = utcnow() - timedelta(seconds=1)  # type: ignore[union-attr]
    assert lifecycle.reap(ctx.db, dispatcher, redispatch_s=30).requeued == [earlier]
    assert progress.queue_view(ctx, earlier).waiting == progress.WORKER_LOST  # type: ignore[union-attr]
    assert progress.queue_view(ctx, world.by_name("carol-mystery").id) is None  # scored: nothing to follow


@pytest.mark.board(seeded=True)
def test_progress_is_kept_at_most_once_a_second_per_attempt(world: World) -> None:
    ctx = world.ctx
    sid = world.by_name("bob-lsa").id
    assert lifecycle.rejudge_submission(ctx.db, LocalDispatcher(), sid, max_attempts=5)
    claim = lifecycle.claim(ctx.db, world.workers[0], lease_s=600)
    assert claim is not None
    now = utcnow()

    def report(encoded: int, at: datetime) -> None:
        with ctx.db.session() as session:
            entry = TaskProgress(task=ctx.tasks[0], phase=Phase.ENCODING, documents=100, encoded=encoded)
            lifecycle.record_progress(session, sid, claim.attempt, {"tasks": [entry.model_dump(mode="json")]}, at)

    def kept() -> int | None:
        view = progress.queue_view(ctx, sid)
        assert view is not None
        return view.progress[0].encoded

    report(10, now)
    report(20, now + timedelta(seconds=0.5))  # within a second of the last kept: dropped
    assert kept() == 10
    report(30, now + timedelta(seconds=1.5))
    assert kept() == 30


def test_a_sharded_grade_shows_its_shards_from_the_servers_own_jobs(world: World) -> None:
    submission_id = new_submission(world)
    taken = lifecycle.claim(world.db, world.workers[0], 60)
    assert taken is not None and taken.submission_id == submission_id
    with world.db.session() as session:
        shard_jobs.plan(session, submission_id, taken.attempt, {"t": 3, "u": 1}, 3600)
    worker, fingerprint = world.workers[0], "a" * 64

    def shown() -> dict[str, str]:
        return {entry.task: task_words(entry) for entry in progress.shard_progress(world.db, submission_id, taken.attempt)}

    assert shown() == {"t": "t: encoding, shard 1 of 3", "u": "u: encoding, shard 1 of 1"}
    done = 0
    while (job := shard_jobs.claim(world.db, worker, fingerprint, 60)) is not None:  # query jobs first, then shards
        assert shard_jobs.complete(world.db, job.job_id, 1, worker, f"{done:064x}")
        done += 1
        if job.task == "t" and job.number == 0:
            assert shown()["t"] == "t: encoding, shard 2 of 3"  # the query job (-1) is no shard
    assert done == 6 and shown() == {"t": "t: ranked, 3 of 3 shards ranked", "u": "u: ranked, 1 of 1 shards ranked"}


@pytest.mark.board
def test_scoring_is_the_servers_own_step_shown_over_the_shards_and_never_a_workers_word(world: World) -> None:
    ctx = world.ctx
    task = ctx.tasks[0]
    submission_id = new_submission(world)
    taken = lifecycle.claim(ctx.db, world.workers[0], 600)
    assert taken is not None and taken.submission_id == submission_id
    with ctx.db.session() as session:
        shard_jobs.plan(session, submission_id, taken.attempt, {task: 2}, 3600)

    def shown() -> list[str]:
        return progress.progress_lines(progress.queue_view(ctx, submission_id))[1:]  # the task lines, after the queue line

    assert shown() == [f"{task}: encoding, shard 1 of 2"]
    # a worker that states the server's step: its lease is renewed, its report dropped whole (it would hide the shards)
    worker = Principal(Role.WORKER, world.workers[0], "w1")
    said = HeartbeatRequest(attempt=taken.attempt, progress=[TaskProgress(task=task, phase=Phase.SCORING)])
    assert jobs.renew(ctx, worker, submission_id, said) is not None
    assert shown() == [f"{task}: encoding, shard 1 of 2"]
    # the server's own word, as it scores a posted result's runs (what post_result records before scoring): over the shards
    grading = Grading(submission_id, taken.attempt, worker.id, worker.name, False, Track.HIDDEN, "test", "onnx", "0" * 64, world.pin_id, {})
    posted = WorkerResult(attempt=taken.attempt, facts={}, runs={task: "0" * 64})
    jobs._scoring(ctx, AuthenticResult(grading, posted))
    assert shown() == [f"{task}: scoring"]
    view = progress.queue_view(ctx, submission_id)
    assert view is not None and [entry.model_dump(exclude_none=True) for entry in view.progress] == [{"task": task, "phase": Phase.SCORING}]


@pytest.mark.slow
@pytest.mark.sqlite_only
def test_a_participant_follows_a_grade_through_a_real_server(tmp_path: Path) -> None:
    server = Server(write_competition(tmp_path / "c.toml"), tmp_path / "state", workers=0).start()
    watch = None
    try:
        participant = admin(server.state, "add-participant", "kim").strip()
        client = HostingClient(server.url, participant)
        first, second = client.submit(EXAMPLE)["id"], client.submit(EXAMPLE)["id"]
        view = client.status(second)
        assert view["queue"]["position"] == 2 and view["queue"]["waiting"] == progress.NO_WORKER
        # grader status --watch, into a log (not a terminal): a plain line per change
        log = tmp_path / "watch.log"
        env = {**os.environ, "GRADER_TOKEN": participant}
        command = [sys.executable, "-m", "grader", "status", first, "--server", server.url, "--watch", "--every", "0.2"]
        watch = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=open(log, "wb"), env=env, cwd=REPO)  # noqa: SIM115
        wait_for(lambda: "waiting: no worker of this competition is connected" in log.read_text(), 60, what="the waiting line")
        # a remote worker of this protocol claims and reports; one of protocol 3 is refused before anything
        key = tmp_path / "key"
        ensure_worker_key(key)
        token = admin(server.state, "add-worker", "w1", "--public-key", str(worker_public_key_path(key))).strip()
        old = httpx.post(f"{server.url}/api/v1/worker/jobs/{first}/heartbeat", json={"attempt": 1}, headers=worker_headers(token) | {HEADER: "3"})
        assert old.status_code == 426 and f"worker protocol 3 is not this server's {WORKER_PROTOCOL}" in old.json()["detail"]
        fingerprint = stated_fingerprint(server.url, token, ensure_worker_key(key))
        job = httpx.post(f"{server.url}/api/v1/worker/claim", json=claim_body(fingerprint, 5), headers=worker_headers(token)).json()
        assert job["submission_id"] == first
        task = job["tasks"][0]
        beat = f"{server.url}/api/v1/worker/jobs/{first}/heartbeat"
        bad = httpx.post(
            beat, json={"attempt": 1, "progress": [{"task": task, "phase": "encoding", "documents": 3, "encoded": 4}]}, headers=worker_headers(token)
        )
        assert bad.status_code == 422 and "encoded must come with documents and be at most documents" in bad.text
        sent = {"attempt": 1, "progress": [{"task": task, "phase": "encoding", "documents": 10, "encoded": 3}]}
        assert httpx.post(beat, json=sent, headers=worker_headers(token)).status_code == 200
        shown = client.status(first)["queue"]
        assert shown["progress"] == [{"task": task, "phase": "encoding", "documents": 10, "encoded": 3, "shards_done": None, "shards": None}]
        assert shown["starts_at"] is not None and shown["position"] is None
        assert client.status(second)["queue"]["waiting"] is None  # a worker is connected (busy): the reason is gone
        wait_for(lambda: f"{task}: encoding 3 of 10 documents" in log.read_text(), 60, what="the progress line")
        # a task the competition does not grade is never stored (a worker's words reach a participant)
        forged = {"attempt": 1, "progress": [{"task": "<b>nope</b>", "phase": "ranked"}]}
        assert httpx.post(beat, json=forged, headers=worker_headers(token)).status_code == 200
        assert "nope" not in str(client.status(first))
        # the worker's own parts: the grading child's progress file, sent by the heartbeat thread as it changes
        api = WorkerApi(server.url, token, ensure_worker_key(key))
        heartbeat = Heartbeat(api, first, 1, period=30.0)
        heartbeat.progress_file = tmp_path / "progress.json"
        grade = GradeProgress(list(job["tasks"]), heartbeat.progress_file)
        heartbeat.start()
        last = job["tasks"][-1]
        grade.task_started(last, documents=7, queries=2)
        wait_for(lambda: _shown(client, first, last) == "encoding", 60, what="the worker's report")
        assert {"task": last, "phase": "encoding", "documents": 7, "encoded": None, "shards_done": None, "shards": None} in client.status(first)[
            "queue"
        ]["progress"]
        grade.stage(last, SEARCHING)
        wait_for(lambda: _shown(client, first, last) == "searching", 60, what="the worker's next report")
        wait_for(lambda: f"{last}: searching" in log.read_text(), 60, what="the watch's line of it")
        admin(server.state, "cancel", first)
        grade.task_finished(last, {"status": "ranked", "failure": None}, resumed=False)  # new progress: beaten at once, not in 30 s
        wait_for(heartbeat.lost.is_set, 60, what="the heartbeat told to stop")  # 409: the grade is stopped
        heartbeat.done.set()
        out, _ = watch.communicate(timeout=60)
        assert watch.returncode == 3  # cancelled: the exit status of --wait
        lines = log.read_text().splitlines()
        assert len(lines) == len(set(lines))  # a line per change, never one per look
        assert out.decode().startswith(f"{first}  cancelled")
    finally:
        if watch is not None and watch.poll() is None:
            watch.kill()
        server.stop()


def _shown(client: HostingClient, submission_id: str, task: str) -> str | None:
    """The phase the server shows of ``task`` of a running grade (None: none reported)."""
    queue = client.status(submission_id).get("queue") or {}
    return next((entry["phase"] for entry in queue.get("progress", []) if entry["task"] == task), None)
